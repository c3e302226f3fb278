"""A restarted pod waits for its predecessor's partial instead of
downloading the same bytes again beside it.

Without a cross-node lock (FUSE), a partial is adopted only once idle
(partials.IDLE_S: its writer missed six heartbeats). A prefetch Job's pod
that died is replaced after ~10 s (the Job controller's back-off), so the new
pod finds the old partial not idle yet, and before this started a fresh
download: for a 100 GB model killed at 90%, everything again. Now, when the
partial's writer has already missed two heartbeats and the partial holds
more than REFETCH_BYTES_PER_S could bring in the time left until it is idle,
the pod waits that time, watching the partial: if it is touched meanwhile,
its writer is alive (another pod) and the wait ends at once.

Ages are read against the filesystem's clock (partials.fs_now), never our
wall clock (#10 defect 2: a node whose clock is fast took every live
partial for idle). A partial whose mtime lies in the future has no age we
can trust (#11 item 8: it was never resumed); it is watched on our
monotonic clock for OBSERVE_S (more than two heartbeats): unchanged, its
writer is gone.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from llmkube_stager.cache.journal import load_journal
from llmkube_stager.cache.partialnames import PartialFile, list_partials
from llmkube_stager.cache.partials import (
    FUTURE_OBSERVE_S,
    HEARTBEAT_S,
    fs_now,
    in_future,
    is_idle,
)
from llmkube_stager.layout import journal_of, partial_key
from llmkube_stager.logs import Log
from llmkube_stager.model import RemoteFile
from llmkube_stager.sources.base import RemoteMeta
from llmkube_stager.transfer.target import identity_of

# What a fresh download is assumed to move: waiting is worth it only for a
# partial that would take longer than the wait to fetch again.
REFETCH_BYTES_PER_S = 100e6
_SILENT_S = 2 * HEARTBEAT_S  # two missed heartbeats: probably a dead writer
OBSERVE_S = FUTURE_OBSERVE_S


def await_dead_writer(
    file: RemoteFile,
    meta: RemoteMeta,
    idle_s: float,
    sleep: Callable[[float], None],
    log: Log,
) -> frozenset[str]:
    """Returns when the best same-version partial is idle (adoptable), gone,
    proven alive, or not worth waiting for; with the partials that watching
    proved idle although their mtime could not say so."""
    if idle_s <= 0:
        return frozenset()  # under an exclusive lock every partial is adoptable at once
    validator = identity_of(meta)
    key = partial_key(validator)
    same = [p for p in list_partials(file.dest) if p.key == key and p.kind in ("part", "segs")]
    if not same:
        return frozenset()
    now_s = fs_now(os.path.dirname(file.dest) or ".")
    future = [p for p in same if in_future(p, now_s)]
    if future:
        return _observe(future, file.rel, sleep, log)
    waiting = [p for p in same if not is_idle(p, now_s, idle_s) and now_s - p.mtime_s >= _SILENT_S]
    if not waiting:
        return frozenset()
    best = max(waiting, key=lambda p: _progress_bytes(p, validator, meta.size_bytes))
    held = _progress_bytes(best, validator, meta.size_bytes)
    wait_s = best.mtime_s + idle_s - now_s
    if held < wait_s * REFETCH_BYTES_PER_S:
        return frozenset()
    log.info(
        "awaiting_partial",
        f"A partial of {file.rel} ({held} bytes) was last written {now_s - best.mtime_s:.0f} s "
        f"ago; waiting up to {wait_s:.0f} s for its writer to be gone, then resuming it",
        file=file.rel,
    )
    _watch(best, wait_s, sleep, log, file.rel)
    return frozenset()


def _signature(path: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _observe(
    partials: list[PartialFile],
    rel: str,
    sleep: Callable[[float], None],
    log: Log,
) -> frozenset[str]:
    """Watch partials whose mtime is in the future for OBSERVE_S (sleeps on
    the monotonic clock); those untouched (size, mtime and ctime) have no live
    writer: a live one would have heartbeated at least twice."""
    log.info(
        "observing_partial",
        f"A partial of {rel} has a modification time in the future; watching it for "
        f"{OBSERVE_S:.0f} s to tell whether its writer is alive",
        file=rel,
    )
    first = {p.path: _signature(p.path) for p in partials}
    waited_s = 0.0
    while waited_s < OBSERVE_S:
        step_s = min(HEARTBEAT_S, OBSERVE_S - waited_s)
        sleep(step_s)
        waited_s += step_s
    return frozenset(p for p, sig in first.items() if sig is not None and _signature(p) == sig)


def _watch(
    partial: PartialFile, wait_s: float, sleep: Callable[[float], None], log: Log, rel: str
) -> None:
    waited_s = 0.0
    while waited_s < wait_s:
        step_s = min(HEARTBEAT_S, wait_s - waited_s)
        sleep(step_s)
        waited_s += step_s
        try:
            mtime_s = os.lstat(partial.path).st_mtime
        except FileNotFoundError:
            return  # adopted by someone else meanwhile
        if mtime_s != partial.mtime_s:
            log.info(
                "partial_alive",
                f"The partial of {rel} is still being written by another pod; not waiting for it",
                file=rel,
            )
            return


def _progress_bytes(partial: PartialFile, validator: str, size: int | None) -> int:
    """A sequential partial's size is its progress; a parallel one's is in
    its journal (its data file is sparse, full size from the start)."""
    if partial.sequential:
        return partial.size_bytes
    if size is None:
        return 0
    return sum(e - s for s, e in load_journal(journal_of(partial.path), validator, size))
