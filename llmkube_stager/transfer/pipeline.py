"""Receive, hash and write on three threads, one buffer at a time (#6).

The receiving thread fills a buffer, the sha256 thread hashes it, the
writer thread writes it (O_DIRECT where it fits: directio.py), and the
buffer goes back to the pool. hashlib, socket reads and pwrite all release
the GIL, so on two cores the three overlap; measured on the benchmark VM,
one 2 GiB stream took 1.6 s and 2.0 s of CPU against curl's 2.8 s and 2.8 s.
Memory is bounded by the pool: DEPTH buffers of BUFFER_BYTES, smaller when
the process already holds much (boto3), to stay within MEMORY_BUDGET_BYTES.

Bytes are hashed in file order from the buffers that are written, so a
fresh download is never read back to be verified. Writes are issued in
order too: after a crash the partial holds a prefix of the file, which is
what a resume needs.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import TYPE_CHECKING

from llmkube_stager.errors import known
from llmkube_stager.transfer.directio import PartialWriter, aligned_buffer

if TYPE_CHECKING:
    import mmap
    from hashlib import _Hash

    from llmkube_stager.transfer.writeback import Writeback

# 4 x 4 MiB: 2 GiB pinned in 1.44-1.70 s here; 4 x 2 MiB 2.07-2.37 s (each
# O_DIRECT write waits for the disk: fewer, larger ones), 3 x 4 MiB 1.56-2.36 s.
BUFFER_BYTES = 4 << 20
DEPTH = 4
# Peak RSS target (#6). boto3 with an S3 client is ~50 MiB resident by
# itself; then the buffers shrink so that the process stays under it.
MEMORY_BUDGET_BYTES = 64 << 20
_SLACK_BYTES = 4 << 20  # thread stacks, sockets, the hash state
_SMALLEST_BYTES = 1 << 20


# A file this small is received, hashed and written in turn into one buffer
# of its own size, without the pipeline's threads or the write-back thread:
# for a 4-256 KiB file, starting and joining them and mapping 4 x 4 MiB cost
# more than the overlap saves (three thread starts and 16 MiB mapped per
# file in a 2,000-file repository, #16).
INLINE_MAX_BYTES = 1 << 20


def buffer_bytes_within(budget_bytes: int, resident_bytes: int) -> int:
    """The largest buffer size (BUFFER_BYTES halved until it fits) for DEPTH
    buffers next to what the process already holds; 1 MiB at the least."""
    room = budget_bytes - _SLACK_BYTES - resident_bytes
    size = BUFFER_BYTES
    while size > _SMALLEST_BYTES and size * DEPTH > room:
        size //= 2
    return size


def resident_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


_Item = tuple["mmap.mmap", int, int]  # buffer, bytes, file offset


class Pipeline:
    """`take` a free buffer, fill it, `submit` it with its offset. `close`
    (always call it, in a `finally`) waits until everything submitted is
    hashed and written, and raises the first write error. `sha` (a hashlib
    object) is updated in file order."""

    def __init__(
        self,
        writer: PartialWriter,
        sha: _Hash | None,
        writeback: Writeback | None = None,
        buffer_bytes: int | None = None,
        depth: int = DEPTH,
        inline: bool = False,
    ) -> None:
        """`inline`: no threads; `submit` hashes and writes at once (a small
        file: see INLINE_MAX_BYTES)."""
        if buffer_bytes is None:
            buffer_bytes = buffer_bytes_within(MEMORY_BUDGET_BYTES, resident_bytes())
        self._writer = writer
        self._sha = sha
        self._writeback = writeback
        self._free: queue.Queue[mmap.mmap] = queue.Queue()
        self._buffers = [aligned_buffer(buffer_bytes) for _ in range(depth)]
        for buffer in self._buffers:
            self._free.put(buffer)
        self._to_write: queue.Queue[_Item | None] = queue.Queue()
        self._to_hash: queue.Queue[_Item | None] = queue.Queue()
        self._error: BaseException | None = None
        self._failed = threading.Event()
        self._inline = inline
        self._threads: list[threading.Thread] = []
        if inline:
            return
        self._threads.append(threading.Thread(target=self._write_loop, name="write", daemon=True))
        if sha is not None:
            self._threads.append(
                threading.Thread(target=self._hash_loop, name="sha256", daemon=True)
            )
        for thread in self._threads:
            thread.start()

    def take(self) -> mmap.mmap:
        while True:
            self._raise_failure()
            try:
                return self._free.get(timeout=0.5)
            except queue.Empty:
                continue

    def submit(self, buffer: mmap.mmap, n: int, offset: int) -> None:
        if self._inline:
            self._hash_and_write(buffer, n, offset)
            return
        first = self._to_hash if self._sha is not None else self._to_write
        first.put((buffer, n, offset))

    def give_back(self, buffer: mmap.mmap) -> None:
        self._free.put(buffer)

    def _hash_loop(self) -> None:
        update = known(self._sha, "the hash of a hashing pipeline").update
        while (item := self._to_hash.get()) is not None:
            buffer, n, _ = item
            with memoryview(buffer) as view:
                update(view[:n])
            self._to_write.put(item)
        self._to_write.put(None)

    def _write_loop(self) -> None:
        while (item := self._to_write.get()) is not None:
            buffer, n, offset = item
            if not self._failed.is_set():
                try:
                    with memoryview(buffer) as view:
                        buffered = self._writer.write(view[:n], offset)
                    if self._writeback is not None and buffered:
                        self._writeback.wrote(buffered)
                except BaseException as exc:  # surfaces in take() / close()
                    self._error = exc
                    self._failed.set()
            self._free.put(buffer)

    def _hash_and_write(self, buffer: mmap.mmap, n: int, offset: int) -> None:
        """One buffer in turn on the calling thread; a write error raises at
        once (the threads' loops keep it for take/close instead)."""
        try:
            with memoryview(buffer) as view:
                if self._sha is not None:
                    self._sha.update(view[:n])
                buffered = self._writer.write(view[:n], offset)
            if self._writeback is not None and buffered:
                self._writeback.wrote(buffered)
        finally:
            self._free.put(buffer)

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Drain: every submitted buffer hashed and written (or the first
        write error raised)."""
        if not self._inline:
            first = self._to_hash if self._sha is not None else self._to_write
            first.put(None)
        for thread in self._threads:
            thread.join()
        # Not mmap.close(): a traceback may still hold a slice of a buffer
        # (BufferError); the memory goes when the last reference does.
        self._buffers.clear()
        self._raise_failure()
