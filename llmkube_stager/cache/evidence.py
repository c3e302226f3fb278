"""Evidence read from a file's bytes, so that a stamp binds to the bytes it
vouches for and not to what a cache says about a name (#21 item 2).

On FUSE the names lie for a while: a node's kernel keeps a name's inode
and attributes (entry/attr timeouts, rclone's directory cache), so after
another node renamed its file onto the name, `lstat` there still reports
the old inode, size and mtime, while an open goes to the daemon by path
and reads the new bytes. Inode checks around a stamp then pass on a
stale cache: two writers with different pins and files of equal size left
a stamp saying X on a file holding Y, and a pod pinned to X was served Y.

Two designs were weighed. (b) Write the stamp before the rename into a
sidecar bound to the partial, so one rename publishes file and stamp:
there is no rename of two files as one, and the pair is still judged
through the name's cached attributes, so a pause between the two renames
(or the cache itself) opens the same hole. (a) Evidence of the bytes,
checked by every reader before it trusts a stamp: the only thing that
cannot be stale is what an open of the name reads right now. So a stamp
comes with evidence (`<file>.llmkube-evidence`, records.py): the sha256
of a few blocks of the file (head, middle, tail: all of a file of up to
three blocks), taken by the writer from the descriptor it hashed or wrote
(never by reopening the name: that is the lie), and read again by a
reader through a fresh open that bypasses the page cache where the
filesystem may serve a stale view (O_DIRECT, else posix_fadvise
DONTNEED). Three 4 KiB reads per stamped file keep a warm start cheap.

It is evidence, not proof: two files of equal size identical in the three
sampled blocks (but not elsewhere) pass. What a reader does with a stamp
whose evidence does not match is proof again: it hashes the whole file.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat

from llmkube_stager.cache.fs import statfs_type

BLOCK_BYTES = 4096
# The scheme's name, part of what is hashed: another scheme never matches.
SCHEME = "b4k3"
# Filesystems whose page cache is the file's own (one kernel owns the
# bytes): a plain read there is the truth. Everything else (FUSE, NFS,
# CIFS, Ceph, unknown) is read past the cache.
_LOCAL_MAGICS = frozenset({0xEF53, 0x58465342, 0x9123683E, 0x01021994, 0x794C7630})
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def offsets(size_bytes: int) -> list[int]:
    """The sampled blocks' offsets: head, middle and tail, block-aligned
    (O_DIRECT needs it); every block of a file of up to three."""
    last = max(size_bytes - 1, 0) // BLOCK_BYTES * BLOCK_BYTES
    middle = size_bytes // 2 // BLOCK_BYTES * BLOCK_BYTES
    return sorted({0, middle, last})


def _digest(size_bytes: int, blocks: list[bytes]) -> str:
    import hashlib  # only where a stamp is written or checked

    sha = hashlib.sha256(f"{SCHEME} {size_bytes}".encode())
    for block in blocks:
        sha.update(len(block).to_bytes(4, "big"))
        sha.update(block)
    return sha.hexdigest()


def of_descriptor(fd: int, size_bytes: int) -> str:
    """Evidence of the bytes behind a descriptor the caller wrote or hashed."""
    blocks = [os.pread(fd, BLOCK_BYTES, offset) for offset in offsets(size_bytes)]
    return _digest(size_bytes, blocks)


def of_name(path: str, size_bytes: int) -> str | None:
    """Evidence of what an open of `path` reads now, past any page cache
    that may hold another file's bytes; None when it cannot be read."""
    read = read_name(path, size_bytes)
    return read[0] if read is not None else None


def read_name(path: str, size_bytes: int) -> tuple[str, os.stat_result] | None:
    """(evidence, fstat) of the file an open of `path` reaches now: the
    identity a stamp is bound to (#29 item 2) and the bytes it vouches for,
    from one descriptor, so that a name swapped between a stat and the
    read cannot pair one file's identity with another's bytes."""
    try:
        fd, direct = _open_fresh(path)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if direct:
            return _digest(size_bytes, _read_direct(fd, size_bytes)), st
        return of_descriptor(fd, size_bytes), st
    except OSError:
        return None
    finally:
        os.close(fd)


def _open_fresh(path: str) -> tuple[int, bool]:
    """(descriptor, opened with O_DIRECT) on a regular file."""
    if is_local(os.path.dirname(path) or "."):
        return _checked(os.open(path, _READ_FLAGS)), False
    try:
        return _checked(os.open(path, _READ_FLAGS | os.O_DIRECT)), True
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    fd = _checked(os.open(path, _READ_FLAGS))
    with contextlib.suppress(OSError):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return fd, False


def _checked(fd: int) -> int:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return fd


def _read_direct(fd: int, size_bytes: int) -> list[bytes]:
    import mmap

    with mmap.mmap(-1, BLOCK_BYTES) as buffer:  # page-aligned, as O_DIRECT wants
        blocks = []
        for offset in offsets(size_bytes):
            n = os.preadv(fd, [buffer], offset)
            blocks.append(bytes(buffer[:n]))
        return blocks


@functools.lru_cache(maxsize=256)
def is_local(directory: str) -> bool:
    """Whether one kernel owns the filesystem of `directory` (its names,
    inode numbers and page cache tell the truth). Asked once per directory
    and run: its filesystem does not change."""
    return statfs_type(directory) in _LOCAL_MAGICS
