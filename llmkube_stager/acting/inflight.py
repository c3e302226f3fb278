"""Several files in flight (#16 item 3): a bounded set of worker threads
and a memory budget.

Why: a small file costs waits, not bytes. Per file the agent makes a
request or two and the publish fsyncs the data, the directory and the size
record; on the benchmark disk one fsync after another took 10.8 ms a file,
and eight writers at once 0.9 ms a file (ext4 commits concurrent fsyncs in
one journal transaction). So the fsyncs a publish needs stay, one file's
guarantees unchanged, and several files share their waits.

Why daemon threads rather than concurrent.futures: a SIGTERM raises
`Cancelled` in the main thread, which must end the process at once (the
partials stay for a resume, as after a SIGKILL); the pool of
concurrent.futures is joined at interpreter exit, which would first finish
every transfer in flight.

After the first failure no further item starts; the items in flight finish
(their own timeouts bound them), so a run never returns while one of its
transfers still writes the cache.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_JOIN_POLL_S = 0.2  # the main thread wakes to run signal handlers


@dataclass
class Done(Generic[R]):
    """One item's outcome: its value, or what it raised; neither when it
    never started (an earlier item failed)."""

    value: R | None = None
    error: BaseException | None = None

    @property
    def started(self) -> bool:
        return self.value is not None or self.error is not None


class ByteBudget:
    """What the transfers in flight may hold in memory at once. A
    reservation larger than the whole budget is cut to it, so one large
    file always runs (alone)."""

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = total_bytes
        self._free = total_bytes
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def reserve(self, nbytes: int) -> Iterator[None]:
        want = max(0, min(nbytes, self.total_bytes))
        with self._cond:
            while self._free < want:
                self._cond.wait()
            self._free -= want
        try:
            yield
        finally:
            with self._cond:
                self._free += want
                self._cond.notify_all()


def run_in_flight(items: Sequence[T], work: Callable[[T], R], limit: int) -> list[Done[R]]:
    """`work(item)` for each item, at most `limit` at once, outcomes in the
    items' order. With one at a time (or one item) everything runs in the
    calling thread, exactly as before files went in flight."""
    outcomes: list[Done[R]] = [Done() for _ in items]
    if limit <= 1 or len(items) <= 1:
        for index, item in enumerate(items):
            outcomes[index] = _attempt(work, item)
            if outcomes[index].error is not None:
                break
        return outcomes
    queue = _Queue(len(items))

    def worker() -> None:
        while (index := queue.next()) is not None:
            done = _attempt(work, items[index])
            outcomes[index] = done
            if done.error is not None:
                queue.stop()

    threads = [
        threading.Thread(target=worker, name=f"file-{n}", daemon=True)
        for n in range(min(limit, len(items)))
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(_JOIN_POLL_S)
    finally:
        queue.stop()  # a signal raised here: nothing new starts
    return outcomes


def _attempt(work: Callable[[T], R], item: T) -> Done[R]:
    try:
        return Done(value=work(item))
    except Exception as exc:  # handed to the caller, which raises it
        return Done(error=exc)


class _Queue:
    def __init__(self, count: int) -> None:
        self._count = count
        self._next = 0
        self._stopped = False
        self._lock = threading.Lock()

    def next(self) -> int | None:
        with self._lock:
            if self._stopped or self._next >= self._count:
                return None
            index, self._next = self._next, self._next + 1
            return index

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
