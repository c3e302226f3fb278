"""One file from the origin into a complete, verified, unpublished partial.

`fetch_partial` picks the engine. One resumable stream first
(stream.py): on an origin that serves a connection fast it is the
cheapest path, because the bytes are hashed from the receive buffers and
written with O_DIRECT. When that stream is slow (a CDN edge capping each
connection) and the origin honours ranges, the rest of a large file goes
over parallel ranged connections (parallel.py), which carry on
from the stream's partial and hash (widen.py decides when). A large file
written through the page cache (writemode.py) goes over ranged connections
at once, so that the page-cache copy is spread over the workers.
A parallel transfer that a killed pod left behind resumes as one.
`publish_completed` renames the result into place (cache/publish.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

from llmkube_stager.cache.partialnames import list_partials
from llmkube_stager.cache.partials import HEARTBEAT_S, fs_now, is_idle
from llmkube_stager.cache.publish import Published, publish
from llmkube_stager.errors import OriginChecksumMismatch, Reason, StagerError, TransferError
from llmkube_stager.layout import partial_key
from llmkube_stager.model import RemoteFile
from llmkube_stager.sources.base import Fetcher, RangeUnusable, RemoteMeta
from llmkube_stager.transfer.parallel import open_segmented
from llmkube_stager.transfer.predecessor import await_dead_writer
from llmkube_stager.transfer.progress import ProgressTicker, Received
from llmkube_stager.transfer.retry import RetryBudget
from llmkube_stager.transfer.segments import MIN_ITEM_BYTES
from llmkube_stager.transfer.stream import fetch_stream
from llmkube_stager.transfer.target import Target, identity_of, resumable
from llmkube_stager.transfer.types import Completed, Handover, TransferEffects
from llmkube_stager.transfer.widen import WidenRule

# Widen to ranged connections when one connection moves less than this
# (widen.py: early when it is flat, at the latest after WIDEN_PROBE_S). One
# stream on the benchmark VM does ~1.3 GB/s, a capped CDN edge 20-50 MB/s;
# 250 MB/s leaves a 10 GbE link with one stream.
WIDEN_BELOW_BYTES_PER_S = 250e6
WIDEN_PROBE_S = 1.0


def probe(fetcher: Fetcher, file: RemoteFile, effects: TransferEffects) -> RemoteMeta:
    budget = RetryBudget(effects.timeouts, effects.sleep, effects.log)
    return budget.call(lambda: fetcher.probe(file), f"the probe of {file.rel}")


def fetch_partial(
    fetcher: Fetcher,
    file: RemoteFile,
    effects: TransferEffects,
    meta: RemoteMeta | None = None,
) -> Completed:
    """Fill a private partial with the whole file (resuming what is there).
    Raises StagerError; the partial stays for a later resume. Its last
    progress line says what was received, how fast on average."""
    started_s = effects.monotonic()
    done = _fetch_partial(fetcher, file, effects, meta)
    size_bytes = done.expected_bytes if done.expected_bytes is not None else done.bytes_received
    if effects.model is not None:
        effects.model.finished(file.rel, size_bytes)
    received = Received(file.rel, done.bytes_received, size_bytes, effects.monotonic() - started_s)
    effects.log.info("received", received.text(), **received.fields())
    return done


def _fetch_partial(
    fetcher: Fetcher,
    file: RemoteFile,
    effects: TransferEffects,
    meta: RemoteMeta | None,
) -> Completed:
    if meta is None:
        meta = probe(fetcher, file, effects)
    # The digest streamed while receiving is this transfer's alone (review of #33).
    meta = meta.for_one_transfer()
    effects = _write_mode(effects, meta)
    target = Target(fetcher, file, meta)
    proven = frozenset[str]()
    if resumable(meta) and file.dest not in effects.no_partials:
        proven = await_dead_writer(file, meta, effects.idle_s, effects.sleep, effects.log)
    widen = None
    if _parallel_fits(fetcher, meta, effects):
        split = _page_cache_split(effects, meta)
        if split or _parallel_partial_left(file, meta, effects, proven):
            parallel = _try_parallel(target, effects, None, proven, split)
            if parallel is not None:
                return parallel
        else:
            widen = _widen_rule(effects)
    stream = fetch_stream(target, effects, widen, proven)
    if stream.handover is not None:
        effects.log.info(
            "widen",
            f"one connection moved {stream.handover.rate_bytes_per_s / 1e6:.0f} MB/s; the rest "
            f"of {file.rel} goes over {effects.connections} ranged connections",
            file=file.rel,
        )
        parallel = _try_parallel(target, effects, stream.handover)
        if parallel is not None:
            return parallel
        stream = fetch_stream(target, effects)
    done = Completed(
        file.rel, stream.claim, file.dest, stream.expected_bytes, stream.sha256, stream.received
    )
    return _verified(file, target.meta, done)


def _write_mode(effects: TransferEffects, meta: RemoteMeta) -> TransferEffects:
    """LLMKUBE_DIRECT_IO=auto: a file that fits the run's page-cache budget
    is written through the page cache, so the server's first read of it
    comes from memory (writemode.py)."""
    budget = effects.page_cache
    if effects.direct_io and budget is not None and budget.keep_cached(meta.size_bytes):
        return dataclasses.replace(effects, direct_io=False)
    return effects


def _try_parallel(
    target: Target,
    effects: TransferEffects,
    seed: Handover | None,
    proven: frozenset[str] = frozenset(),
    start_connections: int = 0,
) -> Completed | None:
    """None when the origin turns out not to honour ranges."""
    try:
        transfer = _fetch_parallel(target, effects, seed, proven, start_connections)
        return _verified(target.file, target.meta, transfer)
    except RangeUnusable as exc:
        effects.log.warning(
            "ranges_unusable", f"{exc}; falling back to one connection", file=target.file.rel
        )
        return None


def _widen_rule(effects: TransferEffects) -> WidenRule:
    return WidenRule(WIDEN_BELOW_BYTES_PER_S, WIDEN_PROBE_S, 2 * MIN_ITEM_BYTES, effects.monotonic)


def _page_cache_split(effects: TransferEffects, meta: RemoteMeta) -> int:
    """Through the page cache, a large file goes over ranged connections at
    once (#16): the copy into new page-cache pages (perf, one pinned stream
    on the benchmark VM: half of the agent's CPU, all on the writer thread)
    then runs on every worker, and the sha256 thread reads the cache
    without a copy. It starts with two workers per core (in alternated
    runs on 2 cores, 4 beat 8 and one stream) and the parallel engine adds
    the others when the origin turns out slow per connection. Returns the
    workers to start, 0 for none (O_DIRECT, or less than two work items
    per worker: one stream first, as with O_DIRECT)."""
    if effects.direct_io:
        return 0
    start = min(effects.connections, 2 * _cores())
    size = meta.size_bytes
    if start < 2 or size is None or size < start * 2 * MIN_ITEM_BYTES:
        return 0
    return start


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _parallel_fits(fetcher: Fetcher, meta: RemoteMeta, effects: TransferEffects) -> bool:
    return (
        effects.connections > 1
        and resumable(meta)
        and meta.accept_ranges
        and meta.size_bytes is not None
        and meta.size_bytes >= 2 * MIN_ITEM_BYTES
        and fetcher.parallel_ranges
    )


def _parallel_partial_left(
    file: RemoteFile, meta: RemoteMeta, effects: TransferEffects, proven: frozenset[str]
) -> bool:
    """A killed parallel transfer of this version left a partial we may
    adopt (idle: not another live pod's): resume it with ranges rather than
    start a stream beside it."""
    key = partial_key(identity_of(meta))
    segs = [p for p in list_partials(file.dest) if p.kind == "segs" and p.key == key]
    if not segs:
        return False
    if any(p.path in proven for p in segs):
        return True
    now_s = fs_now(os.path.dirname(file.dest) or ".")
    return any(is_idle(p, now_s, effects.idle_s) for p in segs)


def _fetch_parallel(
    target: Target,
    effects: TransferEffects,
    seed: Handover | None,
    proven: frozenset[str] = frozenset(),
    start_connections: int = 0,
) -> Completed:
    def budget() -> RetryBudget:
        return RetryBudget(effects.timeouts, effects.sleep, effects.log)

    file, meta = target.file, target.meta
    hash_it = file.sha256 is not None or meta.sha256 is not None
    free = effects.free_bytes()
    # A handed-over stream already holds its bytes (journaled ranges of a
    # resumed transfer are not known yet: the whole size is asked then).
    needed = None if meta.size_bytes is None else meta.size_bytes - (seed.offset if seed else 0)
    if free is not None and needed is not None and needed > free:
        if seed is not None:
            seed.claim.close()
        raise TransferError(
            f"no space left on device for {file.rel}: it needs {needed} more bytes, the "
            f"cache has {free} free",
            reason=Reason.OUT_OF_SPACE,
            file=file.rel,
        )
    transfer = open_segmented(
        target, effects.connections, budget, effects.idle_s, seed, effects.direct_io, proven
    )
    if start_connections:

        def grew(rate: float, running: int, added: int) -> None:
            effects.log.info(
                "widen",
                f"{running} ranged connections moved {rate / 1e6:.0f} MB/s; {file.rel} "
                f"goes over {running + added}",
                file=file.rel,
            )

        transfer.start_with(start_connections, WIDEN_BELOW_BYTES_PER_S, grew)
    # A live writer that waits (Retry-After, a stall) still heartbeats (#10 defect 10).
    with ProgressTicker(
        effects.log,
        effects.progress_interval_s,
        file.rel,
        transfer.beat,
        HEARTBEAT_S,
        effects.model,
    ) as ticker:
        ticker.total_bytes = meta.size_bytes
        result = transfer.run(hash_it, ticker)
    return Completed(
        file.rel,
        result.claim,
        file.dest,
        meta.size_bytes,
        result.sha256,
        result.received,
        journal=result.journal,
    )


def _verified(file: RemoteFile, meta: RemoteMeta, done: Completed) -> Completed:
    """An origin-declared digest (HF LFS) must match before anything else.
    Bytes that miss it are the origin's fault (a bad CDN copy: retryable, no
    marker, #12 item 5) unless the user pinned another digest: then the pin is
    what fails, and the acting layer writes its marker (acting/work.py, spec §7)."""
    digest = done.sha256
    pin_agrees = file.sha256 is None or file.sha256 == meta.sha256
    if meta.sha256 is not None and digest != meta.sha256 and pin_agrees:
        discard(done)
        raise OriginChecksumMismatch(
            f"the bytes of {file.rel} do not match the sha256 the origin lists "
            f"({meta.sha256}); the download was discarded",
            file=file.rel,
        )
    if meta.md5_b64 or meta.crc32c_b64:
        from llmkube_stager.transfer.declared import check_declared

        check_declared(file.rel, meta, done.partial, lambda: discard(done))
    return done


def publish_completed(done: Completed) -> Published:
    """Publish by rename; raises PartialLost when another writer adopted it.
    Returns the published inode's fstat and evidence (what a stamp may
    vouch for)."""
    try:
        published = publish(done.claim, done.dest, done.expected_bytes, done.rel)
    except StagerError:
        if done.claim.closed:
            _remove(done.journal)  # its data file is gone (a failed fsync, #21 item 1)
        raise
    _remove(done.journal)
    return published


def discard(done: Completed) -> None:
    done.claim.discard()
    _remove(done.journal)


def _remove(path: str | None) -> None:
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
