"""Partials' liveness and adoption: whether a partial's writer is gone,
and taking its bytes over by rename across restarts (the held file itself
is heldpartial.py, the names partialnames.py: #32 item 4).

To resume, a writer adopts a partial whose writer is gone by renaming it to
its own name; if two writers race for it, only one rename finds the source.

Whether a writer is gone is judged in layers (#10 defect 2): its flock
(proof of life on this node, and across nodes where flock works), then the
partial's age against the *filesystem's* clock (the mtime of a file we just
touched there: never our own wall clock, which may be skewed against the
clock that wrote the other mtime), and where the age cannot be trusted (an
mtime in the future) by watching it for a while (transfer/predecessor.py).
All of these can be fooled (NFS with node-local locks, a frozen writer that
resumes), so correctness does not rest on them: writers never shrink a
partial, never create one at an offset, write every response only at its
own Content-Range start and only for the partial's validators, so two
writers sharing an inode write the same bytes at the same offsets.
"""

from __future__ import annotations

import contextlib
import os
import stat

from llmkube_stager.cache.heldpartial import (
    FILE_MODE,
    OPEN_FLAGS,
    HeldPartial,
    close_quietly,
    flock_exclusive,
    same_file,
)
from llmkube_stager.cache.partialnames import PartialFile, list_partials
from llmkube_stager.layout import (
    ATOMIC_TMP_INFIX,
    LEGACY_PARTIAL_SUFFIX,
    atomic_tmp_path,
    journal_of,
    partial_key,
    private_partial_path,
    ranged_of_stream,
    segmented_paths,
)

# A live writer refreshes its partial's mtime at least this often (heartbeat).
HEARTBEAT_S = 5.0
# A partial untouched this long has no live writer (6 missed heartbeats).
IDLE_S = 30.0
# Heartbeats set the filesystem's own "now": an mtime further ahead than this
# was not written by a live writer's heartbeat; its age is unknown.
FUTURE_TOLERANCE_S = HEARTBEAT_S
# How long a partial whose mtime lies in the future (its age unknown) is
# watched: unchanged for more than two heartbeats, its writer is gone
# (transfer/predecessor.py, cache/setstate.py).
FUTURE_OBSERVE_S = 2 * HEARTBEAT_S + 1.0


def fs_now(directory: str) -> float:
    """The filesystem's clock where no claim exists yet: create and stat a
    scratch file (named like the atomic-write temps the sweep knows)."""
    path = atomic_tmp_path(os.path.join(directory, ".llmkube-clock"))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    try:
        return os.fstat(fd).st_mtime
    finally:
        close_quietly(fd)  # rclone (--vfs-cache-mode off) may fail the close: still removed
        with contextlib.suppress(OSError):
            os.unlink(path)


def is_idle(partial: PartialFile, now_s: float, idle_s: float) -> bool:
    """Untouched for `idle_s` by the filesystem's clock `now_s`. An mtime in
    the future says nothing (never idle here: predecessor.py watches it)."""
    age_s = now_s - partial.mtime_s
    if age_s < -FUTURE_TOLERANCE_S:
        return idle_s <= 0
    return age_s >= idle_s


def in_future(partial: PartialFile, now_s: float) -> bool:
    return partial.mtime_s - now_s > FUTURE_TOLERANCE_S


def _open_candidate(partial: PartialFile) -> int | None:
    """A descriptor on the candidate, flocked by us; None when it is not a
    plain regular file of ours to take, or its writer still holds it."""
    try:
        fd = os.open(partial.path, os.O_RDWR | OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        plain = stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_ino == partial.inode
        if plain and flock_exclusive(fd):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _take(partial: PartialFile, own: HeldPartial) -> HeldPartial | None:
    """Adopt `partial` into our name: one rename wins among racers."""
    fd = _open_candidate(partial)
    if fd is None:
        return None
    # Probed on sequential partials only: their last byte is written data
    # (the same byte again is harmless beside a writer frozen and resumed);
    # a parallel one's may be a hole, and a zero written into it could land
    # after such a writer's real byte there.
    if partial.sequential and not _writable_in_place(fd):
        # rclone --vfs-cache-mode off writes a file only front to back from
        # a fresh open: no partial can be resumed there (#21 item 10). Its
        # writer is gone (idle, and we hold its flock) and its bytes are of
        # no use on this storage: removed, not left as debris.
        with contextlib.suppress(OSError):
            if same_file(os.lstat(partial.path), os.fstat(fd), partial.path):
                os.unlink(partial.path)
        close_quietly(fd)  # rclone reports the refused write again at close (EPERM)
        return None
    # Our empty file goes first: rclone (--vfs-cache-mode writes) renaming a
    # file onto a name that is open showed the open, empty file under the
    # name, and the adopted bytes were gone (#21 item 8). Our name is ours
    # alone (our writer id), so nothing else appears there meanwhile.
    own.discard()
    try:
        os.rename(partial.path, own.path)
    except OSError:
        os.close(fd)
        own.recreate()
        return None
    taken = HeldPartial(own.path, fd)
    if not taken.owned():
        # Renamed something else onto our name: never ours; its name no
        # longer names `own`, so that is never published either.
        taken.close()
        own.reclaim()
        return None
    taken.follow_rename()
    taken.beat()  # a rename keeps the old mtime: refresh it at once
    return taken


def _writable_in_place(fd: int) -> bool:
    """Whether the file takes a write inside it: its last byte written
    again (the same byte at the same offset: harmless to any writer of it,
    layer c above)."""
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return True
        last = os.pread(fd, 1, size - 1)
        return os.pwrite(fd, last, size - 1) == len(last)
    except OSError:
        return False


def _copy(partial: PartialFile, own: HeldPartial) -> HeldPartial | None:
    """The old scripts' `<dest>.<key>.tmp` was written by curl in append
    mode: a frozen shell writer that resumes appends wherever the file ends.
    Its bytes are copied into our own inode instead of renamed (the figures
    of that choice are in docs/reliability.md)."""
    fd = _open_candidate(partial)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        copied = 0
        while copied < size:
            n = os.copy_file_range(fd, own.fd, size - copied, copied, copied)
            if n == 0:
                break
            copied += n
        os.fsync(own.fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial.path)
    except OSError:
        os.ftruncate(own.fd, 0)
        return None
    finally:
        os.close(fd)
    return own


def adopt_partial(
    dest: str,
    validator: str,
    writer_id: str,
    idle_s: float,
    proven_idle: frozenset[str] = frozenset(),
) -> HeldPartial:
    """Our private partial, created and claimed; holding the largest idle
    partial of the same validator when there is one (resume). `proven_idle`:
    partials watched long enough to be known dead (predecessor.py)."""
    own = HeldPartial.create(private_partial_path(dest, validator, writer_id))
    now_s = own.fs_now()
    key = partial_key(validator)
    candidates = [
        p
        for p in list_partials(dest)
        if p.key == key
        and p.sequential
        and p.path != own.path
        and (is_idle(p, now_s, idle_s) or p.path in proven_idle)
    ]
    for candidate in sorted(candidates, key=lambda p: p.size_bytes, reverse=True):
        taken = _copy(candidate, own) if candidate.kind == "legacy" else _take(candidate, own)
        if taken is not None:
            if candidate.kind == "part":
                _drop_orphan_journal(candidate.path)
            return taken
    return own


def _drop_orphan_journal(adopted_stream: str) -> None:
    """A writer widening to ranged connections journals its stream's bytes
    under its ranged name, then renames the stream partial to that name
    (transfer/parallel.py `_take_over`). Killed between the two, it leaves
    a journal without data beside the stream partial we just adopted: that
    writer is gone (or, frozen and woken, finds its rename failing and
    drops the journal itself), so the journal can never be completed."""
    data, journal = ranged_of_stream(adopted_stream)
    with contextlib.suppress(OSError):
        if not os.path.lexists(data) and stat.S_ISREG(os.lstat(journal).st_mode):
            os.unlink(journal)
    _drop_journal_temps(journal)


def _drop_journal_temps(journal: str) -> None:
    """The atomic-write temps (`<journal>.llmkube-tmp.XXXXXX`) a writer we
    adopted from was killed in the middle of: its journal is ours now, or
    gone, and nothing will ever rename them (the 10-minute sweep would)."""
    directory, name = os.path.split(journal)
    prefix = name + ATOMIC_TMP_INFIX
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory or "."):
            tail = entry.name[len(prefix) :]
            if (
                entry.name.startswith(prefix)
                and len(tail) == 6
                and entry.is_file(follow_symlinks=False)
            ):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


def remove_stale(
    dest: str,
    validator: str,
    now_s: float,
    idle_s: float,
    listed: frozenset[str] = frozenset(),
    resumable: bool = True,
) -> list[str]:
    """Idle partials of `dest` for other origin validators: bytes of another
    upstream version, never to be resumed (the keep-one sweep of spec §10,
    narrowed to one file so it cannot touch another file's partial); and,
    when this transfer cannot resume at all, those of its own validator.
    `now_s` is the filesystem's clock (fs_now)."""
    key = partial_key(validator)
    stale = [
        p.path
        for p in list_partials(dest)
        if (p.key != key or not resumable) and is_idle(p, now_s, idle_s)
    ]
    # The old s3/local branches' fixed `<dest>.tmp` (`rm -f` before each try).
    legacy = dest + LEGACY_PARTIAL_SUFFIX
    with contextlib.suppress(OSError):
        st = os.lstat(legacy)
        if stat.S_ISREG(st.st_mode) and now_s - st.st_mtime >= idle_s:
            stale.append(legacy)
    removed = []
    for path in stale:
        if path in listed:
            continue  # a repository file that only looks like a partial
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(path)
    return removed


def adopt_segmented(
    dest: str,
    validator: str,
    writer_id: str,
    idle_s: float,
    proven_idle: frozenset[str] = frozenset(),
) -> tuple[HeldPartial, str, bool]:
    """(data claim, journal path, adopted) for a parallel transfer. The data
    file is the claim (one rename wins); its journal follows. Data whose
    journal is gone (a crash between the two renames) proves nothing and is
    dropped."""
    data, journal = segmented_paths(dest, validator, writer_id)
    own = HeldPartial.create(data)
    now_s = own.fs_now()
    key = partial_key(validator)
    candidates = [
        p
        for p in list_partials(dest)
        if p.key == key
        and p.kind == "segs"
        and p.path != data
        and (is_idle(p, now_s, idle_s) or p.path in proven_idle)
    ]
    for candidate in candidates:
        old_journal = journal_of(candidate.path)
        taken = _take(candidate, own)
        if taken is None:
            continue
        try:
            if not stat.S_ISREG(os.lstat(old_journal).st_mode):
                raise FileNotFoundError(old_journal)
            os.rename(old_journal, journal)
            _drop_journal_temps(old_journal)
        except OSError:
            taken.discard()
            own = HeldPartial.create(data)
            continue
        return taken, journal, True
    return own, journal, False
