"""When one stream hands the rest of a file over to ranged connections
(engine.py, #6, #16).

One connection is the cheapest path from an origin that serves it fast; an
origin that caps each connection (a CDN edge) is the case where it is the
slowest. The stream is judged as its bytes arrive, from its first byte (the
request's latency and a cold server's time to first byte say nothing of a
cap):

- early, from EARLY_S on: widen when the average rate is below the line and
  the stream is flat (the second half of the elapsed time no faster than
  RISING times the first half). A capped origin is flat at its
  cap after a short burst (nginx sends one chunk, then paces), so it is
  recognised after ~0.3 s instead of a whole second: at 20 MB/s per
  connection, that second was a quarter of a 512 MiB transfer over 8
  connections;
- at PROBE_S, as before: widen when the average is below the line, whatever
  its shape. A stream still ramping up until then (TCP slow start on a long
  path) is judged on its first second.

A fast stream is never widened: above the line nothing is decided early,
and at PROBE_S the decision to stay is final.
"""

from __future__ import annotations

from collections.abc import Callable

# Judged early from here (seconds after the first byte).
EARLY_S = 0.3
# "Speeding up": the second half of the elapsed time this much faster.
RISING = 1.5
# Marks at least this far apart (the rate of each half needs one).
_MARK_EVERY_S = 0.02


class WidenRule:
    """Decides once per transfer whether one connection is too slow and
    the rest should go over ranged connections. Only worth it with enough
    left to split (`min_rest_bytes`)."""

    def __init__(
        self,
        below_bytes_per_s: float,
        probe_s: float,
        min_rest_bytes: int,
        clock: Callable[[], float],
        early_s: float = EARLY_S,
    ) -> None:
        self._below = below_bytes_per_s
        self._probe_s = probe_s
        self._early_s = min(early_s, probe_s)
        self._min_rest = min_rest_bytes
        self._clock = clock
        self._marks: list[tuple[float, int]] = []
        self._decided = False
        self.rate_bytes_per_s = 0.0

    def begin(self) -> None:
        """A new attempt: judged afresh from its first bytes."""
        self._marks = []

    def wants_more(self, offset: int, expected: int | None) -> bool:
        """Called as bytes arrive, `offset` the end of what arrived."""
        if self._decided or expected is None:
            return False
        now_s = self._clock()
        marks = self._marks
        if not marks or now_s - marks[-1][0] >= _MARK_EVERY_S:
            marks.append((now_s, offset))
        started_s, start_offset = marks[0]
        elapsed_s = now_s - started_s
        if elapsed_s < self._early_s:
            return False
        self.rate_bytes_per_s = (offset - start_offset) / elapsed_s
        slow = self.rate_bytes_per_s < self._below
        if elapsed_s < self._probe_s and (not slow or not self._flat(now_s, offset)):
            return False
        self._decided = True
        return slow and expected - offset >= self._min_rest

    def _flat(self, now_s: float, offset: int) -> bool:
        """The second half of the elapsed time no faster than RISING times
        the first; False when the marks cannot tell."""
        started_s, start_offset = self._marks[0]
        half_s = started_s + (now_s - started_s) / 2
        mid_s, mid_offset = max(m for m in self._marks if m[0] <= half_s)
        if mid_s - started_s < (now_s - started_s) / 4:
            return False  # no bytes arrived early enough to compare
        first = (mid_offset - start_offset) / (mid_s - started_s)
        second = (offset - mid_offset) / (now_s - mid_s)
        return second <= RISING * first
