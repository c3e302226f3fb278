"""Parallel ranged connections into one file (#6).

A CDN edge caps each connection (e.g. 50 MB/s); N ranged connections move N
times as much. Workers take byte ranges from a queue, each on its own
keep-alive connection, and `pwrite` into one sparse file (O_DIRECT where it
fits: directio.py). A journal records the completed ranges (fdatasync
first, so it never claims bytes the disk may not hold), so a killed pod
resumes the missing ranges only (the ranges and the journal's schedule:
segments.py). When the file is pinned or the origin declares a digest, a
hash thread follows the contiguous completed prefix (prefixhash.py),
overlapping with the download. Memory is bounded: one buffer per worker
plus the hasher's.

Opening a transfer (adopting a partial, or taking over a stream's) is
`open_segmented`; the transfer's constructor only assigns (#32 item 4).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from llmkube_stager.cache.disk import disk_error
from llmkube_stager.cache.heldpartial import HeldPartial
from llmkube_stager.cache.journal import load_journal, write_journal
from llmkube_stager.cache.partialnames import new_writer_id
from llmkube_stager.cache.partials import HEARTBEAT_S, adopt_segmented
from llmkube_stager.errors import Reason, SourceError, TransferError, known
from llmkube_stager.layout import ranged_of_stream
from llmkube_stager.sources.base import Body, RangeUnusable
from llmkube_stager.transfer.declared import DigestFollower, follow_declared
from llmkube_stager.transfer.directio import PartialWriter, aligned_buffer, fill_limit
from llmkube_stager.transfer.prefixhash import PrefixHasher
from llmkube_stager.transfer.progress import ProgressTicker, ReadSlices
from llmkube_stager.transfer.retry import RetryBudget
from llmkube_stager.transfer.segments import (
    JOURNAL_EVERY_BYTES,
    Ranges,
    journal_interval_s,
    work_items,
)
from llmkube_stager.transfer.target import Target, check_resumed, identity_of
from llmkube_stager.transfer.types import Handover
from llmkube_stager.transfer.writeback import Writeback, WritebackError, sync_data, sync_file

BUFFER_BYTES = 1 << 20
SUPERVISE_S = 0.1
# start_with(): the rate of the first workers is judged this long after they start.
GROW_AFTER_S = 0.3


@dataclass
class _Shared:
    fd: int
    ranges: Ranges
    writer: PartialWriter
    threads: list[threading.Thread] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)
    received: int = 0
    # Bytes in the workers' buffers, not written yet (progress, #46 item 5).
    filling: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    writeback: Writeback | None = None

    def fail(self, exc: BaseException) -> None:
        with self.lock:
            self.errors.append(exc)
        self.stop.set()

    def arrived(self, n: int) -> None:
        with self.lock:
            self.filling += n

    def count(self, n: int, buffered: int) -> None:
        with self.lock:
            # Out of `filling` before the range is added: progress may lag
            # a buffer, never run ahead of the bytes.
            self.filling -= n
            self.received += n
            if self.writeback is not None and buffered:
                self.writeback.wrote(buffered)


@dataclass(frozen=True)
class ParallelResult:
    claim: HeldPartial
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


def open_segmented(
    target: Target,
    connections: int,
    make_budget: Callable[[], RetryBudget],
    idle_s: float,
    seed: Handover | None = None,
    direct_io: bool = False,
    proven_idle: frozenset[str] = frozenset(),
) -> ParallelTransfer:
    """A transfer of `target` over `connections` ranged connections, its
    data file held: the stream's partial `seed` when it can be taken over
    (else closed), or an idle partial of the same version adopted, or a
    fresh one. Raises StagerError."""
    meta = target.meta
    size_bytes = known(meta.size_bytes, "the size of a ranged transfer")
    validator = identity_of(meta)
    if seed is not None:
        # Carry on from a stream's partial (engine.py's widening), under
        # the stream's own writer id: a writer that adopts the stream
        # partial after a kill between the journal and the rename knows
        # the journal for an orphan (cache/partials._drop_orphan_journal).
        data, journal = ranged_of_stream(seed.claim.path)
        if _take_over(seed, data, journal, validator, size_bytes):
            return ParallelTransfer(
                target,
                connections,
                make_budget,
                seed.claim,
                journal,
                seed=seed,
                direct_io=direct_io,
            )
        seed.claim.close()
    try:
        claim, journal, adopted = adopt_segmented(
            target.file.dest, validator, new_writer_id(), idle_s, proven_idle
        )
    except OSError as exc:
        raise disk_error(exc, "creating the partial of", target.file.rel) from exc
    return ParallelTransfer(
        target, connections, make_budget, claim, journal, adopted=adopted, direct_io=direct_io
    )


def _take_over(seed: Handover, data: str, journal: str, validator: str, size: int) -> bool:
    """Write a journal, then rename the stream's partial to ours: killed
    in between, the stream partial is still there to resume, and a data
    file never exists without its journal. The journal claims nothing
    yet: the stream's bytes are claimed by the first save, after its
    fdatasync (#16: an fdatasync here flushed the device on the
    hand-over's critical path, 0.05-0.2 s on the benchmark VM; a kill
    before the first save costs the stream's bytes, never a wrong one)."""
    if not seed.claim.owned():
        return False  # adopted away meanwhile
    write_journal(journal, validator, size, [])
    if seed.claim.rename_to(data):
        return True
    with contextlib.suppress(FileNotFoundError):
        os.unlink(journal)
    return False


class ParallelTransfer:
    """One file over `connections` ranged connections. Raises StagerError;
    RangeUnusable when the origin does not honour ranges (the caller falls
    back to one sequential stream)."""

    def __init__(
        self,
        target: Target,
        connections: int,
        make_budget: Callable[[], RetryBudget],
        claim: HeldPartial,
        journal: str,
        *,
        seed: Handover | None = None,
        adopted: bool = False,
        direct_io: bool = False,
    ) -> None:
        """`claim`: the data file, held; `journal`: its journal's path;
        `seed`: the stream this carries on from (its bytes are the data
        file's); `adopted`: the data file was another writer's, its journal
        tells what it holds. Made by `open_segmented`."""
        meta = target.meta
        self._target = target
        self._file = target.file
        self._size = known(meta.size_bytes, "the size of a ranged transfer")
        self._connections = connections
        self._make_budget = make_budget
        self._validator = identity_of(meta)
        self._direct_io = direct_io
        # The data file as opened: its holder, its journal, what it holds.
        self.claim, self.journal = claim, journal
        self._seed, self._adopted = seed, adopted
        # start_with(): fewer workers first, the rest when the origin is slow.
        self._start_connections = connections
        self._grow_below = 0.0
        self._on_grow: Callable[[float, int, int], None] | None = None

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
                self.claim = HeldPartial.create(self.claim.path)
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
        hasher: PrefixHasher | None = None
        declared: DigestFollower | None = None
        # What the data file holds of the stream this carries on from, as
        # opened (review of #33 item 5: not the seed's offset, should the
        # data file have been started over): a hash carries on from there.
        seed = self._seed
        carried = seed.offset if seed is not None and shared.ranges.prefix() == seed.offset else 0
        try:
            if hash_it:
                direct = shared.writer.direct
                if seed is not None and seed.sha is not None and carried:
                    hasher = PrefixHasher(
                        shared.fd, shared.ranges, direct, self._size, seed.sha, carried
                    )
                else:
                    hasher = PrefixHasher(shared.fd, shared.ranges, direct, self._size)
                shared.threads.append(hasher.thread)
            # #33 item 5: a declared md5/crc32c follows the ranges too.
            declared = follow_declared(
                shared.fd, shared.ranges, shared.writer.direct, self._target.meta, carried
            )
            if declared is not None:
                shared.threads.append(declared.thread)
            for thread in workers:
                thread.start()
            spare = self._connections - len(workers)
            grow = (
                _Growth(shared, spare, self._grow_below) if spare > 0 and self._grow_below else None
            )
            self._supervise(shared, workers, ticker, lambda: self._grown(shared, items, grow))
            if shared.errors:
                raise shared.errors[0]
            if declared is not None:
                declared.settle()
            return hasher.finish() if hasher is not None else None
        finally:
            if hasher is not None:
                hasher.cancel()
            if declared is not None:
                declared.cancel()

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
        ticker.begin(saved_bytes + shared.filling, shared.received + shared.filling)
        try:
            while alive := [t for t in workers if t.is_alive()]:
                alive[0].join(timeout=SUPERVISE_S)
                workers.extend(grown())
                total = shared.ranges.total()
                ticker.done_bytes = total + shared.filling
                ticker.received_bytes = shared.received + shared.filling
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
                slices = ReadSlices(len(view))
                while position < end and not shared.stop.is_set():
                    limit = min(fill_limit(position, len(view)), end - position)
                    n, failure = _fill(body, view[:limit], shared, slices)
                    if shared.stop.is_set():
                        break  # nothing written once the transfer stops
                    if n:
                        buffered = shared.writer.write(view[:n], position)
                        shared.count(n, buffered)
                        shared.ranges.add(position, position + n)
                        position += n
                    if failure is not None:
                        raise failure
                    if not n:
                        break
        finally:
            body.close()
        if position < end and not shared.stop.is_set():
            raise SourceError(
                f"the origin closed a range of {self._file.rel} early",
                transient=True,
                answered=True,
            )
        return position


def _fill(
    body: Body, view: memoryview, shared: _Shared, slices: ReadSlices
) -> tuple[int, SourceError | None]:
    """Fill `view` a slice at a time unless the body ends or fails, each
    slice counted as it arrives: the bytes read, and the failure that came
    after some of them (they are written before it is raised)."""
    n = 0
    while n < len(view) and not shared.stop.is_set():
        try:
            got = body.readinto(view[n : n + slices.size_bytes])
        except SourceError as failure:
            if not n:
                raise
            return n, failure
        slices.took()
        if not got:
            break
        n += got
        shared.arrived(got)
    return n, None


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
