"""Fixtures of the storage tests (#21): the cache volume is a real
filesystem (ext4 or XFS on a loop device, tmpfs: tests/harness/blockdev.py),
the stager runs as a subprocess (`pod`), the origin is the suite's loopback
one. Every mount and loop device a test makes is undone by its fixture."""

from __future__ import annotations

from collections.abc import Mapping

import pytest


@pytest.fixture
def pod_budget() -> Mapping[str, str]:
    return {
        "LLMKUBE_CONNECT_TIMEOUT": "2",
        "LLMKUBE_STALL_TIMEOUT": "3",
        "LLMKUBE_RETRIES": "0",
        "LLMKUBE_MAX_RETRY_WAIT": "1",
        "LLMKUBE_LOCK_TIMEOUT": "5",
    }
