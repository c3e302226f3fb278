"""One connection: a ranged, resumable, size-checked stream into a partial
(spec §5.2).

probe -> partial named per origin validator (spec §4.2, a private writer
id added: cache/partials.py) -> ranged GET from the partial's size with
If-Range -> receive with `readinto` into reusable aligned buffers, sha256
and the write (O_DIRECT where it fits) on other threads (pipeline.py) ->
size check.

On an origin that is slow per connection, the first attempt hands over to
ranged connections (`widen.WidenRule`, #6): one stream first, because on a fast
origin it is the cheapest path (bytes hashed from the receive buffers, never
read back), widened only when a per-connection cap makes it the slow one.

Rules kept from the scripts and pip: a 200 to a Range request restarts the
file; a 416 on a complete partial publishes without a body; no Accept-Ranges
(or no known size) means no resume; a short body is resumed, a long one is a
size mismatch. Writing at explicit offsets (not O_APPEND) keeps a partial
consistent with the offsets the origin declared.

Rules of #10, so that two writers that share a partial (a frozen writer
that resumes after its partial was adopted) write the same bytes at the same
offsets and a size is never taken for content: the partial is validated
(ours, holding exactly the offset) before each request, and a response is
written only at the offset it was requested for; a restart from zero goes
into a fresh partial, never a truncated one; a resumed 206 must carry the
partial's validators; the body stops at the expected size (more is a size
mismatch, never written); the GET's size must be the one the probe promised;
and a body whose end cannot be proven (close-delimited, no size known) is
complete only when a digest proves it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmkube_stager.cache.disk import disk_error
from llmkube_stager.cache.heldpartial import HeldPartial
from llmkube_stager.cache.partialnames import new_writer_id
from llmkube_stager.cache.partials import HEARTBEAT_S, adopt_partial, fs_now, remove_stale
from llmkube_stager.errors import Reason, SourceError, TransferError, known
from llmkube_stager.layout import private_partial_path
from llmkube_stager.model import RemoteFile
from llmkube_stager.sources.base import Body, RangeUnusable, RemoteMeta
from llmkube_stager.transfer.directio import ALIGN_BYTES, PartialWriter, fill_limit
from llmkube_stager.transfer.hashing import sha256_prefix
from llmkube_stager.transfer.pipeline import BUFFER_BYTES, INLINE_MAX_BYTES, Pipeline
from llmkube_stager.transfer.progress import ProgressTicker, ReadSlices
from llmkube_stager.transfer.retry import RetryBudget
from llmkube_stager.transfer.target import (
    Target,
    check_resumed,
    identity_of,
    is_other_version,
    resumable,
)
from llmkube_stager.transfer.types import Handover, TransferEffects
from llmkube_stager.transfer.widen import WidenRule
from llmkube_stager.transfer.writeback import Writeback, WritebackError, sync_file

if TYPE_CHECKING:
    from hashlib import _Hash

# Progress worth a fresh retry budget (see RetryBudget.refund).
_REFUND_BYTES = 1 << 20


@dataclass(frozen=True)
class Streamed:
    claim: HeldPartial
    expected_bytes: int | None
    sha256: str | None
    received: int
    handover: Handover | None = None


class _Widen(Exception):
    """Internal: stop this stream, the partial goes to ranged connections."""


def fetch_stream(
    target: Target,
    effects: TransferEffects,
    widen: WidenRule | None = None,
    proven_idle: frozenset[str] = frozenset(),
) -> Streamed:
    """Attempts over one connection until the partial holds the whole file
    (or, with `widen`, until it hands over to ranged connections). The
    claim is released on failure (the partial stays for a resume)."""
    file, meta = target.file, target.meta
    budget = RetryBudget(effects.timeouts, effects.sleep, effects.log)
    state = _open_state(file, target, effects, proven_idle)
    state.hash_it = file.sha256 is not None or meta.sha256 is not None
    try:
        _check_space(state, effects, file.rel)
        try:
            received = _fill(target, state, budget, effects, widen)
        except _Widen:
            rate_bytes_per_s = known(widen, "the widening that was asked for").rate_bytes_per_s
            sha = state.sha if state.sha_at == state.offset else None
            handover = Handover(state.claim, state.offset, sha, state.received, rate_bytes_per_s)
            return Streamed(state.claim, state.expected_bytes, None, state.received, handover)
        digest = None
        if state.hash_it:
            if state.sha is None or state.sha_at != state.offset:
                # Complete by a 416 with nothing received this time: hash the partial.
                state.sha = sha256_prefix(state.claim.fd, state.offset)
            digest = state.sha.hexdigest()
    except TransferError as err:
        if err.reason is Reason.SIZE_MISMATCH:
            state.claim.discard()  # not the object announced: never resumed
        state.claim.close()
        raise
    except BaseException:
        state.claim.close()
        raise
    return Streamed(state.claim, state.expected_bytes, digest, received)


@dataclass
class _State:
    """Where the partial stands; mutated as attempts go."""

    claim: HeldPartial
    dest: str
    identity: str
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
    framed: bool = True  # the last body's end was provable


def _fill(
    target: Target,
    state: _State,
    budget: RetryBudget,
    effects: TransferEffects,
    widen: WidenRule | None,
) -> int:
    """Attempts until the partial holds the whole file; bytes received."""
    rel = target.file.rel
    with ProgressTicker(
        effects.log,
        effects.progress_interval_s,
        rel,
        lambda: state.claim.beat(),
        HEARTBEAT_S,
        effects.model,
    ) as ticker:
        ticker.total_bytes = state.expected_bytes
        while True:
            try:
                if _attempt(target, state, ticker, widen):
                    return state.received
                error = _short_body_error(rel, state)
            except RangeUnusable as exc:
                effects.log.warning("range_unusable", f"{exc}; restarting from zero", file=rel)
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
            budget.spend(error, f"the download of {rel}")


def _open_state(
    file: RemoteFile, target: Target, effects: TransferEffects, proven_idle: frozenset[str]
) -> _State:
    meta = target.meta
    identity = identity_of(meta)
    directory = os.path.dirname(file.dest) or "."
    ranges = resumable(meta)
    try:
        if file.dest in effects.no_partials:
            claim = HeldPartial.create(private_partial_path(file.dest, identity, new_writer_id()))
            return _new_state(claim, file, meta, identity, ranges, effects)
        now_s = fs_now(directory)
        removed = remove_stale(file.dest, identity, now_s, effects.idle_s, effects.listed, ranges)
        for stale in removed:
            effects.log.info(
                "swept_partial", "removed a partial that cannot be resumed", path=stale
            )
        if ranges:
            claim = adopt_partial(file.dest, identity, new_writer_id(), effects.idle_s, proven_idle)
        else:
            claim = HeldPartial.create(private_partial_path(file.dest, identity, new_writer_id()))
    except OSError as exc:
        raise disk_error(exc, "creating the partial of", file.rel) from exc
    return _new_state(claim, file, meta, identity, ranges, effects)


def _new_state(
    claim: HeldPartial,
    file: RemoteFile,
    meta: RemoteMeta,
    identity: str,
    ranges: bool,
    effects: TransferEffects,
) -> _State:
    offset = claim.size()
    if meta.size_bytes is not None and offset > meta.size_bytes:
        claim = _fresh_claim(claim, file.dest, identity, file.rel)
        offset = 0
    if offset:
        effects.log.info("resume", f"Resuming {file.rel} from byte {offset}", file=file.rel)
    return _State(
        claim,
        file.dest,
        identity,
        offset,
        meta.size_bytes,
        ranges,
        high_water=offset,
        direct_io=effects.direct_io,
        probed_bytes=meta.size_bytes,
    )


def _fresh_claim(old: HeldPartial, dest: str, identity: str, rel: str) -> HeldPartial:
    """Start over in a new private file: the old one is let go, never cut
    (another writer that shares its inode may still be writing it)."""
    old.discard()
    try:
        return HeldPartial.create(private_partial_path(dest, identity, new_writer_id()))
    except OSError as exc:
        raise disk_error(exc, "creating the partial of", rel) from exc


def _restart(state: _State, *, ranges: bool) -> None:
    state.offset = 0
    state.ranges = state.ranges and ranges


def _check_space(state: _State, effects: TransferEffects, rel: str) -> None:
    """The space preflight; a refusal leaves no empty partial behind (#21
    item 7), one that holds bytes stays for the next start."""
    free = effects.free_bytes()
    if state.expected_bytes is None or free is None:
        return
    needed = state.expected_bytes - state.offset
    if needed > free:
        if state.offset == 0:
            state.claim.discard()
        raise TransferError(
            f"no space left on device for {rel}: it needs {needed} more bytes, the cache has "
            f"{free} free",
            reason=Reason.OUT_OF_SPACE,
            file=rel,
        )


def _short_body_error(rel: str, state: _State) -> SourceError:
    return SourceError(
        f"the origin closed {rel} after {state.offset} of {state.expected_bytes} bytes",
        transient=True,
        answered=True,
    )


def _prepare(state: _State, rel: str) -> None:
    """Before a request: the partial must be ours and hold at least the
    offset we continue from (#10 defect 1: a partial adopted away between two
    attempts is never rebuilt at the offset of a response meant for it).
    Otherwise, and for every restart from zero, a fresh private file."""
    claim = state.claim
    if state.offset > 0 and claim.owned():
        try:
            if claim.size() >= state.offset:
                return
        except OSError:
            pass
    if state.offset == 0 and claim.owned() and claim.size() == 0:
        return
    state.claim = _fresh_claim(claim, state.dest, state.identity, rel)
    state.offset = 0
    state.sha, state.sha_at = None, -1


def _attempt(
    target: Target, state: _State, ticker: ProgressTicker, widen: WidenRule | None
) -> bool:
    """One request. True when the partial is complete."""
    rel = target.file.rel
    _prepare(state, rel)
    requested = state.offset if state.ranges else 0
    body = target.open(requested)
    try:
        if body.complete:
            return _complete_by_416(state, body)
        _adopt_body(target, state, body, requested)
        ticker.total_bytes = state.expected_bytes
        _receive(body, state, ticker, rel, widen)
    finally:
        body.close()
    return _judge_size(state, rel)


def _complete_by_416(state: _State, body: Body) -> bool:
    total = body.total_bytes if body.total_bytes is not None else state.expected_bytes
    if total is not None and state.offset == total:
        return True
    # A 416 for a partial that is not complete: start over without ranges.
    state.offset, state.ranges = 0, False
    raise SourceError("the origin refused the resume range", transient=True, answered=True)


def _adopt_body(target: Target, state: _State, body: Body, requested: int) -> None:
    """Reconcile what the response says with what the partial holds."""
    rel = target.file.rel
    if body.start != requested and body.start != 0:
        raise RangeUnusable(f"the origin answered bytes={requested}- from byte {body.start}")
    if body.start > 0:
        check_resumed(target.meta, body, rel)
    _check_total(target, state, body)
    if body.start == 0 and requested > 0:
        # A 200 to a Range request restarts the file (pip), in a fresh one.
        state.claim = _fresh_claim(state.claim, state.dest, state.identity, rel)
        state.offset = 0
        state.sha, state.sha_at = None, -1
    if state.expected_bytes is None:
        state.expected_bytes = body.total_bytes
    state.framed = body.framed
    if state.expected_bytes is None and not body.framed and not state.hash_it:
        raise TransferError(
            f"the origin sends {rel} without a length (no Content-Length, not chunked) and "
            "did not announce its size: a connection closed early would look complete; pin "
            "its sha256 or serve it with a Content-Length",
            reason=Reason.SIZE_MISMATCH,
            file=rel,
        )


def _check_total(target: Target, state: _State, body: Body) -> None:
    """#10 defect 7: the GET's length never replaces the size promised. With
    other validators too it is another version: the next start gets it."""
    total, rel = body.total_bytes, target.file.rel
    if total is None or state.expected_bytes is None or total == state.expected_bytes:
        return
    if is_other_version(target.meta, body):
        raise SourceError(
            f"{rel} changed between the probe and the download",
            reason=Reason.SOURCE_CHANGED,
            answered=True,
        )
    raise TransferError(
        f"the origin sends {total} bytes for {rel}, it announced {state.expected_bytes}",
        reason=Reason.SIZE_MISMATCH,
        file=rel,
    )


def _receive(
    body: Body, state: _State, ticker: ProgressTicker, rel: str, widen: WidenRule | None
) -> None:
    fd = state.claim.fd
    try:
        ticker.done_bytes = state.offset
        copy_into = body.copy_into
        if not state.hash_it and copy_into is not None:
            _copy_into(fd, copy_into, state, ticker)
        else:
            _receive_pipelined(fd, body, state, ticker, widen)
        _check_no_more(body, state, rel)
        sync_file(fd)
    except WritebackError as exc:
        # Pages of the partial never reached the disk, and the kernel says so
        # once (#21 item 1): its bytes cannot be resumed from nor published.
        state.claim.discard()
        raise disk_error(exc, "writing back", rel, state.claim.path) from exc
    except OSError as exc:
        # The write's error names no file: its partial tells the volume.
        raise disk_error(exc, "writing", rel, state.claim.path) from exc


def _check_no_more(body: Body, state: _State, rel: str) -> None:
    """At the expected size, one more byte from the body means it is
    longer than promised (#10 defect 6): a size mismatch, nothing written."""
    if state.expected_bytes is None or state.offset < state.expected_bytes:
        return
    with memoryview(bytearray(1)) as probe:
        extra = body.readinto(probe)
    if extra:
        raise TransferError(
            f"the origin sends more than the {state.expected_bytes} bytes it announced for {rel}",
            reason=Reason.SIZE_MISMATCH,
            file=rel,
        )


def _copy_into(
    fd: int, copy_into: Callable[[int, int], int], state: _State, ticker: ProgressTicker
) -> None:
    """A local source with nothing to hash is copied by the kernel."""
    with Writeback(fd) as writeback:
        while n := copy_into(fd, state.offset):
            state.offset += n
            state.received += n
            ticker.done_bytes, ticker.received_bytes = state.offset, state.received
            writeback.wrote(n)


def _receive_pipelined(
    fd: int, body: Body, state: _State, ticker: ProgressTicker, widen: WidenRule | None
) -> None:
    sha = _sha_for(state)
    state.sha_at = -1  # until the pipeline has drained
    writer = PartialWriter(fd, state.direct_io)
    with contextlib.ExitStack() as stack:
        stack.callback(writer.close)
        small = _small_rest(state)
        if small is not None:
            # One buffer, in turn, no threads; the publish fsync writes it back.
            pipe = Pipeline(writer, sha, buffer_bytes=small, depth=1, inline=True)
        else:
            # Bytes written through the page cache are flushed as they go
            # (all of them when direct I/O is off or turns itself off).
            pipe = Pipeline(writer, sha, stack.enter_context(Writeback(fd)))
        try:
            _receive_into(body, state, ticker, pipe, widen)
        finally:
            pipe.close()  # a write error raised here outranks a network one
            state.sha_at = state.offset


def _receive_into(
    body: Body, state: _State, ticker: ProgressTicker, pipe: Pipeline, widen: WidenRule | None
) -> None:
    """Fill a buffer, hand it to the pipeline, repeat. Bytes already in a
    buffer when the connection fails are still written (resume from them).
    Never beyond the expected size."""
    if widen is not None:
        widen.begin()
    slices = ReadSlices(BUFFER_BYTES)
    while True:
        room = _room(state)
        if room == 0:
            return
        buffer = pipe.take()
        n, ended, widening = 0, False, False
        try:
            with memoryview(buffer) as view:
                limit = min(fill_limit(state.offset, len(view)), room)
                while n < limit and not widening:
                    # A slice at a time, so that progress counts bytes as
                    # they come, not per buffer (4 MiB: 16 s at 250 KB/s).
                    got = body.readinto(view[n : min(limit, n + slices.size_bytes)])
                    slices.took()
                    if not got:
                        ended = True
                        break
                    n += got
                    ticker.done_bytes = state.offset + n
                    ticker.received_bytes = state.received + n
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
            else:
                pipe.give_back(buffer)
        if ended:
            return
        if widening:
            raise _Widen


def _small_rest(state: _State) -> int | None:
    """The buffer bytes for the rest of a file of at most INLINE_MAX_BYTES
    (whole pages, room for an odd resumed offset), or None: not small, or
    of unknown size."""
    if state.expected_bytes is None or state.expected_bytes > INLINE_MAX_BYTES:
        return None
    rest = state.expected_bytes - state.offset + ALIGN_BYTES
    return max(ALIGN_BYTES, -(-rest // ALIGN_BYTES) * ALIGN_BYTES)


def _room(state: _State) -> int:
    """Bytes still due (a large number when the size is unknown)."""
    if state.expected_bytes is None:
        return 1 << 62
    return max(0, state.expected_bytes - state.offset)


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
        state.sha = (
            sha256_prefix(state.claim.fd, state.offset) if state.offset else hashlib.sha256()
        )
        state.sha_at = state.offset
    return state.sha


def _judge_size(state: _State, rel: str) -> bool:
    expected = state.expected_bytes
    if expected is None:
        # Complete only when its end was provable, or a digest will prove it.
        return state.framed or state.hash_it
    return state.offset == expected
