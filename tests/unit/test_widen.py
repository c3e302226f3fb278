"""When one stream hands over to ranged connections (transfer/widen.py,
issues #6, #16): early when the stream is slow and flat, at the latest after
the probe time, on the rate of that attempt from its first byte."""

from __future__ import annotations

from llmkube_stager.transfer.widen import WidenRule

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


def _flow(rule: WidenRule, clock: Clock, offset: int, rate: float, seconds: float) -> bool:
    """Bytes arriving at `rate` every 10 ms for `seconds`; True as soon as
    the rule wants more connections."""
    for _ in range(round(seconds / 0.01)):
        clock.now_s += 0.01
        offset += int(rate * 0.01)
        if rule.wants_more(offset, 2000 * MB):
            return True
    return False


def test_a_slow_stream_widens_once_the_probe_time_has_passed() -> None:
    clock = Clock()
    rule = _begun(_rule(clock), 0)
    clock.now_s += 0.2
    assert not rule.wants_more(10 * MB, 2000 * MB), "judged before the early time"
    clock.now_s += 0.8
    assert rule.wants_more(50 * MB, 2000 * MB)
    assert rule.rate_bytes_per_s == 50 * MB


def test_a_flat_slow_stream_widens_early() -> None:
    """A capped connection (20 MB/s) after nginx's first chunk: no need to
    wait for the whole probe second (#16: that second cost a quarter)."""
    clock = Clock()
    rule = _begun(_rule(clock), 2 * MB)
    assert _flow(rule, clock, 2 * MB, 20 * MB, 0.35)
    assert clock.now_s - 100.0 <= 0.31
    assert rule.rate_bytes_per_s < 25 * MB


def test_a_stream_speeding_up_is_not_judged_early() -> None:
    """TCP slow start on a long path: slow at first, doubling. Not widened
    while it ramps up; judged on its first second like before."""
    clock = Clock()
    rule = _begun(_rule(clock), 0)
    offset, rate = 0, 5 * MB
    for _ in range(9):  # 0.9 s, the rate doubling every 0.1 s up to 1.28 GB/s
        for _ in range(10):
            clock.now_s += 0.01
            offset += int(rate * 0.01)
            assert not rule.wants_more(offset, 2000 * MB), f"widened at {offset / MB:.0f} MB"
        rate = min(2 * rate, 1280 * MB)
    assert not _flow(rule, clock, offset, rate, 0.2)  # above the line by the probe time


def test_a_stream_still_slow_after_speeding_up_widens_at_the_probe_time() -> None:
    clock = Clock()
    rule = _begun(_rule(clock), 0)
    offset = 0
    for step in range(1, 100):
        clock.now_s += 0.01
        offset += step * 2000  # accelerating, but only to ~20 MB/s
        assert not rule.wants_more(offset, 2000 * MB)
    assert _flow(rule, clock, offset, 20 * MB, 0.05)


def test_a_burst_then_a_cap_is_slow() -> None:
    """An origin that sends 30 MB at once, then 20 MB/s: widened once its
    average is below the line, not taken for fast by the burst."""
    clock = Clock()
    rule = _begun(_rule(clock), 30 * MB)
    assert _flow(rule, clock, 30 * MB, 20 * MB, 1.0)
    assert clock.now_s - 100.0 < 0.5


def test_a_fast_stream_is_never_widened_later() -> None:
    clock = Clock()
    rule = _begun(_rule(clock), 0)
    assert not _flow(rule, clock, 0, 900 * MB, 1.0)
    clock.now_s += 10.0  # the origin slows down later: the decision stands
    assert not rule.wants_more(901 * MB, 2000 * MB)
    assert not _flow(rule, clock, 901 * MB, 10 * MB, 1.0)


def test_the_rate_counts_from_where_the_attempt_began() -> None:
    clock = Clock()
    rule = _begun(_rule(clock), 1000 * MB)  # a resumed partial: not this stream's bytes
    clock.now_s += 0.5
    assert not rule.wants_more(1050 * MB, 2000 * MB)
    clock.now_s += 0.5
    assert rule.wants_more(1100 * MB, 2000 * MB)
    assert rule.rate_bytes_per_s == 100 * MB


def test_too_little_left_to_split_stays_one_stream() -> None:
    clock = Clock()
    rule = _begun(_rule(clock), 0)
    clock.now_s += 0.5
    assert not rule.wants_more(5 * MB, 40 * MB)
    clock.now_s += 0.5
    assert not rule.wants_more(10 * MB, 40 * MB)
    clock.now_s += 0.5
    assert not rule.wants_more(15 * MB, 2000 * MB), "decided once"


def test_the_time_to_first_byte_is_not_counted() -> None:
    clock = Clock()
    rule = _rule(clock)
    rule.begin()
    clock.now_s += 3.0  # a cold server takes 3 s to answer, then streams fast
    assert not rule.wants_more(4 * MB, 2000 * MB)
    assert not _flow(rule, clock, 4 * MB, 600 * MB, 1.0)


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
