"""retry.RetryBudget: bounded backoff, Retry-After, refunds (CONTRACT §3 LLMKUBE_RETRIES)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import pytest

from llmkube_stager.config import Timeouts
from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.logs import Log
from llmkube_stager.transfer.retry import RetryBudget


class Harness:
    """A budget with a recorded fake sleep and a JSON log in memory."""

    def __init__(self, retries: int = 5, max_wait_s: float = 60.0) -> None:
        self.waits: list[float] = []
        self.stream = io.StringIO()
        self.budget = RetryBudget(
            Timeouts(retries=retries, max_retry_wait_s=max_wait_s),
            sleep=self.waits.append,
            log=Log(self.stream, "json"),
            jitter=lambda: 0.0,
        )

    def events(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.stream.getvalue().splitlines()]


def transient(
    detail: str = "GET https://h/x returned HTTP 503", retry_after_s: float | None = None
) -> SourceError:
    return SourceError(
        detail, reason=Reason.SOURCE_UNAVAILABLE, transient=True, retry_after_s=retry_after_s
    )


class Failing:
    """Raises a fresh error for the first `times` calls, then returns "ok"."""

    def __init__(self, times: int, error: Callable[[], SourceError]) -> None:
        self.times = times
        self.error = error
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.times:
            raise self.error()
        return "ok"


def failing(times: int, error: Callable[[], SourceError]) -> Failing:
    return Failing(times, error)


def test_exponential_backoff_without_jitter() -> None:
    h = Harness(retries=5)
    assert h.budget.call(failing(5, transient), "GET model.gguf") == "ok"
    assert h.waits == [0.25, 0.5, 1.0, 2.0, 4.0]


def test_backoff_is_capped_by_max_retry_wait() -> None:
    h = Harness(retries=6, max_wait_s=1.5)
    assert h.budget.call(failing(6, transient), "GET") == "ok"
    assert h.waits == [0.25, 0.5, 1.0, 1.5, 1.5, 1.5]
    assert max(h.waits) <= 1.5


def test_full_jitter_stays_within_the_cap() -> None:
    waits: list[float] = []
    budget = RetryBudget(
        Timeouts(retries=8, max_retry_wait_s=3.0), waits.append, Log(io.StringIO()), lambda: 1.0
    )
    budget.call(failing(8, transient), "GET")
    assert waits == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0]


def test_retry_after_is_honoured() -> None:
    h = Harness(retries=3, max_wait_s=60.0)
    fn = failing(2, lambda: transient(retry_after_s=7.0))
    assert h.budget.call(fn, "GET") == "ok"
    assert h.waits == [7.0, 7.0]


def test_retry_after_zero_retries_at_once() -> None:
    h = Harness(retries=1)
    assert h.budget.call(failing(1, lambda: transient(retry_after_s=0.0)), "GET") == "ok"
    assert h.waits == [0.0]


def test_gives_up_after_retries_and_reraises_the_last_error() -> None:
    h = Harness(retries=3)
    errors: list[SourceError] = []

    def fn() -> str:
        errors.append(transient(f"attempt {len(errors) + 1}"))
        raise errors[-1]

    with pytest.raises(SourceError) as info:
        h.budget.call(fn, "GET")
    assert len(errors) == 4  # the first attempt and 3 retries
    assert info.value is errors[-1]
    assert len(h.waits) == 3


def test_zero_retries_means_one_attempt() -> None:
    h = Harness(retries=0)
    fn = failing(1, transient)
    with pytest.raises(SourceError):
        h.budget.call(fn, "GET")
    assert fn.calls == 1
    assert h.waits == []


@pytest.mark.parametrize(
    "reason",
    [Reason.SOURCE_NOT_FOUND, Reason.SOURCE_UNAUTHORIZED, Reason.SOURCE_REJECTED],
)
def test_non_transient_errors_raise_at_once(reason: Reason) -> None:
    h = Harness(retries=5)
    fn = failing(1, lambda: SourceError("HTTP 4xx", reason=reason, transient=False))
    with pytest.raises(SourceError) as info:
        h.budget.call(fn, "GET")
    assert info.value.reason is reason
    assert fn.calls == 1
    assert h.waits == []
    assert h.events() == []


def test_retry_after_longer_than_the_cap_ends_at_once() -> None:
    h = Harness(retries=5, max_wait_s=60.0)
    fn = failing(1, lambda: transient("HTTP 429", retry_after_s=3600.0))
    with pytest.raises(SourceError) as info:
        h.budget.call(fn, "GET")
    assert h.waits == []
    assert fn.calls == 1
    assert "LLMKUBE_MAX_RETRY_WAIT" in info.value.detail
    assert "3600" in info.value.detail


def test_retry_after_equal_to_the_cap_is_waited() -> None:
    h = Harness(retries=1, max_wait_s=30.0)
    assert h.budget.call(failing(1, lambda: transient(retry_after_s=30.0)), "GET") == "ok"
    assert h.waits == [30.0]


def test_refund_restores_the_budget() -> None:
    h = Harness(retries=2)
    for _ in range(2):
        h.budget.spend(transient(), "GET")
    with pytest.raises(SourceError):
        h.budget.spend(transient(), "GET")
    h.budget.refund()
    h.budget.spend(transient(), "GET")
    h.budget.spend(transient(), "GET")
    # Backoff restarts from the base after a refund.
    assert h.waits == [0.25, 0.5, 0.25, 0.5]
    with pytest.raises(SourceError):
        h.budget.spend(transient(), "GET")


def test_each_retry_logs_a_warning() -> None:
    h = Harness(retries=3)
    h.budget.call(failing(2, transient), "GET model.gguf")
    events = h.events()
    assert [e["event"] for e in events] == ["retry", "retry"]
    assert all(e["level"] == "warning" for e in events)
    assert [e["attempt"] for e in events] == [1, 2]
    assert all(e["of"] == 3 for e in events)
    first = events[0]["msg"]
    assert isinstance(first, str)
    assert "HTTP 503" in first
    assert "GET model.gguf" in first
    assert "retrying GET model.gguf in 0.2s" in first


def test_retry_warning_in_text_format() -> None:
    stream = io.StringIO()
    waits: list[float] = []
    budget = RetryBudget(Timeouts(retries=1), waits.append, Log(stream, "text"), lambda: 0.0)
    budget.call(failing(1, transient), "GET model.gguf")
    (line,) = stream.getvalue().splitlines()
    assert line.startswith("WARNING: GET https://h/x returned HTTP 503; retrying GET model.gguf")
    assert "attempt=1" in line
    assert "of=1" in line
    assert waits == [0.25]
