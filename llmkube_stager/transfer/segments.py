"""The completed byte ranges of a segmented transfer (#6), how the missing
ones are cut into work for N connections, and how often they are
journaled (#32 item 4: apart from the transfer's workers, parallel.py, and
its hash, prefixhash.py)."""

from __future__ import annotations

import threading

from llmkube_stager.transfer.directio import ALIGN_BYTES

MIN_ITEM_BYTES = 16 << 20
MAX_ITEM_BYTES = 256 << 20
# Progress journaled at least this often: a SIGKILL re-fetches at most this
# much plus the ranges in flight.
JOURNAL_EVERY_BYTES = 64 << 20
JOURNAL_EVERY_S = 2.0
# While a transfer is young its journal is committed more often (#21 item 9):
# every quarter of its age, JOURNAL_FIRST_S at the least, so that a kill loses
# about a quarter of a second of transfer per connection early on and a
# quarter of what the attempt did later, never the whole attempt (SIGKILLs at
# 0.3-1.8 s of a 64 MiB transfer capped at 16 MiB/s per connection made the
# origin serve 3.95-5.6x the file when the first commit came after 2 s;
# 1.07-1.39x now: tests/torture/test_kill_loop_ratio.py). A commit is an
# fdatasync of the bytes since the last one plus a small atomic write: ~13 in
# the first 8 s, then one every JOURNAL_EVERY_S as before. Measured on the
# test VM, 512 MiB at 4 x 64 MiB/s: 2.29-2.47 s against 2.35-2.46 s with the
# old 2 s schedule (no difference beyond the noise).
JOURNAL_FIRST_S = 0.25
JOURNAL_AGE_SHARE = 0.25


def journal_interval_s(age_s: float) -> float:
    """Seconds between two journal commits of a transfer `age_s` old."""
    return min(JOURNAL_EVERY_S, max(JOURNAL_FIRST_S, age_s * JOURNAL_AGE_SHARE))


class Ranges:
    """Completed byte ranges, merged; thread-safe; wakes the hasher."""

    def __init__(self, done: list[tuple[int, int]] | None = None) -> None:
        self._spans: list[tuple[int, int]] = []
        self._cond = threading.Condition()
        for start, end in done or []:
            self.add(start, end)

    def add(self, start: int, end: int) -> None:
        with self._cond:
            spans = sorted([*self._spans, (start, end)])
            merged: list[tuple[int, int]] = []
            for s, e in spans:
                if merged and s <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], e))
                else:
                    merged.append((s, e))
            self._spans = merged
            self._cond.notify_all()

    def snapshot(self) -> list[tuple[int, int]]:
        with self._cond:
            return list(self._spans)

    def total(self) -> int:
        return sum(e - s for s, e in self.snapshot())

    def prefix(self) -> int:
        spans = self.snapshot()
        return spans[0][1] if spans and spans[0][0] == 0 else 0

    def wait_prefix_beyond(self, position: int, timeout_s: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self._prefix_locked() > position, timeout_s)
            return self._prefix_locked()

    def _prefix_locked(self) -> int:
        return self._spans[0][1] if self._spans and self._spans[0][0] == 0 else 0

    def missing(self, size: int) -> list[tuple[int, int]]:
        gaps, cursor = [], 0
        for s, e in self.snapshot():
            if s > cursor:
                gaps.append((cursor, s))
            cursor = max(cursor, e)
        if cursor < size:
            gaps.append((cursor, size))
        return gaps


def work_items(gaps: list[tuple[int, int]], connections: int) -> list[tuple[int, int]]:
    """Split the missing ranges into items small enough to balance N workers;
    item boundaries fall on ALIGN_BYTES inside a gap (direct writes)."""
    remaining = sum(e - s for s, e in gaps)
    item = min(MAX_ITEM_BYTES, max(MIN_ITEM_BYTES, remaining // (connections * 4) + 1))
    item += -item % ALIGN_BYTES
    items = []
    for start, end in gaps:
        cut = start
        while cut < end:
            nxt = min(end, cut + item - cut % ALIGN_BYTES)
            items.append((cut, nxt))
            cut = nxt
    return items
