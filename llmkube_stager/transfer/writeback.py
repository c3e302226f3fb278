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
symbol, or the filesystem refuses it) each round is an `fdatasync`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable
from types import TracebackType

WRITEBACK_BYTES = 64 << 20
_WAIT_BEFORE, _WRITE = 1, 2  # SYNC_FILE_RANGE_* (linux/fs.h)


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


def start_writeback(fd: int, sync_file_range: Callable[[int, int, int, int], int] | None) -> None:
    """Wait for the write-back started last time, start it for every dirty
    page of the file now (offset 0, length 0: to its end)."""
    if sync_file_range is not None:
        sync_file_range(fd, 0, 0, _WAIT_BEFORE)
        sync_file_range(fd, 0, 0, _WRITE)
    else:
        os.fdatasync(fd)


class Writeback:
    def __init__(self, fd: int, every_bytes: int = WRITEBACK_BYTES) -> None:
        self._fd = fd
        self._every = every_bytes
        self._pending = 0
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="writeback", daemon=True)
        self._fdatasync_only = False

    def wrote(self, n: int) -> None:
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
                start_writeback(self._fd, call)
            except OSError:
                # Not taken here (EINVAL, ESPIPE): fdatasync from now on.
                # Its errors surface at the final fsync, which is checked.
                self._fdatasync_only = True
                with contextlib.suppress(OSError):
                    os.fdatasync(self._fd)

    def __enter__(self) -> Writeback:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join()
