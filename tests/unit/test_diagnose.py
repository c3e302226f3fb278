"""diagnose: termination messages and log tails -> conditions (spec §11, §15.2 scenario 94)."""

from __future__ import annotations

import json

import pytest

from llmkube_stager.commands.diagnose import condition_for
from llmkube_stager.errors import (
    REMEDY_LOCK_UNSUPPORTED_PREFETCH,
    REMEDY_LOCK_UNSUPPORTED_S3,
    Reason,
    StagerError,
)
from llmkube_stager.termination import encode, failure_doc


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("curl: (22) The requested URL returned error: 403", "ModelSourceUnauthorized"),
        (
            "curl: (60) SSL certificate OpenSSL verify result: unable to get local issuer "
            "certificate (20)",
            "ModelSourceUntrusted",
        ),
        ("curl: (6) Could not resolve host: nope.invalid.internal", "ModelSourceUnreachable"),
        (
            "curl: (7) Failed to connect to 10.0.0.5 port 9000: Connection refused",
            "ModelSourceUnreachable",
        ),
        ("sh: write error: No space left on device", "ModelTransferOutOfSpace"),
        ("<Code>NoSuchKey</Code>", "ModelSourceNotFound"),
    ],
)
def test_s94_each_signature_of_the_operator_is_diagnosed(line: str, reason: str) -> None:
    condition = condition_for(f"Downloading model...\n{line}\n")
    assert condition is not None
    assert condition["reason"] == reason
    assert condition["status"] == "False"
    assert line.strip()[:40] in condition["message"]


def test_s94_unknown_text_is_not_diagnosed() -> None:
    assert condition_for("curl: (18) transfer closed with outstanding read data remaining") is None


def test_the_structured_message_wins_and_keeps_its_remedy() -> None:
    err = StagerError("gone", reason=Reason.SOURCE_NOT_FOUND, file="m.gguf")
    text = encode(failure_doc(err, "http://h/m.gguf", lambda s: s)).decode()
    condition = condition_for(text)
    assert condition is not None
    assert condition["reason"] == "ModelSourceNotFound"
    assert condition["retryable"] is False
    assert err.remedy in condition["message"]


def test_success_message_recovers_the_condition() -> None:
    doc = {"v": 1, "outcome": "succeeded", "reason": "ModelTransferSucceeded", "retryable": False}
    assert condition_for(json.dumps(doc)) == {
        "type": "ModelTransferHealthy",
        "status": "True",
        "reason": "ModelTransferSucceeded",
        "message": "Model weights staged successfully",
    }


@pytest.mark.parametrize("remedy", [REMEDY_LOCK_UNSUPPORTED_PREFETCH, REMEDY_LOCK_UNSUPPORTED_S3])
def test_s55_lock_refusal_in_a_log_tail_keeps_the_printed_remedy(remedy: str) -> None:
    line = (
        "ERROR: ModelCacheLockUnsupported: FUSE cache cannot guarantee cross-node file locking "
        f"for staging model.safetensors; {remedy}"
    )
    condition = condition_for("Downloading...\n" + line)
    assert condition is not None
    assert condition["reason"] == "ModelCacheLockUnsupported"
    assert condition["message"].endswith(remedy)
