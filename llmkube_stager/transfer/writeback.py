"""Write-back while receiving, so that the durability a publish needs is
mostly paid during the download rather than after it (buffered writes).

A publish fsyncs the partial (spec §5: publish by rename must not expose a
file whose blocks are not on disk). Left to the end, that fsync writes the
whole file back at once (~1.1 s for 2 GiB on this class of machine, measured
with `sync` after curl). A thread that starts write-back every
WRITEBACK_BYTES overlaps that disk work with the network; the final fsync
only flushes the tail.

It starts write-back with `sync_file_range(SYNC_FILE_RANGE_WRITE)` rather
than `fdatasync` (#16): write-back without a journal commit or a device
cache flush each time. On the benchmark VM a flush stalls every other write
of the disk for 50-200 ms (strace: the ranged workers' O_DIRECT writes
waited exactly as long as the journal's fdatasync), and on a FUSE mount an
fsync may upload the file. Before starting the next round it waits for the
previous round's write-back (`SYNC_FILE_RANGE_WAIT_BEFORE`), so the dirty
pages of one file stay within ~2 x WRITEBACK_BYTES: a container's memory
cgroup is not filled with them. The one flush that makes the file durable
is the publish's fsync. Without `sync_file_range` (not Linux, no libc
symbol, or the filesystem refuses it: EINVAL, ESPIPE, ENOSYS, EOPNOTSUPP)
each round is an `fdatasync`.

An error of write-back itself (#21 item 1) is never suppressed: Linux
reports it once per open file (errseq), to whichever call asks first, so a
round that swallowed it would let the publish fsync return 0 over pages that
never reached the disk (a loop device whose store filled: 112 MiB of zeros
published with a true size record). Every sync of a partial goes through
`sync_data`/`sync_file`, which raise `WritebackError`; the thread keeps the
first one, `wrote` and the context's exit raise it, and the transfer fails
and drops the partial (its bytes cannot be vouched for).
"""

from __future__ import annotations

import errno
import functools
import os
import threading
from collections.abc import Callable

WRITEBACK_BYTES = 64 << 20
_WAIT_BEFORE, _WRITE = 1, 2  # SYNC_FILE_RANGE_* (linux/fs.h)
# sync_file_range not taken here: fdatasync instead. Any other errno is the
# write-back's own (EIO, ENOSPC, EDQUOT, ...).
_NOT_SUPPORTED = frozenset({errno.EINVAL, errno.ESPIPE, errno.ENOSYS, errno.EOPNOTSUPP})


class WritebackError(OSError):
    """The kernel failed to write back pages of a partial (reported once:
    the bytes of this file cannot be vouched for any more)."""


def _writeback_error(exc: OSError) -> WritebackError:
    if isinstance(exc, WritebackError):
        return exc
    return WritebackError(exc.errno or errno.EIO, exc.strerror or os.strerror(exc.errno or 5))


def sync_data(fd: int) -> None:
    """fdatasync; a failure is a WritebackError."""
    try:
        os.fdatasync(fd)
    except OSError as exc:
        raise _writeback_error(exc) from exc


def sync_file(fd: int) -> None:
    """fsync; a failure is a WritebackError."""
    try:
        os.fsync(fd)
    except OSError as exc:
        raise _writeback_error(exc) from exc


@functools.cache
def libc_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's sync_file_range (ctypes, resolved on first use: the O_DIRECT
    path never needs it), or None."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    call.restype = ctypes.c_int

    def sync_file_range(fd: int, offset: int, nbytes: int, flags: int) -> int:
        if call(fd, offset, nbytes, flags) != 0:
            raise OSError(ctypes.get_errno(), "sync_file_range")
        return 0

    return sync_file_range


class _Unsupported(Exception):
    """sync_file_range is not taken by this file."""


def start_writeback(fd: int, sync_file_range: Callable[[int, int, int, int], int] | None) -> None:
    """Wait for the write-back started last time, start it for every dirty
    page of the file now (offset 0, length 0: to its end). Raises
    WritebackError, or _Unsupported when sync_file_range is not taken."""
    if sync_file_range is None:
        sync_data(fd)
        return
    try:
        sync_file_range(fd, 0, 0, _WAIT_BEFORE)
        sync_file_range(fd, 0, 0, _WRITE)
    except OSError as exc:
        if exc.errno in _NOT_SUPPORTED:
            raise _Unsupported from exc
        raise _writeback_error(exc) from exc


class Writeback:
    def __init__(self, fd: int, every_bytes: int = WRITEBACK_BYTES) -> None:
        self._fd = fd
        self._every = every_bytes
        self._pending = 0
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="writeback", daemon=True)
        self._fdatasync_only = False
        self.error: WritebackError | None = None

    def wrote(self, n: int) -> None:
        """Count `n` bytes written through the page cache; raises the
        write-back error of an earlier round (the transfer stops there)."""
        self.check()
        self._pending += n
        if self._pending >= self._every:
            self._pending = 0
            self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stop:
                return
            call = None if self._fdatasync_only else libc_sync_file_range()
            try:
                try:
                    start_writeback(self._fd, call)
                except _Unsupported:
                    self._fdatasync_only = True
                    sync_data(self._fd)
            except WritebackError as exc:
                # Kept, never retried: the kernel reports it once (#21 item 1).
                self.error = exc
                return

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def __enter__(self) -> Writeback:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join()
        if self.error is not None and exc_info[1] is not self.error:
            # Outranks whatever else ends the transfer (a network error, a
            # hand-over to ranged connections): the partial must not be
            # resumed from (#21 item 1).
            raise self.error
