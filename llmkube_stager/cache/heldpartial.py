"""The held partial: our private file, open and flocked while we write it.

Why private: on FUSE, flock does not exclude across nodes, and two pods that
resumed into one shared partial published a truncated file that every later
pod accepted (LLMKube #2158, #2254). Here a writer only ever creates a file whose
name carries its own random id, holds it open (`HeldPartial`) with an
exclusive flock, and heartbeats it through its descriptor. A writer whose
file was adopted away notices (its name no longer names its inode:
`HeldPartial.owned`) and never publishes that inode. Adoption itself (whose
writer is gone, one rename wins) is partials.py; which names are partials,
partialnames.py (#32 item 4).

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

from llmkube_stager.cache.evidence import is_local

FILE_MODE = 0o664
OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# same_file: mtimes of one file seen through two inode numbers (rclone).
_SAME_MTIME_NS = 1_000_000_000


class HeldPartial:
    """Our private partial: its name, and a descriptor holding an exclusive
    flock on its inode for as long as we write it (a dead process loses the
    lock at once, a live one keeps it). Writes, heartbeats and the hash go
    through the descriptor, so a name swapped underneath is never followed."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def create(cls, path: str) -> HeldPartial:
        fd = os.open(
            path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE
        )
        flock_exclusive(fd)
        return cls(path, fd)

    def recreate(self) -> None:
        """Our name again, a fresh empty file (after `discard`)."""
        fresh = HeldPartial.create(self.path)
        self.fd = fresh.fd

    def reclaim(self) -> None:
        """Hold what our name names now: a file a rename of ours put there
        from a candidate's name (a partial of the same version by its name)
        that was swapped after we opened the candidate. Checked as any
        candidate is; OSError when it cannot be held."""
        fd = os.open(self.path, os.O_RDWR | OPEN_FLAGS)
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and flock_exclusive(fd)):
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
        """Tell other writers this partial is alive (partials.IDLE_S)."""
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
            if same_inode(named, held) and is_local(os.path.dirname(self.path) or "."):
                return  # one kernel's inode numbers: the descriptor is the file
            fd = os.open(self.path, os.O_RDWR | OPEN_FLAGS)
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
        close_quietly(old)
        flock_exclusive(fd)

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
    if same_inode(named, held):
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


def same_inode(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def flock_exclusive(fd: int) -> bool:
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


def close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
