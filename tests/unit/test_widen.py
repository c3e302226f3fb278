"""When one stream hands over to ranged connections (transfer/stream.WidenRule,
issue #6): judged once, after the probe time, on the rate of that attempt."""

from __future__ import annotations

from llmkube_stager.transfer.stream import WidenRule

MB = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def _rule(clock: Clock, min_rest: int = 32 * MB) -> WidenRule:
    return WidenRule(250 * MB, 1.0, min_rest, clock)


def _begun(rule: WidenRule, offset: int) -> WidenRule:
    """An attempt whose first bytes (up to `offset`) just arrived."""
    rule.begin()
    assert not rule.wants_more(offset, 2000 * MB)
    return rule


def test_a_slow_stream_widens_once_the_probe_time_has_passed() -> None:
    clock = Clock()
    rule = _begun(_rule(clock), 0)
    clock.now_s += 0.5
    assert not rule.wants_more(25 * MB, 2000 * MB), "judged before the probe time"
    clock.now_s += 0.5
    assert rule.wants_more(50 * MB, 2000 * MB)
    assert rule.rate_bytes_per_s == 50 * MB


def test_a_fast_stream_is_never_widened_later() -> None:
    clock = Clock()
    rule = _begun(_rule(clock), 0)
    clock.now_s += 1.0
    assert not rule.wants_more(900 * MB, 2000 * MB)
    clock.now_s += 10.0  # the origin slows down later: the decision stands
    assert not rule.wants_more(901 * MB, 2000 * MB)


def test_the_rate_counts_from_where_the_attempt_began() -> None:
    clock = Clock()
    rule = _begun(_rule(clock), 1000 * MB)  # a resumed partial: not this stream's bytes
    clock.now_s += 1.0
    assert rule.wants_more(1100 * MB, 2000 * MB)
    assert rule.rate_bytes_per_s == 100 * MB


def test_too_little_left_to_split_stays_one_stream() -> None:
    clock = Clock()
    rule = _begun(_rule(clock), 0)
    clock.now_s += 1.0
    assert not rule.wants_more(10 * MB, 40 * MB)


def test_the_time_to_first_byte_is_not_counted() -> None:
    clock = Clock()
    rule = _rule(clock)
    rule.begin()
    clock.now_s += 3.0  # a cold server takes 3 s to answer, then streams fast
    assert not rule.wants_more(4 * MB, 2000 * MB)
    clock.now_s += 1.0
    assert not rule.wants_more(600 * MB, 2000 * MB)


def test_a_failed_attempt_restarts_the_probe() -> None:
    clock = Clock()
    rule = _begun(_rule(clock), 0)
    clock.now_s += 0.9
    _begun(rule, 5 * MB)  # the first attempt failed early; the retry is judged afresh
    clock.now_s += 0.5
    assert not rule.wants_more(300 * MB, 2000 * MB)
    clock.now_s += 0.5
    assert not rule.wants_more(400 * MB, 2000 * MB)  # 395 MB in 1 s: fast


def test_an_unknown_size_is_never_split() -> None:
    clock = Clock()
    rule = _begun(_rule(clock), 0)
    clock.now_s += 2.0
    assert not rule.wants_more(MB, None)
