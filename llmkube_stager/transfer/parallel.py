"""Parallel ranged connections into one file (#6).

A CDN edge caps each connection (e.g. 50 MB/s); N ranged connections move N
times as much. Workers take byte ranges from a queue, each on its own
keep-alive connection, and `pwrite` into one sparse file (O_DIRECT where it
fits: directio.py). A journal records the completed ranges (fdatasync
first, so it never claims bytes the disk may not hold), so a killed pod
resumes the missing ranges only. When the file is pinned or the origin
declares a digest, a hash thread follows the contiguous completed prefix
and reads it back (from the page cache, or from the disk after direct
writes), overlapping with the download. Memory is bounded: one buffer per
worker plus the hasher's.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import mmap
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmkube_stager.cache.disk import disk_error
from llmkube_stager.cache.journal import load_journal, write_journal
from llmkube_stager.cache.partials import HEARTBEAT_S, Claim, adopt_segmented, new_writer_id
from llmkube_stager.errors import Reason, SourceError, TransferError
from llmkube_stager.layout import ranged_of_stream
from llmkube_stager.sources.base import RangeUnusable
from llmkube_stager.transfer.directio import (
    ALIGN_BYTES,
    DirectReader,
    PartialWriter,
    aligned_buffer,
    fill_limit,
)
from llmkube_stager.transfer.pipeline import MEMORY_BUDGET_BYTES, resident_bytes
from llmkube_stager.transfer.progress import ProgressTicker
from llmkube_stager.transfer.retry import RetryBudget
from llmkube_stager.transfer.target import Target, check_resumed, identity_of
from llmkube_stager.transfer.types import Handover
from llmkube_stager.transfer.writeback import Writeback, WritebackError, sync_data, sync_file

if TYPE_CHECKING:
    from hashlib import _Hash

BUFFER_BYTES = 1 << 20
MIN_ITEM_BYTES = 16 << 20
MAX_ITEM_BYTES = 256 << 20
# Progress journaled at least this often: a SIGKILL re-fetches at most this
# much plus the ranges in flight.
JOURNAL_EVERY_BYTES = 64 << 20
JOURNAL_EVERY_S = 2.0
# While a transfer is young its journal is committed more often (#21 item 9):
# every quarter of its age, JOURNAL_FIRST_S at the least, so that a kill loses
# about a quarter of a second of transfer per connection early on and a
# quarter of what the attempt did later, never the whole attempt (SIGKILLs at
# 0.3-1.8 s of a 64 MiB transfer capped at 16 MiB/s per connection made the
# origin serve 3.95-5.6x the file when the first commit came after 2 s;
# 1.07-1.39x now: tests/torture/test_kill_loop_ratio.py). A commit is an
# fdatasync of the bytes since the last one plus a small atomic write: ~13 in
# the first 8 s, then one every JOURNAL_EVERY_S as before. Measured on the
# test VM, 512 MiB at 4 x 64 MiB/s: 2.29-2.47 s against 2.35-2.46 s with the
# old 2 s schedule (no difference beyond the noise).
JOURNAL_FIRST_S = 0.25
JOURNAL_AGE_SHARE = 0.25


def journal_interval_s(age_s: float) -> float:
    """Seconds between two journal commits of a transfer `age_s` old."""
    return min(JOURNAL_EVERY_S, max(JOURNAL_FIRST_S, age_s * JOURNAL_AGE_SHARE))


SUPERVISE_S = 0.1
# start_with(): the rate of the first workers is judged this long after they start.
GROW_AFTER_S = 0.3
HASH_WINDOW_BYTES = 16 << 20  # mmap'd page cache: not allocated, but resident (RSS)
_SMALLEST_WINDOW_BYTES = 2 << 20
HASH_READ_BYTES = 4 << 20  # read back after direct writes: allocated, counts in RSS


class Ranges:
    """Completed byte ranges, merged; thread-safe; wakes the hasher."""

    def __init__(self, done: list[tuple[int, int]] | None = None) -> None:
        self._spans: list[tuple[int, int]] = []
        self._cond = threading.Condition()
        for start, end in done or []:
            self.add(start, end)

    def add(self, start: int, end: int) -> None:
        with self._cond:
            spans = sorted([*self._spans, (start, end)])
            merged: list[tuple[int, int]] = []
            for s, e in spans:
                if merged and s <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], e))
                else:
                    merged.append((s, e))
            self._spans = merged
            self._cond.notify_all()

    def snapshot(self) -> list[tuple[int, int]]:
        with self._cond:
            return list(self._spans)

    def total(self) -> int:
        return sum(e - s for s, e in self.snapshot())

    def prefix(self) -> int:
        spans = self.snapshot()
        return spans[0][1] if spans and spans[0][0] == 0 else 0

    def wait_prefix_beyond(self, position: int, timeout_s: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self._prefix_locked() > position, timeout_s)
            return self._prefix_locked()

    def _prefix_locked(self) -> int:
        return self._spans[0][1] if self._spans and self._spans[0][0] == 0 else 0

    def missing(self, size: int) -> list[tuple[int, int]]:
        gaps, cursor = [], 0
        for s, e in self.snapshot():
            if s > cursor:
                gaps.append((cursor, s))
            cursor = max(cursor, e)
        if cursor < size:
            gaps.append((cursor, size))
        return gaps


def work_items(gaps: list[tuple[int, int]], connections: int) -> list[tuple[int, int]]:
    """Split the missing ranges into items small enough to balance N workers;
    item boundaries fall on ALIGN_BYTES inside a gap (direct writes)."""
    remaining = sum(e - s for s, e in gaps)
    item = min(MAX_ITEM_BYTES, max(MIN_ITEM_BYTES, remaining // (connections * 4) + 1))
    item += -item % ALIGN_BYTES
    items = []
    for start, end in gaps:
        cut = start
        while cut < end:
            nxt = min(end, cut + item - cut % ALIGN_BYTES)
            items.append((cut, nxt))
            cut = nxt
    return items


@dataclass
class _Shared:
    fd: int
    ranges: Ranges
    writer: PartialWriter
    threads: list[threading.Thread] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)
    received: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    writeback: Writeback | None = None

    def fail(self, exc: BaseException) -> None:
        with self.lock:
            self.errors.append(exc)
        self.stop.set()

    def count(self, n: int, buffered: int) -> None:
        with self.lock:
            self.received += n
            if self.writeback is not None and buffered:
                self.writeback.wrote(buffered)


@dataclass(frozen=True)
class ParallelResult:
    claim: Claim
    journal: str
    sha256: str | None
    received: int


def save_journal(shared: _Shared, path: str, validator: str, size: int) -> None:
    """Snapshot, then fdatasync, then write: every range the journal claims
    was written before the flush (a range added after the snapshot waits for
    the next journal). Never after a write-back error (#21 item 1): the
    kernel reports it once, so a later fdatasync returns 0 over lost pages;
    the write-back thread's error is checked first, the flush's raises."""
    done = shared.ranges.snapshot()
    if shared.writeback is not None:
        shared.writeback.check()
    sync_data(shared.fd)
    write_journal(path, validator, size, done)


class ParallelTransfer:
    """One file over `connections` ranged connections. Raises StagerError;
    RangeUnusable when the origin does not honour ranges (the caller falls
    back to one sequential stream)."""

    def __init__(
        self,
        target: Target,
        connections: int,
        make_budget: Callable[[], RetryBudget],
        idle_s: float,
        seed: Handover | None = None,
        direct_io: bool = False,
        proven_idle: frozenset[str] = frozenset(),
    ) -> None:
        meta = target.meta
        assert meta.size_bytes is not None
        self._target = target
        self._file = target.file
        self._size = meta.size_bytes
        self._connections = connections
        self._make_budget = make_budget
        self._validator = identity_of(meta)
        self._direct_io = direct_io
        self._seed: Handover | None = None
        self._adopted = False
        # start_with(): fewer workers first, the rest when the origin is slow.
        self._start_connections = connections
        self._grow_below = 0.0
        self._on_grow: Callable[[float, int, int], None] | None = None
        self.claim: Claim
        if seed is not None:
            # Carry on from a stream's partial (engine.py's widening), under
            # the stream's own writer id: a writer that adopts the stream
            # partial after a kill between the journal and the rename knows
            # the journal for an orphan (cache/partials._drop_orphan_journal).
            data, self.journal = ranged_of_stream(seed.claim.path)
            if self._take_over(seed, data):
                self._seed = seed
                self.claim = seed.claim
            else:
                seed.claim.close()
        if self._seed is None:
            try:
                self.claim, self.journal, self._adopted = adopt_segmented(
                    self._file.dest, self._validator, new_writer_id(), idle_s, proven_idle
                )
            except OSError as exc:
                raise disk_error(exc, "creating the partial of", self._file.rel) from exc

    def beat(self) -> None:
        self.claim.beat()

    def start_with(
        self,
        connections: int,
        grow_below_bytes_per_s: float,
        on_grow: Callable[[float, int, int], None] | None = None,
    ) -> None:
        """Start `connections` workers only (#16: through the page cache,
        two per core copy the bytes fastest from a fast origin); if after
        GROW_AFTER_S they move less than `grow_below_bytes_per_s` together
        (an origin capping each connection), start the others, and tell
        `on_grow(rate, running, added)`."""
        self._start_connections = min(connections, self._connections)
        self._grow_below = grow_below_bytes_per_s
        self._on_grow = on_grow

    def _take_over(self, seed: Handover, data: str) -> bool:
        """Write a journal, then rename the stream's partial to ours: killed
        in between, the stream partial is still there to resume, and a data
        file never exists without its journal. The journal claims nothing
        yet: the stream's bytes are claimed by the first save, after its
        fdatasync (#16: an fdatasync here flushed the device on the
        hand-over's critical path, 0.05-0.2 s on the benchmark VM; a kill
        before the first save costs the stream's bytes, never a wrong one)."""
        if not seed.claim.owned():
            return False  # adopted away meanwhile
        write_journal(self.journal, self._validator, self._size, [])
        if seed.claim.rename_to(data):
            return True
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.journal)
        return False

    def run(self, hash_it: bool, ticker: ProgressTicker) -> ParallelResult:
        done = self._open_data()
        fd = self.claim.fd
        writer = PartialWriter(fd, self._direct_io)
        shared = _Shared(fd, Ranges(done), writer)
        if self._seed is not None:
            shared.received = self._seed.received
        try:
            # Bytes that go through the page cache (all of them when direct
            # I/O is off or turns itself off) are flushed as they go.
            with Writeback(fd) as writeback:
                shared.writeback = writeback
                digest = self._run_workers(shared, hash_it, ticker)
            sync_file(fd)
        except RangeUnusable:
            writer.close()
            self.claim.discard()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.journal)
            raise
        except WritebackError as exc:
            self._drop(shared)
            raise disk_error(exc, "writing back", self._file.rel, self.claim.path) from exc
        except OSError as exc:
            self._close(shared)
            # The write's error names no file: its partial tells the volume.
            raise disk_error(exc, "writing", self._file.rel, self.claim.path) from exc
        except BaseException:
            self._close(shared)
            raise
        writer.close()
        return ParallelResult(self.claim, self.journal, digest, shared.received)

    def _drop(self, shared: _Shared) -> None:
        """After a write-back error (#21 item 1): the data file's bytes are
        not what reached the disk, so neither it nor its journal is left
        for a resume (no journal claims them)."""
        with contextlib.suppress(OSError):
            os.unlink(self.journal)
        if any(t.is_alive() for t in shared.threads):
            # A worker still writes (see _close): our name goes, the inode
            # with the process.
            with contextlib.suppress(OSError):
                if self.claim.owned():
                    os.unlink(self.claim.path)
            return
        shared.writer.close()
        self.claim.discard()

    def _open_data(self) -> list[tuple[int, int]]:
        """The ranges the data file holds. It is sized to the file, only
        ever grown (another writer sharing the inode keeps its bytes), and a
        file that should hold bytes is never created afresh: a new sparse
        file would be zeros the journal vouches for (LLMKube #2158)."""
        seed = self._seed
        if seed is not None:
            done = [(0, seed.offset)] if seed.offset else []
        elif self._adopted:
            done = load_journal(self.journal, self._validator, self._size)
        else:
            done = []
        try:
            size = self.claim.size()
            if size > self._size:
                # Longer than the file: not a partial of it. Start over.
                self.claim.discard()
                self.claim = Claim.create(self.claim.path)
                done, size = [], 0
            if size < self._size:
                os.ftruncate(self.claim.fd, self._size)
        except OSError as exc:
            where = self._file.dest
            raise disk_error(exc, "creating the partial of", self._file.rel, where) from exc
        return done

    def _close(self, shared: _Shared) -> None:
        """Journal what is done (resume picks it up), then close, unless a
        worker is still running (stuck in a read after a SIGTERM): it could
        write through a descriptor number the process reuses. The process
        is ending on that path; its descriptors go with it."""
        try:
            save_journal(shared, self.journal, self._validator, self._size)
        except WritebackError:
            self._drop(shared)
            return
        except OSError:
            pass  # the journal of the last save stays (ENOSPC on a full volume)
        if any(t.is_alive() for t in shared.threads):
            return
        shared.writer.close()
        self.claim.close()

    def _run_workers(self, shared: _Shared, hash_it: bool, ticker: ProgressTicker) -> str | None:
        items: queue.Queue[tuple[int, int]] = queue.Queue()
        for item in work_items(shared.ranges.missing(self._size), self._connections):
            items.put(item)
        workers = self._spawn(shared, items, self._start_connections)
        hasher = None
        if hash_it:
            seed = self._seed
            if seed is not None and seed.sha is not None:
                hasher = _PrefixHasher(shared, self._size, seed.sha, seed.offset)
            else:
                hasher = _PrefixHasher(shared, self._size)
            shared.threads.append(hasher.thread)
        for thread in workers:
            thread.start()
        spare = self._connections - len(workers)
        grow = _Growth(shared, spare, self._grow_below) if spare > 0 and self._grow_below else None
        try:
            self._supervise(shared, workers, ticker, lambda: self._grown(shared, items, grow))
            if shared.errors:
                raise shared.errors[0]
            return hasher.finish() if hasher is not None else None
        finally:
            if hasher is not None:
                hasher.cancel()

    def _spawn(
        self, shared: _Shared, items: queue.Queue[tuple[int, int]], count: int
    ) -> list[threading.Thread]:
        """Up to `count` workers (not started), no more than items left."""
        workers = [
            threading.Thread(target=self._worker, args=(shared, items), daemon=True)
            for _ in range(min(count, max(1, items.qsize())))
        ]
        shared.threads.extend(workers)
        return workers

    def _grown(
        self, shared: _Shared, items: queue.Queue[tuple[int, int]], grow: _Growth | None
    ) -> list[threading.Thread]:
        """The workers started now because the origin is slow per connection."""
        if grow is None or not grow.wanted() or items.empty():
            return []
        workers = self._spawn(shared, items, grow.spare)
        for thread in workers:
            thread.start()
        if self._on_grow is not None:
            self._on_grow(grow.rate_bytes_per_s, self._start_connections, len(workers))
        return workers

    def _supervise(
        self,
        shared: _Shared,
        workers: list[threading.Thread],
        ticker: ProgressTicker,
        grown: Callable[[], list[threading.Thread]] = list,
    ) -> None:
        """Journal while the workers run (main thread, so a SIGTERM still
        lands here and stops them); the ticker heartbeats; `grown` starts
        the spare workers when they are wanted. Looks every SUPERVISE_S: at
        400 MB/s a 2 s look would journal 800 MB at a time, and a SIGKILL
        would lose all of it."""
        saved_bytes = shared.ranges.total()
        started_s = saved_s = time.monotonic()
        try:
            while alive := [t for t in workers if t.is_alive()]:
                alive[0].join(timeout=SUPERVISE_S)
                workers.extend(grown())
                total = shared.ranges.total()
                ticker.done_bytes = total
                now_s = time.monotonic()
                every_s = journal_interval_s(now_s - started_s)
                due = now_s - saved_s >= every_s and total > saved_bytes
                if due or total - saved_bytes >= JOURNAL_EVERY_BYTES:
                    save_journal(shared, self.journal, self._validator, self._size)
                    saved_bytes, saved_s = total, now_s
        except BaseException as exc:
            shared.fail(exc)
            for thread in workers:
                thread.join(timeout=HEARTBEAT_S)
            raise

    def _worker(self, shared: _Shared, items: queue.Queue[tuple[int, int]]) -> None:
        buffer = aligned_buffer(BUFFER_BYTES)
        budget = self._make_budget()
        while not shared.stop.is_set():
            try:
                start, end = items.get_nowait()
            except queue.Empty:
                return
            try:
                self._fetch_item(shared, start, end, buffer, budget)
            except BaseException as exc:
                shared.fail(exc)
                return

    def _fetch_item(
        self, shared: _Shared, start: int, end: int, buffer: mmap.mmap, budget: RetryBudget
    ) -> None:
        position = start
        while position < end and not shared.stop.is_set():
            try:
                position = self._attempt(shared, position, end, buffer)
            except SourceError as error:
                budget.spend(error, f"a range of {self._file.rel}")

    def _attempt(self, shared: _Shared, start: int, end: int, buffer: mmap.mmap) -> int:
        body = self._target.open(start, end - 1)
        position = start
        try:
            if body.start != start or body.complete:
                raise RangeUnusable(f"the origin did not honour bytes={start}-{end - 1}")
            # Every range must be of the partial's version (#10 defect 5) and
            # of the size the probe promised (#10 defect 7).
            check_resumed(self._target.meta, body, self._file.rel)
            if body.total_bytes is not None and body.total_bytes != self._size:
                raise TransferError(
                    f"the origin sends {body.total_bytes} bytes for {self._file.rel}, it "
                    f"announced {self._size}",
                    reason=Reason.SIZE_MISMATCH,
                    file=self._file.rel,
                )
            with memoryview(buffer) as view:
                while position < end and not shared.stop.is_set():
                    # readinto fills the buffer unless the body ends or fails.
                    limit = min(fill_limit(position, len(view)), end - position)
                    n = body.readinto(view[:limit])
                    if not n or shared.stop.is_set():
                        break
                    buffered = shared.writer.write(view[:n], position)
                    shared.ranges.add(position, position + n)
                    shared.count(n, buffered)
                    position += n
        finally:
            body.close()
        if position < end and not shared.stop.is_set():
            raise SourceError(
                f"the origin closed a range of {self._file.rel} early",
                transient=True,
                answered=True,
            )
        return position


def window_bytes_within(budget_bytes: int, resident: int) -> int:
    """The hash window (halved from HASH_WINDOW_BYTES, 2 MiB at the least)
    that keeps the process within the RSS budget: the mapped pages count
    (#16: ~58 MiB for HTTP, more with huggingface_hub loaded)."""
    window = HASH_WINDOW_BYTES
    while window > _SMALLEST_WINDOW_BYTES and resident + window > budget_bytes:
        window //= 2
    return window


class _Growth:
    """Decides once, GROW_AFTER_S after the workers started, whether the
    spare connections are wanted: the workers together moved less than
    `below_bytes_per_s` (each connection is capped)."""

    def __init__(self, shared: _Shared, spare: int, below_bytes_per_s: float) -> None:
        self._ranges = shared.ranges
        self.spare = spare
        self._below = below_bytes_per_s
        self._started = (time.monotonic(), shared.ranges.total())
        self._decided = False
        self.rate_bytes_per_s = 0.0

    def wanted(self) -> bool:
        if self._decided:
            return False
        started_s, start_bytes = self._started
        elapsed_s = time.monotonic() - started_s
        if elapsed_s < GROW_AFTER_S:
            return False
        self._decided = True
        self.rate_bytes_per_s = (self._ranges.total() - start_bytes) / elapsed_s
        return self.rate_bytes_per_s < self._below


def _direct_reader(shared: _Shared) -> DirectReader | None:
    try:
        return DirectReader(shared.fd, HASH_READ_BYTES)
    except OSError:
        return None  # read through the page cache instead


class _PrefixHasher:
    """sha256 of the file in order, over what the workers wrote. After
    buffered writes it hashes the page cache through a read-only mmap (no
    copy into a user buffer: pread cost ~0.25 ms/MB more CPU in the
    benchmark); after direct writes it reads the disk with O_DIRECT."""

    def __init__(
        self, shared: _Shared, size: int, sha: _Hash | None = None, position: int = 0
    ) -> None:
        self._shared = shared
        self._size = size
        self._sha = sha if sha is not None else hashlib.sha256()
        self._position = position if sha is not None else 0
        self._cancelled = threading.Event()
        self._reader = _direct_reader(shared) if shared.writer.direct else None
        self._window = window_bytes_within(MEMORY_BUDGET_BYTES, resident_bytes())
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="sha256", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        position = self._position
        try:
            while position < self._size and not self._cancelled.is_set():
                if self._reader is not None:
                    position = self._read_direct(position)
                else:
                    position = self._hash_window(position)
        except BaseException as exc:  # raised by finish(): never a silent mismatch
            self._error = exc
        finally:
            if self._reader is not None:
                self._reader.close()

    def _read_direct(self, position: int) -> int:
        ready = self._shared.ranges.wait_prefix_beyond(position, 0.5)
        if ready <= position:
            return position
        assert self._reader is not None
        try:
            chunk = self._reader.read(position, ready - position)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            self._reader.close()  # this file does not take direct reads: the cache then
            self._reader = None
            return position
        self._sha.update(chunk)
        return position + len(chunk)

    def _hash_window(self, position: int) -> int:
        """Map one window at a time: mapped file pages count as resident,
        so a whole-file map would put the file size into peak RSS."""
        window = self._window
        start = position - position % window
        length = min(window, self._size - start)
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        with mmap.mmap(
            self._shared.fd, length, flags=flags, prot=mmap.PROT_READ, offset=start
        ) as mapped:
            view = memoryview(mapped)
            try:
                while position < start + length and not self._cancelled.is_set():
                    ready = self._shared.ranges.wait_prefix_beyond(position, 0.5)
                    end = min(ready, start + length)
                    if end > position:
                        self._sha.update(view[position - start : end - start])
                        position = end
            finally:
                view.release()
        return position

    def finish(self) -> str:
        self.thread.join()
        if self._error is not None:
            raise self._error
        return self._sha.hexdigest()

    def cancel(self) -> None:
        self._cancelled.set()
        self.thread.join(timeout=HEARTBEAT_S)
