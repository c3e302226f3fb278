"""One connection: a ranged, resumable, size-checked stream into a partial
(spec §5.2).

probe -> partial named per origin validator (spec §4.2, a private writer
id added: cache/partials.py) -> ranged GET from the partial's size with
If-Range -> receive with `readinto` into reusable aligned buffers, sha256
and the write (O_DIRECT where it fits) on other threads (pipeline.py) ->
size check.

On an origin that is slow per connection, the first attempt hands over to
ranged connections (`WidenRule`, #6): one stream first, because on a fast
origin it is the cheapest path (bytes hashed from the receive buffers, never
read back), widened only when a per-connection cap makes it the slow one.

Rules kept from the scripts and pip: a 200 to a Range request restarts the
file; a 416 on a complete partial publishes without a body; no Accept-Ranges
(or no known size) means no resume; a short body is resumed, a long one is a
size mismatch. Writing at explicit offsets (not O_APPEND) keeps a partial
consistent with the offsets the origin declared.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmkube_stager.cache.disk import disk_error
from llmkube_stager.cache.partials import (
    HEARTBEAT_S,
    adopt_partial,
    new_writer_id,
    remove_stale,
)
from llmkube_stager.cache.records import FILE_MODE
from llmkube_stager.errors import Reason, SourceError, TransferError
from llmkube_stager.layout import validator_of
from llmkube_stager.model import RemoteFile
from llmkube_stager.sources.base import Body, Fetcher, RangeUnusable, RemoteMeta
from llmkube_stager.transfer.directio import PartialWriter, fill_limit
from llmkube_stager.transfer.hashing import sha256_prefix
from llmkube_stager.transfer.pipeline import Pipeline
from llmkube_stager.transfer.progress import ProgressTicker
from llmkube_stager.transfer.retry import RetryBudget
from llmkube_stager.transfer.types import Handover, TransferEffects
from llmkube_stager.transfer.writeback import Writeback

if TYPE_CHECKING:
    from hashlib import _Hash

# Progress worth a fresh retry budget (see RetryBudget.refund).
_REFUND_BYTES = 1 << 20


@dataclass(frozen=True)
class Streamed:
    partial: str
    expected_bytes: int | None
    sha256: str | None
    received: int
    handover: Handover | None = None


class WidenRule:
    """Decides once, `probe_s` into an attempt, whether one connection is
    too slow and the rest should go over ranged connections. Only worth it
    with enough left to split (`min_rest_bytes`)."""

    def __init__(
        self,
        below_bytes_per_s: float,
        probe_s: float,
        min_rest_bytes: int,
        clock: Callable[[], float],
    ) -> None:
        self._below = below_bytes_per_s
        self._probe_s = probe_s
        self._min_rest = min_rest_bytes
        self._clock = clock
        self._started: tuple[float, int] | None = None
        self._decided = False
        self.rate_bytes_per_s = 0.0

    def begin(self) -> None:
        """A new attempt: judged afresh from its first bytes."""
        self._started = None

    def wants_more(self, offset: int, expected: int | None) -> bool:
        """Called as bytes arrive, `offset` the end of what arrived. The
        clock starts at the first arrival: the request's latency and a
        server's time to first byte say nothing of a connection cap."""
        if self._decided or expected is None:
            return False
        if self._started is None:
            self._started = (self._clock(), offset)
            return False
        started_s, start_offset = self._started
        elapsed_s = self._clock() - started_s
        if elapsed_s < self._probe_s:
            return False
        self._decided = True
        self.rate_bytes_per_s = (offset - start_offset) / elapsed_s
        return self.rate_bytes_per_s < self._below and expected - offset >= self._min_rest


class _Widen(Exception):
    """Internal: stop this stream, the partial goes to ranged connections."""


def fetch_stream(
    fetcher: Fetcher,
    file: RemoteFile,
    meta: RemoteMeta,
    effects: TransferEffects,
    widen: WidenRule | None = None,
) -> Streamed:
    """Attempts over one connection until the partial holds the whole file
    (or, with `widen`, until it hands over to ranged connections)."""
    budget = RetryBudget(effects.timeouts, effects.sleep, effects.log)
    state = _open_state(file, meta, effects)
    state.hash_it = file.sha256 is not None or meta.sha256 is not None
    _check_space(state, effects, file.rel)
    try:
        received = _fill(fetcher, file, meta, state, budget, effects, widen)
    except _Widen:
        assert widen is not None
        sha = state.sha if state.sha_at == state.offset else None
        handover = Handover(
            state.partial, state.offset, sha, state.received, widen.rate_bytes_per_s
        )
        return Streamed(state.partial, state.expected_bytes, None, state.received, handover)
    digest = None
    if state.hash_it:
        if state.sha is None or state.sha_at != state.offset:
            # Complete by a 416 with nothing received this time: hash the partial.
            state.sha = sha256_prefix(state.partial, state.offset)
        digest = state.sha.hexdigest()
    return Streamed(state.partial, state.expected_bytes, digest, received)


@dataclass
class _State:
    """Where the partial stands; mutated as attempts go."""

    partial: str
    offset: int
    expected_bytes: int | None
    ranges: bool
    hash_it: bool = False
    sha: _Hash | None = None
    sha_at: int = -1  # the partial offset `sha` covers (-1: none)
    received: int = 0  # body bytes that came over the wire, every attempt
    high_water: int = 0  # the furthest offset any attempt reached
    direct_io: bool = False
    probed_bytes: int | None = None  # the size the probe reported


def _fill(
    fetcher: Fetcher,
    file: RemoteFile,
    meta: RemoteMeta,
    state: _State,
    budget: RetryBudget,
    effects: TransferEffects,
    widen: WidenRule | None,
) -> int:
    """Attempts until the partial holds the whole file; bytes received."""
    heartbeat = _heartbeat(state)
    with ProgressTicker(
        effects.log, effects.progress_interval_s, file.rel, heartbeat, HEARTBEAT_S
    ) as ticker:
        ticker.total_bytes = state.expected_bytes
        while True:
            try:
                if _attempt(fetcher, file, meta, state, ticker, widen):
                    return state.received
                error = _short_body_error(file, state)
            except RangeUnusable as exc:
                effects.log.warning("range_unusable", f"{exc}; restarting from zero", file=file.rel)
                _restart(state, ranges=False)
                error = SourceError(str(exc), transient=True, answered=True)
            except SourceError as exc:
                error = exc
            if state.offset - state.high_water >= _REFUND_BYTES:
                # Only new ground earns the budget back: an origin that cuts
                # every from-zero attempt at the same place still ends.
                budget.refund()
            state.high_water = max(state.high_water, state.offset)
            if not state.ranges:
                _restart(state, ranges=False)
            budget.spend(error, f"the download of {file.rel}")


def _heartbeat(state: _State) -> Callable[[], None]:
    def touch() -> None:
        # Tells other writers this partial is alive (partials.IDLE_S).
        with contextlib.suppress(OSError):
            os.utime(state.partial)

    return touch


def _open_state(file: RemoteFile, meta: RemoteMeta, effects: TransferEffects) -> _State:
    validator = validator_of(meta.size_bytes, meta.etag)
    now = effects.wall_clock()
    for stale in remove_stale(file.dest, validator, now, effects.idle_s, effects.listed):
        effects.log.info(
            "swept_partial", "removed a partial of another upstream version", path=stale
        )
    partial = adopt_partial(file.dest, validator, new_writer_id(), now, effects.idle_s)
    ranges = meta.accept_ranges and meta.size_bytes is not None
    offset = _partial_size(partial) if ranges else 0
    if meta.size_bytes is not None and offset > meta.size_bytes:
        offset = 0
    if offset:
        effects.log.info("resume", f"Resuming {file.rel} from byte {offset}", file=file.rel)
    return _State(
        partial,
        offset,
        meta.size_bytes,
        ranges,
        high_water=offset,
        direct_io=effects.direct_io,
        probed_bytes=meta.size_bytes,
    )


def _partial_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _restart(state: _State, *, ranges: bool) -> None:
    state.offset = 0
    state.ranges = state.ranges and ranges


def _check_space(state: _State, effects: TransferEffects, rel: str) -> None:
    free = effects.free_bytes()
    if state.expected_bytes is None or free is None:
        return
    needed = state.expected_bytes - state.offset
    if needed > free:
        raise TransferError(
            f"no space left on device for {rel}: it needs {needed} more bytes, the cache has "
            f"{free} free",
            reason=Reason.OUT_OF_SPACE,
            file=rel,
        )


def _short_body_error(file: RemoteFile, state: _State) -> SourceError:
    return SourceError(
        f"the origin closed {file.rel} after {state.offset} of {state.expected_bytes} bytes",
        transient=True,
        answered=True,
    )


def _attempt(
    fetcher: Fetcher,
    file: RemoteFile,
    meta: RemoteMeta,
    state: _State,
    ticker: ProgressTicker,
    widen: WidenRule | None,
) -> bool:
    """One request. True when the partial is complete."""
    body = fetcher.open(file, meta, state.offset if state.ranges else 0)
    try:
        if body.complete:
            return _complete_by_416(state, body)
        _adopt_body(state, body)
        ticker.total_bytes = state.expected_bytes
        _receive(body, state, ticker, file.rel, widen)
    finally:
        body.close()
    return _judge_size(state, file.rel)


def _complete_by_416(state: _State, body: Body) -> bool:
    total = body.total_bytes if body.total_bytes is not None else state.expected_bytes
    if total is not None and state.offset == total:
        return True
    # A 416 for a partial that is not complete: start over without ranges.
    state.offset, state.ranges = 0, False
    raise SourceError("the origin refused the resume range", transient=True, answered=True)


def _adopt_body(state: _State, body: Body) -> None:
    """Reconcile what the response says with what the partial holds."""
    if body.start == 0:
        state.offset = 0  # a 200 to a Range request restarts the file (pip)
    total = body.total_bytes
    if total is None or total == state.expected_bytes:
        return
    if body.start > 0:
        # Resumed bytes would belong to another version: never splice (#80).
        state.offset, state.ranges = 0, False
        raise SourceError(
            "the object changed size during the transfer",
            transient=True,
            reason=Reason.SOURCE_CHANGED,
            answered=True,
        )
    state.expected_bytes = total


def _receive(
    body: Body, state: _State, ticker: ProgressTicker, rel: str, widen: WidenRule | None
) -> None:
    fd = _open_partial(state, rel)
    try:
        os.ftruncate(fd, state.offset)
        ticker.done_bytes = state.offset
        copy_into = body.copy_into
        if not state.hash_it and copy_into is not None:
            _copy_into(fd, copy_into, state, ticker)
        else:
            _receive_pipelined(fd, body, state, ticker, widen)
        os.fsync(fd)
    except OSError as exc:
        raise disk_error(exc, "writing", rel) from exc
    finally:
        os.close(fd)


def _copy_into(
    fd: int, copy_into: Callable[[int, int], int], state: _State, ticker: ProgressTicker
) -> None:
    """A local source with nothing to hash is copied by the kernel."""
    with Writeback(fd) as writeback:
        while n := copy_into(fd, state.offset):
            state.offset += n
            state.received += n
            ticker.done_bytes = state.offset
            writeback.wrote(n)


def _receive_pipelined(
    fd: int, body: Body, state: _State, ticker: ProgressTicker, widen: WidenRule | None
) -> None:
    sha = _sha_for(state)
    state.sha_at = -1  # until the pipeline has drained
    writer = PartialWriter(fd, state.partial, state.direct_io)
    with contextlib.ExitStack() as stack:
        stack.callback(writer.close)
        # Bytes written through the page cache are flushed as they go
        # (all of them when direct I/O is off or turns itself off).
        pipe = Pipeline(writer, sha, stack.enter_context(Writeback(fd)))
        try:
            _receive_into(body, state, ticker, pipe, widen)
        finally:
            pipe.close()  # a write error raised here outranks a network one
            state.sha_at = state.offset


def _open_partial(state: _State, rel: str) -> int:
    """Open our partial to continue at `state.offset`. It is never created or
    grown to continue: if another writer adopted it away (it looked idle) or
    it is shorter than we think, start again from zero in a fresh file of
    our own, because ftruncate-ing a new file up to the offset would publish
    zeros (#2158 class)."""
    try:
        if state.offset > 0:
            try:
                fd = os.open(state.partial, os.O_WRONLY)
            except FileNotFoundError:
                fd = -1
            if fd >= 0 and os.fstat(fd).st_size >= state.offset:
                return fd
            if fd >= 0:
                os.close(fd)
            state.offset = 0
            state.high_water = 0
        return os.open(state.partial, os.O_WRONLY | os.O_CREAT, FILE_MODE)
    except OSError as exc:
        raise disk_error(exc, "creating the partial of", rel) from exc


def _receive_into(
    body: Body, state: _State, ticker: ProgressTicker, pipe: Pipeline, widen: WidenRule | None
) -> None:
    """Fill a buffer, hand it to the pipeline, repeat. Bytes already in a
    buffer when the connection fails are still written (resume from them)."""
    if widen is not None:
        widen.begin()
    while True:
        buffer = pipe.take()
        n, ended, widening = 0, False, False
        try:
            with memoryview(buffer) as view:
                limit = fill_limit(state.offset, len(view))
                while n < limit and not widening:
                    got = body.readinto(view[n:limit])
                    if not got:
                        ended = True
                        break
                    n += got
                    widening = (
                        widen is not None
                        and _may_widen(state)
                        and widen.wants_more(state.offset + n, state.expected_bytes)
                    )
        finally:
            if n:
                pipe.submit(buffer, n, state.offset)
                state.offset += n
                state.received += n
                ticker.done_bytes = state.offset
            else:
                pipe.give_back(buffer)
        if ended:
            return
        if widening:
            raise _Widen


def _may_widen(state: _State) -> bool:
    """Ranged connections carry on only from bytes of the probed version:
    the size the probe saw (a body of another size is another object, and
    the parallel engine works to the probed size) and an origin that
    honours ranges."""
    return state.ranges and state.expected_bytes == state.probed_bytes


def _sha_for(state: _State) -> _Hash | None:
    """The running hash must cover exactly bytes [0, offset) of the partial;
    after a restart or an adoption it is rebuilt from the partial itself."""
    if not state.hash_it:
        return None
    if state.sha is None or state.sha_at != state.offset:
        state.sha = sha256_prefix(state.partial, state.offset) if state.offset else hashlib.sha256()
        state.sha_at = state.offset
    return state.sha


def _judge_size(state: _State, rel: str) -> bool:
    expected = state.expected_bytes
    if expected is None or state.offset == expected:
        return True
    if state.offset > expected:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(state.partial)
        raise TransferError(
            f"received {state.offset} bytes of {rel}, the origin promised {expected}",
            reason=Reason.SIZE_MISMATCH,
            file=rel,
        )
    return False
