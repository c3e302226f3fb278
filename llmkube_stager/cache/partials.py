"""Partials: one private file per writer, held open and flocked, adopted
across restarts by rename.

Why private: on FUSE, flock does not exclude across nodes, and two pods that
resumed into one shared partial published a truncated file that every later
pod accepted (LLMKube #2158, #2254). Here a writer only ever creates a file whose
name carries its own random id, holds it open (`Claim`) with an exclusive
flock, and heartbeats it through its descriptor. To resume, it adopts a
partial whose writer is gone by renaming it to its own name; if two writers
race for it, only one rename finds the source. A writer whose file was
adopted away notices (its name no longer names its inode) and never
publishes that inode.

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

Every name the agent did not just create is opened with O_NOFOLLOW and
O_NONBLOCK and must be a regular file with one link (#11: a planted
symlink, FIFO, directory or hard link is never adopted or written through).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from dataclasses import dataclass

from llmkube_stager.cache.evidence import is_local
from llmkube_stager.layout import (
    ATOMIC_TMP_INFIX,
    JOURNAL_SUFFIX,
    LEGACY_PARTIAL_SUFFIX,
    OLD_JOURNAL_SUFFIX,
    OLD_PART_SUFFIX,
    OLD_SEGS_SUFFIX,
    PART_SUFFIX,
    SEGS_SUFFIX,
    atomic_tmp_path,
    journal_of,
    parse_partial,
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
FILE_MODE = 0o664
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# same_file: mtimes of one file seen through two inode numbers (rclone).
_SAME_MTIME_NS = 1_000_000_000


def new_writer_id() -> str:
    import secrets

    return secrets.token_hex(4)


class Claim:
    """Our private partial: its name, and a descriptor holding an exclusive
    flock on its inode for as long as we write it (a dead process loses the
    lock at once, a live one keeps it). Writes, heartbeats and the hash go
    through the descriptor, so a name swapped underneath is never followed."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def create(cls, path: str) -> Claim:
        fd = os.open(
            path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE
        )
        _lock(fd)
        return cls(path, fd)

    def recreate(self) -> None:
        """Our name again, a fresh empty file (after `discard`)."""
        fresh = Claim.create(self.path)
        self.fd = fresh.fd

    def reclaim(self) -> None:
        """Hold what our name names now: a file a rename of ours put there
        from a candidate's name (a partial of the same version by its name)
        that was swapped after we opened the candidate. Checked as any
        candidate is; OSError when it cannot be held."""
        fd = os.open(self.path, os.O_RDWR | _OPEN_FLAGS)
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and _lock(fd)):
            os.close(fd)
            raise OSError(errno.EBUSY, "a partial renamed onto our name is not ours", self.path)
        self.fd = fd

    @property
    def closed(self) -> bool:
        return self.fd < 0

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def fs_now(self) -> float:
        """The filesystem's clock: touch our inode, read its mtime."""
        os.utime(self.fd)
        return os.fstat(self.fd).st_mtime

    def beat(self) -> None:
        """Tell other writers this partial is alive (IDLE_S)."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.utime(self.fd)

    def owned(self) -> bool:
        """Our name still names our inode (not adopted away or replaced)."""
        try:
            named = os.lstat(self.path)
            held = os.fstat(self.fd)
        except OSError:
            return False
        return same_file(named, held, self.path)

    def rename_to(self, path: str) -> bool:
        """Move our partial to another of our names; False when it was
        adopted away meanwhile."""
        if not self.owned():
            return False
        try:
            os.rename(self.path, path)
        except FileNotFoundError:
            return False
        self.path = path
        self.follow_rename()
        self.beat()
        return True

    def follow_rename(self) -> None:
        """After a rename of ours, hold the file through its new name:
        rclone (--vfs-cache-mode writes) dropped what was written through a
        descriptor opened under the old name (#21 item 8), and its inode
        numbers, which follow the path, cannot say when that is the case
        (the descriptor's fstat shows the new number once the old name's
        file is closed). So everywhere but on a local filesystem (a rename
        of ours is rare: an adoption, a widening): reopened, checked to be
        the same file (same_file), locked; else we keep the descriptor we
        had (`owned` judges it)."""
        try:
            held = os.fstat(self.fd)
            named = os.lstat(self.path)
            if _same_inode(named, held) and is_local(os.path.dirname(self.path) or "."):
                return  # one kernel's inode numbers: the descriptor is the file
            fd = os.open(self.path, os.O_RDWR | _OPEN_FLAGS)
        except OSError:
            return
        try:
            fresh = os.fstat(fd)
        except OSError:
            os.close(fd)
            return
        if not (same_file(fresh, held, self.path) and fresh.st_nlink == 1):
            os.close(fd)
            return
        # One inode to the kernel's locks: ours is released before the new
        # descriptor takes it (a flock is per open file). A racer taking it
        # in between gains nothing: adopting needs a rename of our name,
        # which `owned` notices.
        old, self.fd = self.fd, fd
        _close(old)
        _lock(fd)

    def discard(self) -> None:
        """Remove our name (if it is still ours) and let go of the inode."""
        if self.fd >= 0 and self.owned():
            # Gone already, or the volume fails (EIO, ENOTCONN: #21 item 7):
            # the error being handled is the one to report.
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            with contextlib.suppress(OSError):
                os.close(fd)


def same_file(named: os.stat_result, held: os.stat_result, path: str) -> bool:
    """Whether the stat of a name (`named`) and the fstat of a descriptor
    (`held`) describe one file. The inode number says so where it is stable;
    rclone's inode numbers follow the path (#21 item 8): after a rename the
    descriptor keeps the old number and the new name gets another one, so
    an inode-only check took our own adopted partial for another writer's
    and threw it away (a whole download again, a full-size partial left).
    There, one file still shows one size and about one mtime through both
    (rclone --vfs-cache-mode off moves it by microseconds after a rename).
    Good enough for what asks: our names carry our random writer id and
    only a rename of ours ever puts a file there; a size record vouches
    for a size only; a stamp's truth rests on evidence read from the bytes
    (records.py, #21 item 2), never on this. `path`: the name stat'ed; on
    a local filesystem its inode number is the truth, and the fallback
    there let another writer's file of one size published within the same
    second count as ours: a stamp of ours stood on its bytes wherever they
    differ outside the sampled blocks (#21 review)."""
    if _same_inode(named, held):
        return True
    if is_local(os.path.dirname(path) or "."):
        return False
    return (
        named.st_dev == held.st_dev
        and stat.S_ISREG(named.st_mode)
        and stat.S_ISREG(held.st_mode)
        and named.st_size == held.st_size
        and abs(named.st_mtime_ns - held.st_mtime_ns) < _SAME_MTIME_NS
    )


def _same_inode(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _lock(fd: int) -> bool:
    """Exclusive flock without waiting; False when another holds it. A
    filesystem that refuses flock gives no proof either way: True."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
    return True


def fs_now(directory: str) -> float:
    """The filesystem's clock where no claim exists yet: create and stat a
    scratch file (named like the atomic-write temps the sweep knows)."""
    path = atomic_tmp_path(os.path.join(directory, ".llmkube-clock"))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    try:
        return os.fstat(fd).st_mtime
    finally:
        _close(fd)  # rclone (--vfs-cache-mode off) may fail the close: still removed
        with contextlib.suppress(OSError):
            os.unlink(path)


@dataclass(frozen=True)
class PartialFile:
    path: str
    key: str
    size_bytes: int
    mtime_s: float
    kind: str = "part"  # "part", "segs", "journal", "legacy" (layout.parse_partial)
    ctime_s: float = 0.0
    inode: int = 0

    @property
    def sequential(self) -> bool:
        """Written front to back: its size is its progress."""
        return self.kind in ("part", "legacy")


def list_partials(dest: str) -> list[PartialFile]:
    """Every partial of `dest` in its directory, both namings; regular files
    only (lstat: a symlink, FIFO or directory with such a name is no partial)."""
    directory = os.path.dirname(dest) or "."
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in names:
        path = os.path.join(directory, name)
        parsed = parse_partial(dest, path)
        if parsed is None:
            continue
        with contextlib.suppress(OSError):
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                found.append(
                    PartialFile(
                        path, parsed[0], st.st_size, st.st_mtime, parsed[1], st.st_ctime, st.st_ino
                    )
                )
    return found


def without_partials(dests: list[str]) -> frozenset[str]:
    """The destinations that have nothing beside them a transfer could
    resume or must remove (a partial, journal or legacy temp of any
    validator), from one listing per directory: O(entries), where asking
    `list_partials` for each file is O(files x entries). Conservative: a
    name that could belong to a destination (it starts with the
    destination's name and a dot, and ends like a partial) keeps it out."""
    by_dir: dict[str, list[str]] = {}
    for dest in dests:
        by_dir.setdefault(os.path.dirname(dest) or ".", []).append(dest)
    clear: set[str] = set()
    for directory, group in by_dir.items():
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            clear.update(group)  # a new directory holds nothing yet
            continue
        except OSError:
            continue
        owners = {owner for name in names for owner in _possible_owners(name)}
        clear.update(d for d in group if os.path.basename(d) not in owners)
    return frozenset(clear)


_PARTIAL_ENDINGS = (
    PART_SUFFIX,
    SEGS_SUFFIX,
    JOURNAL_SUFFIX,
    LEGACY_PARTIAL_SUFFIX,
    OLD_PART_SUFFIX,
    OLD_SEGS_SUFFIX,
    OLD_JOURNAL_SUFFIX,
)


def _possible_owners(name: str) -> list[str]:
    """Every file name `name` could be a partial of: each prefix that ends
    before one of its dots."""
    if not name.endswith(_PARTIAL_ENDINGS):
        return []
    return [name[:i] for i, ch in enumerate(name) if ch == "." and i]


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
        fd = os.open(partial.path, os.O_RDWR | _OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        plain = stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_ino == partial.inode
        if plain and _lock(fd):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _take(partial: PartialFile, own: Claim) -> Claim | None:
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
        _close(fd)  # rclone reports the refused write again at close (EPERM)
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
    taken = Claim(own.path, fd)
    if not taken.owned():
        # Renamed something else onto our name: never ours; its name no
        # longer names `own`, so that is never published either.
        taken.close()
        own.reclaim()
        return None
    taken.follow_rename()
    taken.beat()  # a rename keeps the old mtime: refresh it at once
    return taken


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


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


def _copy(partial: PartialFile, own: Claim) -> Claim | None:
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
) -> Claim:
    """Our private partial, created and claimed; holding the largest idle
    partial of the same validator when there is one (resume). `proven_idle`:
    partials watched long enough to be known dead (predecessor.py)."""
    own = Claim.create(private_partial_path(dest, validator, writer_id))
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
) -> tuple[Claim, str, bool]:
    """(data claim, journal path, adopted) for a parallel transfer. The data
    file is the claim (one rename wins); its journal follows. Data whose
    journal is gone (a crash between the two renames) proves nothing and is
    dropped."""
    data, journal = segmented_paths(dest, validator, writer_id)
    own = Claim.create(data)
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
            own = Claim.create(data)
            continue
        return taken, journal, True
    return own, journal, False
