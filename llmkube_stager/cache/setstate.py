"""Whether the files of a model directory form one set (#21 items 3-5):
the one judgement every reader makes, `stage` (a read-only cache, a warm
start), `verify`, `plan` and `inspect` alike.

A set is not whole while a publish is in progress (its intent in the run
record, cache/runrecord.py, names a partial that is still there: some
files were renamed into place, others not; #10 defect 13), nor when its
writers recorded files of two commits of one revision (the shares of a
sharded prefetch that resolved a moving branch at different moments, #21
item 4), nor while a writer's mark says it found its files among another
writer's of another commit (writers no claim covers, #29 item 1). Every
file of such a set may match its own size record: only the run record
tells.

Whether the writer of a publish in progress is alive (#21 item 5) is told
by its partials: a live writer holds each one's flock and heartbeats its
mtime (transfer/progress.py KeepAlive) on the filesystem's own clock. An
mtime in the future (a node whose clock is ahead: s3fs stamps the client's
clock) has no age: it proves nothing, and the partial is watched while the
reader waits (`FutureWatch`, #29 item 5), as the adoption path does.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from dataclasses import dataclass

from llmkube_stager.cache.runrecord import PublishEntry, RunRecord
from llmkube_stager.errors import CacheError, Reason, SourceKind


@dataclass(frozen=True)
class Pending:
    """One writer's publish in progress: the writer ("" for the unsharded
    one, else the share id) and the entries whose partial is still beside
    its destination."""

    writer: str
    entries: tuple[PublishEntry, ...]

    @property
    def key(self) -> str:
        """How reports name it (`plan`, `inspect`, the wait's log line)."""
        return "/publishing" + (f"/{self.writer}" if self.writer else "")


def pending_publishes(record: RunRecord, root: str) -> list[Pending]:
    """Every publish in progress in the directory, by writer."""
    found = []
    for run in record.publishing():
        left = tuple(e for e in run.intent if os.path.lexists(e.partial_path(root)))
        if left:
            found.append(Pending(run.writer, left))
    return found


def judge_set(
    record: RunRecord,
    root: str,
    source_kind: SourceKind | None = None,
    *,
    commits: bool = True,
) -> CacheError | None:
    """Why a reader must not take the directory's files for one whole set;
    None when nothing says so. `commits=False`: the caller verified every
    file against one commit just now (OnChange), the records aside."""
    for pending in pending_publishes(record, root):
        rel = pending.entries[0].rel
        return CacheError(
            f"a publish of the model was interrupted after some of its files were "
            f"replaced ({rel} and {len(pending.entries) - 1} more are not in place yet): "
            "a writer must finish it",
            reason=Reason.CACHE_INCOMPLETE,
            file=rel,
            source_kind=source_kind,
        )
    if commits and record.mixed:
        return CacheError(
            f"the model's files come from more than one commit ({record.mixed}): a writer "
            "must stage it again from one commit, proving every file by its bytes",
            reason=Reason.CACHE_INCOMPLETE,
            source_kind=source_kind,
        )
    found = record.commits() if commits else {}
    if len(set(found.values())) > 1:
        shown = ", ".join(f"{w or 'unsharded'}: {c[:12]}" for w, c in sorted(found.items()))
        return CacheError(
            f"the model's files come from more than one commit ({shown}): a writer "
            "must stage it again from one commit (a sharded prefetch Job run again "
            "finishes it from one)",
            reason=Reason.CACHE_INCOMPLETE,
            source_kind=source_kind,
        )
    return None


class FutureWatch:
    """Partials whose mtime lies in the future, watched over one wait (#29
    item 5): before, such a partial was "touched less than IDLE_S ago" for
    ever, so a dead writer from a node whose clock was ahead made every
    retry wait out LLMKUBE_LOCK_TIMEOUT and every reader refuse the model.
    A live writer heartbeats every HEARTBEAT_S (its own clock, ahead or
    not): a partial whose size, mtime and change time stay the same for
    FUTURE_OBSERVE_S of the wait (more than two heartbeats) has none. The
    time is the waiter's own sleeps (`waited`), never a wall clock."""

    def __init__(self) -> None:
        self.waited_s = 0.0
        # path -> (signature, waited_s when it was first seen so)
        self._first: dict[str, tuple[tuple[int, int, int, int], float]] = {}

    def waited(self, seconds: float) -> None:
        self.waited_s += seconds

    def unchanged_long_enough(self, path: str, st: os.stat_result) -> bool:
        from llmkube_stager.cache.partials import FUTURE_OBSERVE_S

        signature = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        first = self._first.get(path)
        if first is None or first[0] != signature:
            self._first[path] = (signature, self.waited_s)  # touched: watched anew
            return False
        return self.waited_s - first[1] >= FUTURE_OBSERVE_S


def publish_alive(
    pending: Pending, root: str, now_s: float, idle_s: float, watch: FutureWatch | None = None
) -> bool:
    """Whether the writer of `pending` still lives (#21 item 5): one of its
    partials is flocked by another open file description, or (where flock
    may not exclude: `idle_s` > 0) was touched within `idle_s` by the
    filesystem's clock `now_s`, or has an mtime in the future that `watch`
    has not yet seen stay unchanged long enough (#29 item 5; without a
    watch, such a partial is taken for alive)."""
    # Every partial is looked at (a list, not a short-circuit): each one's
    # watch runs over the same wait.
    return any(
        [_partial_alive(e.partial_path(root), now_s, idle_s, watch) for e in pending.entries]
    )


def _partial_alive(path: str, now_s: float, idle_s: float, watch: FutureWatch | None) -> bool:
    from llmkube_stager.cache.partials import FUTURE_TOLERANCE_S

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # gone (renamed, adopted) or not ours to judge
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        if _flocked_elsewhere(fd):
            return True
        if idle_s <= 0:
            return False
        age_s = now_s - st.st_mtime
        if age_s < -FUTURE_TOLERANCE_S:
            return watch is None or not watch.unchanged_long_enough(path, st)
        return age_s < idle_s
    finally:
        os.close(fd)


def _flocked_elsewhere(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    return False
