"""Fixtures of the in-process HTTP staging integration tests.

`pod.stage` runs the stage pipeline in-process against the loopback `Origin`
(real sockets on 127.0.0.1) and real files under `tmp_path`. Retry waits go
through an injected `sleep` that records the requested seconds and returns at
once, so retry tests are fast and can assert the waits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping

import pytest

from tests.harness.origin import Origin


@pytest.fixture
def pod_budget() -> Mapping[str, str]:
    """Short budgets so failure paths end in about a second, two retries and
    the default retry-wait cap; a test overrides them."""
    return {"LLMKUBE_CONNECT_TIMEOUT": "1", "LLMKUBE_STALL_TIMEOUT": "1", "LLMKUBE_RETRIES": "2"}


@pytest.fixture
def origin_b() -> Iterator[Origin]:
    """A second, independent host (redirect target)."""
    with Origin() as srv:
        yield srv


@pytest.fixture
def watchdog() -> Iterator[Callable[[float, Callable[[], None]], None]]:
    """watchdog(seconds, action): run `action` (e.g. close the origin) if the test
    is still running after `seconds`, so a missing timeout in the code under test
    fails the test's elapsed-time bound instead of hanging the suite."""
    timers: list[threading.Timer] = []

    def arm(seconds: float, action: Callable[[], None]) -> None:
        timer = threading.Timer(seconds, action)
        timer.daemon = True
        timer.start()
        timers.append(timer)

    yield arm
    for timer in timers:
        timer.cancel()
