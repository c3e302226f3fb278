"""progress.progress_text: the old `download_with_progress` lines (spec §5.4, scenario 89)."""

from __future__ import annotations

import pytest

from llmkube_stager.transfer.progress import MIB, progress_text


@pytest.mark.parametrize(
    ("done", "total", "text"),
    [
        (2 * MIB, 4 * MIB, "Downloaded 2 MiB of 4 MiB (50%)"),
        (2 * MIB, None, "Downloaded 2 MiB"),
        (2 * MIB, 0, "Downloaded 2 MiB"),
        (0, None, "Downloaded 0 MiB"),
        (0, 0, "Downloaded 0 MiB"),
        (0, 4 * MIB, "Downloaded 0 MiB of 4 MiB (0%)"),
        (4 * MIB, 4 * MIB, "Downloaded 4 MiB of 4 MiB (100%)"),
        (MIB - 1, None, "Downloaded 0 MiB"),  # whole MiB, rounded down
        (3 * MIB - 1, 4 * MIB, "Downloaded 2 MiB of 4 MiB (74%)"),
        (512 * MIB, 1024 * MIB, "Downloaded 512 MiB of 1024 MiB (50%)"),
        (5 * MIB, 4 * MIB, "Downloaded 5 MiB of 4 MiB (100%)"),  # never above 100%
        (100, 300, "Downloaded 0 MiB of 0 MiB (33%)"),
    ],
)
def test_progress_text(done: int, total: int | None, text: str) -> None:
    assert progress_text(done, total) == text


@pytest.mark.parametrize("total", [None, 0])
def test_no_percent_without_a_total(total: int | None) -> None:
    text = progress_text(7 * MIB, total)
    assert "%" not in text
    assert " of " not in text


def test_no_carriage_return_or_newline() -> None:
    for done in range(0, 10 * MIB, MIB // 3):
        for total in (None, 0, 10 * MIB):
            text = progress_text(done, total)
            assert "\r" not in text
            assert "\n" not in text
            assert text.startswith("Downloaded ")
