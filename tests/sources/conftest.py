"""Fixtures of the source tests (the shared ones are in tests/conftest.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping

import pytest

from tests.harness.pod import SOURCE_BUDGET


@pytest.fixture
def pod_budget() -> Mapping[str, str]:
    return SOURCE_BUDGET


@pytest.fixture(scope="session", autouse=True)
def _no_hub_telemetry() -> Iterator[None]:
    """In-process runs import huggingface_hub into the test process: keep its
    agent-harness registry fetch (to huggingface.co, the default endpoint)
    off the network. Subprocess runs get a minimal env and show the real
    behavior (test_hf.py)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        constants = sys.modules.get("huggingface_hub.constants")
        if constants is not None:  # imported earlier in this session
            patch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
        yield
