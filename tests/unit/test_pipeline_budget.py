"""The pipeline's buffers shrink to keep the process within its memory budget
(pipeline.buffer_bytes_within; #6: peak RSS <= 64 MiB)."""

from __future__ import annotations

from llmkube_stager.transfer.pipeline import DEPTH, MEMORY_BUDGET_BYTES, buffer_bytes_within

MIB = 1 << 20


def test_a_lean_process_gets_full_size_buffers() -> None:
    assert buffer_bytes_within(MEMORY_BUDGET_BYTES, 30 * MIB) == 4 * MIB


def test_a_process_holding_boto3_gets_smaller_ones_within_the_budget() -> None:
    resident = 51 * MIB  # measured: boto3 + an S3 client after HEAD and presign
    size = buffer_bytes_within(MEMORY_BUDGET_BYTES, resident)
    assert size == 2 * MIB
    assert resident + DEPTH * size <= MEMORY_BUDGET_BYTES


def test_never_below_one_mebibyte() -> None:
    assert buffer_bytes_within(MEMORY_BUDGET_BYTES, 200 * MIB) == MIB


def test_the_parallel_hash_window_shrinks_when_the_process_holds_much() -> None:
    """#16: the mapped window counts in RSS; huggingface_hub or boto3 loaded
    leaves less room for it under the 64 MiB budget."""
    from llmkube_stager.transfer.prefixhash import HASH_WINDOW_BYTES, window_bytes_within

    budget = 64 << 20
    assert window_bytes_within(budget, 30 << 20) == HASH_WINDOW_BYTES
    assert window_bytes_within(budget, 52 << 20) == 8 << 20
    assert window_bytes_within(budget, 63 << 20) == 2 << 20
