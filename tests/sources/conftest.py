"""Fixtures of the source tests: a sandbox, a fake hub with its CDN. The
S3 server (SeaweedFS, `s3` and `bucket`) comes from tests/conftest.py."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sources.support import HF_TOKEN, Sandbox
from tests.harness.hub import FakeHub
from tests.harness.origin import Origin


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


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path)


@pytest.fixture
def cdn() -> Iterator[Origin]:
    with Origin() as origin:
        yield origin


@pytest.fixture
def hub(cdn: Origin) -> Iterator[FakeHub]:
    with FakeHub(cdn, tokens={HF_TOKEN}) as fake:
        yield fake


@pytest.fixture
def payload() -> Callable[..., bytes]:
    """Deterministic pseudo-random bytes: payload(size, seed=1)."""

    def make(size: int, seed: int = 1) -> bytes:
        return random.Random(seed).randbytes(size)

    return make
