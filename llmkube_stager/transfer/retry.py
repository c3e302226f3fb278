"""Bounded retries with exponential backoff and Retry-After (CONTRACT §3).

Never an unbounded wait: at most LLMKUBE_RETRIES further attempts per request,
each wait capped by LLMKUBE_MAX_RETRY_WAIT; a Retry-After longer than the cap
ends the attempts at once rather than sleeping past the budget.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import TypeVar

from llmkube_stager.config import Timeouts
from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.logs import Log

T = TypeVar("T")
BASE_BACKOFF_S = 0.5


class RetryBudget:
    """Attempts left for one request; a transfer that made real progress
    earns its budget back, so a long download can survive several stalls
    while a flapping origin still ends (each refund needs fresh bytes)."""

    def __init__(
        self,
        timeouts: Timeouts,
        sleep: Callable[[float], None],
        log: Log,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._retries = timeouts.retries
        self._max_wait_s = timeouts.max_retry_wait_s
        self._sleep = sleep
        self._log = log
        self._jitter = jitter
        self._used = 0

    def refund(self) -> None:
        self._used = 0

    def wait_s(self, error: SourceError) -> float:
        if error.retry_after_s is not None:
            return error.retry_after_s
        backoff: float = BASE_BACKOFF_S * 2.0**self._used
        # Half fixed, half jittered, so that pods restarted together spread out.
        return min(self._max_wait_s, backoff * (0.5 + 0.5 * self._jitter()))

    def spend(self, error: SourceError, what: str) -> None:
        """Sleep before the next attempt, or re-raise when none is left."""
        if not error.transient:
            raise error
        if self._used >= self._retries:
            raise _with_window(error, f"after {self._used} retries")
        wait = self.wait_s(error)
        if wait > self._max_wait_s:
            # #22 item 5: no request inside a window longer than the agent
            # may wait; the message says how long it is (a controller can
            # requeue after it: the termination message's retryAfterSeconds).
            raise _with_window(error, f"more than LLMKUBE_MAX_RETRY_WAIT={self._max_wait_s:g}s")
        self._used += 1
        self._log.warning(
            "retry",
            f"{error.detail}; retrying {what} in {wait:.1f}s",
            attempt=self._used,
            of=self._retries,
        )
        self._sleep(wait)

    def call(self, fn: Callable[[], T], what: str) -> T:
        while True:
            try:
                return fn()
            except SourceError as error:
                self.spend(error, what)


def _with_window(error: SourceError, why: str) -> SourceError:
    """The final error: how long the origin asked to be left alone, in its
    message (a new error: the one raised is never changed, #32 item 5)."""
    if error.retry_after_s is None:
        return error
    seconds = math.ceil(error.retry_after_s)
    if error.reason is Reason.SOURCE_RATE_LIMITED:
        said = f" (rate limited: the origin's window reopens in {seconds} s; {why})"
    else:
        said = f" (the origin asked to wait {seconds} s; {why})"
    return error.amended(detail=error.detail + said)
