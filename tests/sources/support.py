"""What the source tests share beyond tests/harness: their budget and a digest."""

from __future__ import annotations

import hashlib

# Two retries, waits capped at 5 s: the hub's and S3's retry paths need both.
BUDGET = {
    "LLMKUBE_CONNECT_TIMEOUT": "2",
    "LLMKUBE_STALL_TIMEOUT": "2",
    "LLMKUBE_RETRIES": "2",
    "LLMKUBE_MAX_RETRY_WAIT": "5",
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
