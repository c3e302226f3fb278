"""Carries out a plan: hits, record/stamp backfills, transfers, publishes.

IfNotPresent publishes each file as soon as it is complete and verified.
OnChange refreshes the manifest as a whole (spec §8.5, scenario 18): every
file to transfer is first staged into a complete, verified partial; only when
all of them succeeded are they published, one rename each. If any failed,
nothing of this run is published and the previous set keeps serving (complete
partials stay on disk, so the next start publishes them after a 416 with no
body). A missing file that cannot be fetched fails the run either way.

The renames of an OnChange set run with SIGTERM/SIGINT held back (a few
milliseconds) after an intent naming them is recorded, so a SIGKILL in the
middle is rolled forward by the next writer and a reader does not serve
the half-renamed set as whole (#10 defect 13). Hugging Face runs record the
revision and commit they publish from before their first publish, so an
interrupted run is finished from the same commit (defect 11), and only
validators that were verified are recorded (defect 12).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from llmkube_stager import messages
from llmkube_stager.cache.disk import ensure_dir
from llmkube_stager.cache.journal import (
    COMMIT_KEY,
    INTENT_KEY,
    OVER_KEY,
    REVISION_KEY,
    encode_intent,
)
from llmkube_stager.cache.listrec import write_listing
from llmkube_stager.cache.partials import IDLE_S
from llmkube_stager.cache.records import write_marker, write_size_record, write_validators
from llmkube_stager.config import Config
from llmkube_stager.errors import CacheError, Reason, SourceError, StagerError, TransferError
from llmkube_stager.inflight import ByteBudget, Done, run_in_flight
from llmkube_stager.layout import VALIDATORS_NAME
from llmkube_stager.logs import Log
from llmkube_stager.model import (
    Action,
    CacheState,
    Decision,
    FileResult,
    FsInfo,
    LocalState,
    Manifest,
    Plan,
    RemoteFile,
    Strategy,
)
from llmkube_stager.sources.base import Fetcher, ListingSource, RemoteMeta, Source

if TYPE_CHECKING:
    # The transfer machinery (threads, hashing, sockets) is imported only
    # when something is transferred: a warm start never pays for it.
    from llmkube_stager.transfer import Completed, TransferEffects
    from llmkube_stager.transfer.writemode import PageCacheBudget


@runtime_checkable
class Revisioned(Protocol):
    """A fetcher whose files come from one commit of a revision (HF)."""

    revision: str

    def resolved_commit(self) -> str | None: ...

    def resolve_at(self, commit: str) -> None: ...


class Session:
    """Per-run network state: one fetcher, opened on first use, and the
    probe answers of revalidation (so a transfer does not HEAD twice)."""

    def __init__(
        self,
        config: Config,
        log: Log,
        sleep: Callable[[float], None],
        wall_clock: Callable[[], float],
        fs: FsInfo,
        strategy: Strategy,
    ) -> None:
        self.config = config
        self.log = log
        self._sleep = sleep
        self._wall_clock = wall_clock
        self._fs = fs
        self._strategy = strategy
        self._fetcher: Fetcher | None = None
        self._source: Source | None = None
        self._opening = threading.Lock()
        self.metas: dict[str, RemoteMeta] = {}
        self._page_cache: PageCacheBudget | None = None
        # Files are fetched at this commit (an interrupted run's, defect 11).
        self.commit: str | None = None
        # The validators file this run writes: a share of a sharded prefetch
        # writes its own (cache/shardrec.py).
        self.validators_name = VALIDATORS_NAME

    def fetcher(self, source: Source) -> Fetcher:
        with self._opening:  # files in flight: one fetcher for all
            if self._fetcher is None:
                self._source = source
                self._fetcher = source.fetcher()
                # A fetcher that reports on its own (S3: where its
                # credentials came from, a re-signed URL) takes the run's log.
                self._fetcher.bind_log(self.log)
                if self.commit is not None and isinstance(self._fetcher, Revisioned):
                    self._fetcher.resolve_at(self.commit)
            return self._fetcher

    def fetcher_if_open(self) -> Fetcher | None:
        return self._fetcher

    def reopen(self, commit: str | None) -> None:
        """Forget the fetcher and what it answered: the files come from
        `commit` (a sharded Job's claim, #21 item 4), listed again."""
        with self._opening:
            if self._fetcher is not None:
                self._fetcher.close()
            self._fetcher = None
            self.metas.clear()
            self.commit = commit

    def transfer_effects(
        self,
        root: str,
        listed: frozenset[str] = frozenset(),
        no_partials: frozenset[str] = frozenset(),
    ) -> TransferEffects:
        from llmkube_stager.transfer import TransferEffects

        return TransferEffects(
            log=self.log,
            sleep=self._sleep,
            wall_clock=self._wall_clock,
            timeouts=self.config.timeouts,
            progress_interval_s=self.config.progress_interval_s,
            free_bytes=lambda: _free_bytes(self._fs, root),
            # Where flock is believed to exclude across nodes, a partial's own
            # flock is the proof of life: adopt a free one at once.
            idle_s=0.0 if self._strategy.lock_excludes else IDLE_S,
            connections=self.config.connections,
            listed=listed,
            direct_io=self._strategy.direct_io,
            no_partials=no_partials,
            page_cache=self._page_cache_budget(),
        )

    def _page_cache_budget(self) -> PageCacheBudget | None:
        """LLMKUBE_DIRECT_IO=auto: one budget per run, its room read when
        the first transfer asks (never on a warm start)."""
        if not (self.config.direct_io_mode == "auto" and self._strategy.direct_io):
            return None
        with self._opening:  # files in flight share one budget
            if self._page_cache is None:
                from llmkube_stager.transfer.writemode import PageCacheBudget, memory_room_bytes

                self._page_cache = PageCacheBudget(memory_room_bytes)
            return self._page_cache

    def probe(self, source: Source, file: RemoteFile, root: str = "/") -> RemoteMeta:
        from llmkube_stager.transfer import probe

        meta = probe(self.fetcher(source), file, self.transfer_effects(root))
        self.metas[file.rel] = meta
        return meta

    def close(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()


def _free_bytes(fs: FsInfo, root: str) -> int | None:
    if not fs.free_space_meaningful:
        return None
    from llmkube_stager.cache.fs import free_bytes  # psutil: the write path only

    return free_bytes(root)


_R = TypeVar("_R")
# What the transfers in flight may hold in buffers: one large file's
# pipeline (its DEPTH x BUFFER_BYTES) and room for small files beside it.
PIPELINE_BYTES = 16 << 20  # transfer.pipeline: DEPTH x BUFFER_BYTES
SMALL_ROOM_BYTES = 8 << 20
IN_FLIGHT_BUDGET_BYTES = PIPELINE_BYTES + SMALL_ROOM_BYTES


def _footprint_bytes(meta: RemoteMeta) -> int:
    """The buffer memory a transfer may touch: its size (a small file fills
    part of one buffer), a whole pipeline when large or of unknown size."""
    if meta.size_bytes is None:
        return PIPELINE_BYTES
    return min(meta.size_bytes, PIPELINE_BYTES)


@dataclass
class _Staged:
    action: Action
    done: Completed | None = None
    error: StagerError | None = None


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGTERM/SIGINT wait until the block ends (the renames of a set take
    milliseconds; a pod stopped in between would leave it mixed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, lambda n, _f: pending.append(n)) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in pending:
            signal.raise_signal(signum)


def _touch(path: str) -> None:
    """A heartbeat by name: a name renamed into place (or adopted away) is
    gone, and a private partial's name is never anyone else's."""
    with contextlib.suppress(OSError):
        os.utime(path, follow_symlinks=False)


class Executor:
    def __init__(
        self,
        session: Session,
        manifest: Manifest,
        source: Source,
        cache: CacheState | None = None,
        verified: frozenset[str] = frozenset(),
    ) -> None:
        self._session = session
        self._log = session.log
        self._manifest = manifest
        self._source = source
        self._multi = manifest.multi_file
        self._cache = cache if cache is not None else CacheState(False)
        # OnChange: present files whose validator was verified against the
        # origin's (recorded, or hashed this run): only those are recorded.
        self._verified = verified
        self._run_recorded = False
        self._recording = threading.Lock()
        self._listed = frozenset(f.dest for f in manifest.files)
        # Destinations with no partial beside them when the transfers began.
        self._no_partials = frozenset[str]()
        self._budget = ByteBudget(IN_FLIGHT_BUDGET_BYTES)
        self._limit = session.config.files_in_flight
        self._probe_failed: dict[str, StagerError] = {}
        # HF blob ids are content hashes; a listed S3 set's ETags are what
        # OnChange compares for the whole set (#24 item 5).
        self._records_validators = manifest.kind == "hf" or (
            isinstance(source, ListingSource) and source.listing is not None
        )

    def run(self, plan: Plan) -> tuple[FileResult, ...]:
        settled = {a.rel: self._settle(a) for a in plan.actions if not a.transfers}
        transfers = [a for a in plan.actions if a.transfers]
        if transfers:
            self._open(transfers)
        if self._session.config.refresh_policy == "OnChange":
            moved = self._refresh_as_a_whole(transfers)
        else:
            moved = self._fetch_each(transfers)
        done = {**settled, **moved}
        results = tuple(done[a.rel] for a in plan.actions)
        if plan.may_write and (moved or self._verified) and self._records_validators:
            self._record_validators(results)
        return results

    def _open(self, transfers: list[Action]) -> None:
        """Before files go in flight: one listing per directory says which
        destinations have no partial to resume (the transfer then skips
        listing the directory for each file: O(files^2) for a model of
        2,000 files in one directory), and the first probe runs here, so
        the fetcher, its clients and the Hugging Face revision are resolved
        once."""
        from llmkube_stager.cache.partials import without_partials

        dests = [self._manifest.file(a.rel).dest for a in transfers]
        self._no_partials = without_partials(dests)
        first = self._manifest.file(transfers[0].rel)
        if len(transfers) > 1 and first.rel not in self._session.metas:
            try:
                self._session.probe(self._source, first, self._manifest.root)
            except StagerError as err:
                # An origin (or hub) that fails its first answer is asked
                # one file at a time, as before files went in flight: the
                # first failure ends the run (not one failure per worker),
                # and that file's transfer reports this answer.
                self._limit = 1
                self._probe_failed[first.rel] = err

    def _fetch_each(self, actions: list[Action]) -> dict[str, FileResult]:
        """IfNotPresent: each file published as soon as it is whole; after a
        failure no further file starts, and every file that failed is
        reported (its `failed to download` line) before the first raises."""
        outcomes = self._in_flight(actions, self._fetch_and_publish)
        for outcome in outcomes:
            if outcome.error is not None:
                raise outcome.error
        pairs = zip(actions, outcomes, strict=True)
        return {a.rel: o.value for a, o in pairs if o.value is not None}

    def _in_flight(self, actions: list[Action], work: Callable[[Action], _R]) -> list[Done[_R]]:
        return run_in_flight(actions, work, self._limit)

    def _write_validators(self, updates: dict[str, str]) -> None:
        write_validators(self._manifest.root, updates, self._session.validators_name)

    def _validators_of(self, rels: list[str]) -> dict[str, str]:
        return {
            rel: meta.etag
            for rel in rels
            if (meta := self._session.metas.get(rel)) is not None and meta.etag
        }

    def _record_validators(self, results: tuple[FileResult, ...]) -> None:
        """Remember which hub blob each copy is, so that OnChange sees a
        same-size change (a config.json next to a re-sized shard) and never
        mixes two commits (spec §8.5). Hugging Face only: its blob ids are
        content hashes; a plain server's ETag may change without the bytes.
        Only what is known: files transferred this run, and kept files whose
        validator was verified (defect 12)."""
        moved = (Decision.FETCH, Decision.REPAIR, Decision.REFRESH)
        rels = [
            r.rel
            for r in results
            if r.decision in moved or (r.decision is Decision.REUSE and r.rel in self._verified)
        ]
        updates = self._validators_of(rels)
        if len(rels) == len(results) and self._session.config.refresh_policy == "OnChange":
            # Every file was verified against, or fetched from, one commit:
            # the set is of that commit, whatever the records said (#21 item 4).
            updates.update(self._run_record())
        known = self._cache.validators
        if updates and any(known.get(k) != v for k, v in updates.items()):
            self._try(lambda: self._write_validators(updates), self._manifest.files[0])

    def _run_record(self) -> dict[str, str]:
        """The revision and commit this run publishes from (HF), recorded
        before its first publish (defect 11)."""
        fetcher = self._session.fetcher_if_open()
        if not isinstance(fetcher, Revisioned):
            return {}
        commit = fetcher.resolved_commit()
        if commit is None:
            return {}
        record = {REVISION_KEY: fetcher.revision, COMMIT_KEY: commit}
        if self._session.validators_name == VALIDATORS_NAME:
            # A run over the whole model supersedes the shares' commits
            # (cache/setstate.recorded_commits, #21 item 4).
            from llmkube_stager.cache.setstate import share_commits

            shares = share_commits(self._cache.validators)
            if shares:  # a model never sharded keeps the record it had
                record[OVER_KEY] = json.dumps(shares, sort_keys=True)
        return record

    def _record_listing(self) -> None:
        """The set this run publishes from (#24 item 5, listed.py)."""
        listing = self._source.listing if isinstance(self._source, ListingSource) else None
        if listing is not None:
            self._try(lambda: write_listing(self._manifest.root, listing), self._manifest.files[0])

    def _before_first_publish(self) -> None:
        with self._recording:  # files in flight: the first publish waits for it
            if self._run_recorded:
                return
            self._run_recorded = True
            self._record_listing()
            record = self._run_record()
            known = self._cache.validators
            if record and any(known.get(k) != v for k, v in record.items()):
                self._try(lambda: self._write_validators(record), self._manifest.files[0])

    # -- files that need no transfer ------------------------------------------------

    def _settle(self, action: Action) -> FileResult:
        file = self._manifest.file(action.rel)
        self._log.info("cache_hit", action.message, file=file.rel)
        if file.sha256:
            # Beside the scripts' line, never appended to it (spec §7 "stamp hit").
            self._log.info("pin_accepted", f"{file.rel} {action.why}", file=file.rel)
        if action.write_stamp and file.sha256:
            self._try(lambda: self._stamp_hashed(file), file)
        if action.backfill_record:
            self._try(lambda: write_size_record(file.dest, os.stat(file.dest).st_size), file)
            self._log.info("backfilled", f"Backfilled size record for {file.rel}", file=file.rel)
        return FileResult(file.rel, action.decision)

    def _stamp_hashed(self, file: RemoteFile) -> None:
        """The warm path stamps only the inode it hashed, while the path
        still names it (defect 3)."""
        from llmkube_stager.cache.publish import stamp_published

        local = self._cache.files.get(file.rel)
        hashed = local.hashed_as if local is not None else None
        if hashed is None:
            return
        st = os.lstat(file.dest)
        if (st.st_dev, st.st_ino, st.st_size, st.st_mtime) != hashed:
            return
        stamp_published(file.dest, file.sha256 or "", st)

    def _try(self, write: Callable[[], None], file: RemoteFile) -> None:
        """Bookkeeping writes are best effort: the copy is servable anyway."""
        try:
            write()
        except OSError as exc:
            self._log.warning(
                "record_write_failed", f"could not update records of {file.rel}: {exc}"
            )

    # -- transfers --------------------------------------------------------------------

    def _stage_partial(self, action: Action) -> Completed:
        file = self._manifest.file(action.rel)
        if action.decision is Decision.REPAIR:
            self._log.warning(
                "repair", f"{file.rel}: {action.why}; staging it again", file=file.rel
            )
        text = messages.starting(self._manifest.kind, self._multi, file.rel)
        self._log.info("download_start", text, file=file.rel)
        ensure_dir(os.path.dirname(file.dest), self._manifest.root, file.rel)
        fetcher = self._session.fetcher(self._source)
        effects = self._session.transfer_effects(
            self._manifest.root, self._listed, self._no_partials
        )
        from llmkube_stager.transfer import fetch_partial

        meta = self._session.metas.get(file.rel)
        if file.rel in self._probe_failed:
            raise self._probe_failed.pop(file.rel)
        if meta is None:
            meta = self._session.probe(self._source, file, self._manifest.root)
        with self._budget.reserve(_footprint_bytes(meta)):
            done = fetch_partial(fetcher, file, effects, meta)
        self._check_digest(file, done)
        return done

    def _check_digest(self, file: RemoteFile, done: Completed) -> None:
        """Hashed while received; a mismatch is discarded before publish and
        leaves a marker that stops re-download loops (spec §7)."""
        if file.sha256 is None or done.sha256 == file.sha256:
            return
        from llmkube_stager.transfer import discard

        discard(done)
        write_marker(file.dest, file.sha256, done.sha256 or "")
        raise TransferError(
            f"{messages.pin_field(self._multi)} mismatch for {file.rel}: expected {file.sha256}, "
            f"received {done.sha256}; the download was discarded",
            reason=Reason.CHECKSUM_MISMATCH,
            file=file.rel,
        )

    def _publish_once(self, action: Action, done: Completed) -> FileResult | None:
        """Rename one complete partial into place; None when another writer
        adopted it meanwhile (the caller decides what then)."""
        from llmkube_stager.cache.publish import PartialLost, stamp_published
        from llmkube_stager.transfer import publish_completed

        file = self._manifest.file(action.rel)
        try:
            st = publish_completed(done)
        except PartialLost:
            self._log.warning(
                "partial_lost", f"another writer adopted the partial of {file.rel}", file=file.rel
            )
            return None
        if file.sha256:
            self._try(lambda: stamp_published(file.dest, file.sha256 or "", st), file)
        self._log.info(
            "download_done", self._done_text(action), file=file.rel, size_bytes=st.st_size
        )
        return FileResult(file.rel, action.decision, done.bytes_received)

    def _publish(self, action: Action, done: Completed) -> FileResult:
        while (result := self._publish_once(action, done)) is None:
            current = self._published_meanwhile(action)
            if current is not None:
                return current
            done = self._stage_partial(action)
        return result

    def _published_meanwhile(self, action: Action) -> FileResult | None:
        """The writer that adopted our partial may have published it: a
        complete, right file needs no second download (defect 10's waste)."""
        from llmkube_stager.cache.state import read_local_file

        file = self._manifest.file(action.rel)
        local = read_local_file(file.rel, file.dest, file.sha256)
        if local.usable and local.state is LocalState.COMPLETE:
            self._log.info("published_meanwhile", f"{file.rel} was published by another writer")
            return FileResult(file.rel, action.decision)
        return None

    def _done_text(self, action: Action) -> str:
        if action.decision is Decision.REFRESH or self._session.config.refresh_policy == "OnChange":
            return messages.refreshed(self._multi, action.rel)
        return messages.finished(self._manifest.kind, self._multi, action.rel)

    def _fetch_and_publish(self, action: Action) -> FileResult:
        try:
            done = self._stage_partial(action)
            self._before_first_publish()
            return self._publish(action, done)
        except StagerError as err:
            raise self._failed(action, err) from None

    def _failed(self, action: Action, err: StagerError) -> StagerError:
        err.file = err.file or action.rel
        if action.decision is Decision.REPAIR and isinstance(err, SourceError):
            # One reason for both policies: the copy fails its own checks (its
            # record, or its pin) and the origin cannot repair it now.
            err = CacheError(
                f"{action.rel}: {action.why}, and the origin could not repair it: {err.detail}",
                reason=action.failure or Reason.CACHE_TRUNCATED,
                file=action.rel,
                wire=err.wire,
            )
        rel = action.rel
        if self._session.config.refresh_policy == "OnChange" and action.decision is Decision.FETCH:
            line = messages.missing_and_failed_line(self._multi, rel)
            self._log.error("missing_and_failed", line, file=rel)
            err.detail = f"{messages.missing_and_failed(self._multi, rel)}: {err.detail}"
        elif self._multi:
            self._log.error("download_failed", messages.failed_to_download(rel), file=rel)
        return err

    def _refresh_as_a_whole(self, actions: list[Action]) -> dict[str, FileResult]:
        from llmkube_stager.transfer import KeepAlive

        staged: list[_Staged] = []
        try:
            with KeepAlive() as keep:

                def stage(action: Action) -> _Staged:
                    one = self._try_stage(action)
                    if one.done is not None:
                        keep.add(one.done.claim.beat)
                    return one

                outcomes = self._in_flight(actions, stage)
                staged = [o.value for o in outcomes if o.value is not None]
                for outcome in outcomes:
                    if outcome.error is not None:
                        raise outcome.error
            return self._settle_staged(staged)
        finally:
            for one in staged:
                if one.done is not None:
                    one.done.claim.close()  # published ones are closed already

    def _settle_staged(self, staged: list[_Staged]) -> dict[str, FileResult]:
        failures = [s for s in staged if s.error is not None]
        fatal = [s for s in failures if s.action.decision is not Decision.REFRESH]
        if fatal:
            assert fatal[0].error is not None
            raise self._failed(fatal[0].action, fatal[0].error)
        if failures and any(s.action.decision is not Decision.REFRESH for s in staged):
            # A missing or broken file was fetched, but publishing it alone
            # would mix revisions, and there is no old copy of it to keep.
            first = failures[0]
            assert first.error is not None
            raise self._failed(first.action, first.error)
        if failures:
            return {s.action.rel: self._kept(s, failures) for s in staged}
        return self._publish_set([s for s in staged if s.done is not None])

    def _publish_set(self, staged: list[_Staged]) -> dict[str, FileResult]:
        """Every file of the set renamed into place, with signals held and an
        intent recorded first (defect 13); a partial adopted away meanwhile is
        staged again after the renames, the intent kept until it is in."""
        if not staged:
            return {}
        entries = [self._intent_entry(s) for s in staged]
        intent = {INTENT_KEY: encode_intent(entries), **self._run_record()}
        self._record_listing()
        self._run_recorded = True
        self._try(lambda: self._write_validators(intent), self._manifest.files[0])
        from llmkube_stager.transfer import KeepAlive

        results: dict[str, FileResult] = {}
        lost: list[_Staged] = []
        done = {INTENT_KEY: ""}
        with signals_held(), KeepAlive() as keep:
            # The partials not renamed yet stay alive while the set is
            # renamed (a slow FUSE rename is a copy): an unsharded writer
            # rolls forward only a dead writer's publish (#21 item 5). By
            # name, not descriptor: a published claim's descriptor is closed.
            for one in staged:
                assert one.done is not None
                keep.add(functools.partial(_touch, one.done.partial))
            for one in staged:
                assert one.done is not None
                result = self._publish_once(one.action, one.done)
                if result is None:
                    lost.append(one)
                else:
                    results[one.action.rel] = result
            if not lost:
                self._try(lambda: self._write_validators(done), self._manifest.files[0])
        if lost:
            for one in lost:
                results[one.action.rel] = self._fetch_and_publish(one.action)
            self._try(lambda: self._write_validators(done), self._manifest.files[0])
        return results

    def _intent_entry(self, one: _Staged) -> dict[str, object]:
        assert one.done is not None
        meta = self._session.metas.get(one.action.rel)
        return {
            "rel": one.action.rel,
            "partial": os.path.basename(one.done.partial),
            "size": one.done.claim.size(),
            "validator": (meta.etag if meta is not None else None) or "",
        }

    def _try_stage(self, action: Action) -> _Staged:
        try:
            return _Staged(action, done=self._stage_partial(action))
        except StagerError as err:
            return _Staged(action, error=err)

    def _kept(self, staged: _Staged, failures: list[_Staged]) -> FileResult:
        rel = staged.action.rel
        err = staged.error
        # "kept" prints the scripts' lines whole (logs.VERBATIM_EVENTS); the
        # agent's own explanations are warnings with their fields.
        event = "kept"
        if err is not None and err.reason is Reason.CHECKSUM_MISMATCH and not err.retryable:
            # A pin not met (an origin-digest mismatch is retryable: #12.5).
            text = messages.pinned_kept(self._multi, rel)
        elif isinstance(err, SourceError) and not err.answered:
            text = messages.unreachable_kept(self._multi, rel)
        elif err is not None:
            event = "kept_after_error"
            text = f"Revalidation failed for {rel} ({err.detail}); kept cached copy"
        else:
            others = ", ".join(f.action.rel for f in failures)
            event = "kept_whole_model"
            text = (
                f"Not publishing the new {rel}: {others} could not be refreshed, so the "
                "previous version of the whole model keeps serving; kept cached copy"
            )
        self._log.warning(event, text, file=rel)
        return FileResult(rel, Decision.KEEP)
