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
mtime (transfer/progress.py KeepAlive) on the filesystem's own clock.
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


def publish_alive(pending: Pending, root: str, now_s: float, idle_s: float) -> bool:
    """Whether the writer of `pending` still lives (#21 item 5): one of its
    partials is flocked by another open file description, or (where flock
    may not exclude: `idle_s` > 0) was touched within `idle_s` by the
    filesystem's clock `now_s`."""
    return any(_partial_alive(e.partial_path(root), now_s, idle_s) for e in pending.entries)


def _partial_alive(path: str, now_s: float, idle_s: float) -> bool:
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
        return idle_s > 0 and now_s - st.st_mtime < idle_s
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
