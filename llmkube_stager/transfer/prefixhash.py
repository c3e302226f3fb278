"""The hash of a segmented transfer (#6): a thread follows the contiguous
completed prefix and reads it back (from the page cache, or from the disk
after direct writes), overlapping with the download. Memory is bounded:
one window or read buffer (#32 item 4: apart from the workers, parallel.py).
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import threading
from typing import TYPE_CHECKING

from llmkube_stager.cache.partials import HEARTBEAT_S
from llmkube_stager.errors import known
from llmkube_stager.transfer.directio import DirectReader
from llmkube_stager.transfer.pipeline import MEMORY_BUDGET_BYTES, resident_bytes
from llmkube_stager.transfer.segments import Ranges

if TYPE_CHECKING:
    from llmkube_stager.sources.wire.digest import RunningDigest

HASH_WINDOW_BYTES = 16 << 20  # mmap'd page cache: not allocated, but resident (RSS)
_SMALLEST_WINDOW_BYTES = 2 << 20
HASH_READ_BYTES = 4 << 20  # read back after direct writes: allocated, counts in RSS
# What mmap raises for a file that cannot be mapped shared: ENODEV (FUSE in
# direct_io mode, virtiofs cache=none), EACCES, EINVAL, ENOTSUP.
_UNMAPPABLE = frozenset({errno.ENODEV, errno.EACCES, errno.EINVAL, errno.ENOTSUP})


def window_bytes_within(budget_bytes: int, resident: int) -> int:
    """The hash window (halved from HASH_WINDOW_BYTES, 2 MiB at the least)
    that keeps the process within the RSS budget: the mapped pages count
    (#16: ~58 MiB for HTTP, more with huggingface_hub loaded)."""
    window = HASH_WINDOW_BYTES
    while window > _SMALLEST_WINDOW_BYTES and resident + window > budget_bytes:
        window //= 2
    return window


def _direct_reader(fd: int) -> DirectReader | None:
    try:
        return DirectReader(fd, HASH_READ_BYTES)
    except OSError:
        return None  # read through the page cache instead


class PrefixHasher:
    """A digest of the file in order (its sha256, or a declared md5/crc32c:
    transfer/declared.py), over what the workers wrote. After
    buffered writes it hashes the page cache through a read-only mmap (no
    copy into a user buffer: pread cost ~0.25 ms/MB more CPU in the
    benchmark); after direct writes it reads the disk with O_DIRECT."""

    def __init__(
        self,
        fd: int,
        ranges: Ranges,
        direct: bool,
        size: int,
        sha: RunningDigest | None = None,
        position: int = 0,
        name: str = "sha256",
    ) -> None:
        """`fd`: the data file the workers write; `ranges`: what they wrote;
        `direct`: whether they write with O_DIRECT (then the disk is read);
        `sha`: the hash to carry on from `position` (any hashlib object: a
        declared md5 is followed too, transfer/declared.py)."""
        self._fd = fd
        self._ranges = ranges
        self._size = size
        self._sha: RunningDigest = sha if sha is not None else hashlib.sha256()
        self._position = position if sha is not None else 0
        self._cancelled = threading.Event()
        self._reader = _direct_reader(fd) if direct else None
        self._window = window_bytes_within(MEMORY_BUDGET_BYTES, resident_bytes())
        # Set when the file refuses a shared map: read with pread instead.
        self._read_buffer: bytearray | None = None
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        position = self._position
        try:
            while position < self._size and not self._cancelled.is_set():
                if self._reader is not None:
                    position = self._read_direct(position)
                elif self._read_buffer is not None:
                    position = self._hash_read(position)
                else:
                    position = self._hash_window(position)
        except BaseException as exc:  # raised by finish(): never a silent mismatch
            self._error = exc
        finally:
            if self._reader is not None:
                self._reader.close()

    def _read_direct(self, position: int) -> int:
        ready = self._ranges.wait_prefix_beyond(position, 0.5)
        if ready <= position:
            return position
        reader = known(self._reader, "the direct reader")
        try:
            chunk = reader.read(position, ready - position)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            reader.close()  # this file does not take direct reads: the cache then
            self._reader = None
            return position
        self._sha.update(chunk)
        return position + len(chunk)

    def _hash_window(self, position: int) -> int:
        """Map one window at a time: mapped file pages count as resident,
        so a whole-file map would put the file size into peak RSS. A file
        that refuses a shared map (a FUSE mount in direct_io mode: bindfs,
        s3fs, rclone --direct-io, blobfuse2; virtiofs with cache=none:
        ENODEV) is read with pread from then on (review of #33 item 5: the
        follower of a ranged gs:// or Azure blob died there, and every such
        file was an internal error; a pinned sha256 already was)."""
        window = self._window
        start = position - position % window
        length = min(window, self._size - start)
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        try:
            mapped = mmap.mmap(self._fd, length, flags=flags, prot=mmap.PROT_READ, offset=start)
        except OSError as exc:
            if exc.errno not in _UNMAPPABLE:
                raise
            self._read_buffer = bytearray(HASH_READ_BYTES)
            return position
        with mapped:
            view = memoryview(mapped)
            try:
                while position < start + length and not self._cancelled.is_set():
                    ready = self._ranges.wait_prefix_beyond(position, 0.5)
                    end = min(ready, start + length)
                    if end > position:
                        self._sha.update(view[position - start : end - start])
                        position = end
            finally:
                view.release()
        return position

    def _hash_read(self, position: int) -> int:
        """One pread of what the workers completed beyond `position`."""
        ready = self._ranges.wait_prefix_beyond(position, 0.5)
        if ready <= position:
            return position
        buffer = known(self._read_buffer, "the read buffer")
        view = memoryview(buffer)
        try:
            count = os.preadv(self._fd, [view[: min(len(buffer), ready - position)]], position)
            if count <= 0:
                raise OSError(errno.EIO, "the partial ended before what its workers wrote")
            self._sha.update(view[:count])
        finally:
            view.release()
        return position + count

    def finish(self) -> str:
        self.thread.join()
        if self._error is not None:
            raise self._error
        return self._sha.hexdigest()

    def cancel(self) -> None:
        self._cancelled.set()
        self.thread.join(timeout=HEARTBEAT_S)
