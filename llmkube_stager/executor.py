"""Carries out a plan: hits, record/stamp backfills, transfers, publishes.

IfNotPresent publishes each file as soon as it is complete and verified.
OnChange refreshes the manifest as a whole (spec §8.5, scenario 18): every
file to transfer is first staged into a complete, verified partial; only when
all of them succeeded are they published, one rename each. If any failed,
nothing of this run is published and the previous set keeps serving (complete
partials stay on disk, so the next start publishes them after a 416 with no
body). A missing file that cannot be fetched fails the run either way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmkube_stager import messages
from llmkube_stager.cache.partials import IDLE_S
from llmkube_stager.cache.records import write_marker, write_size_record, write_stamp
from llmkube_stager.config import Config
from llmkube_stager.errors import CacheError, Reason, SourceError, StagerError, TransferError
from llmkube_stager.logs import Log
from llmkube_stager.model import Action, Decision, FileResult, FsInfo, Manifest, Plan, RemoteFile
from llmkube_stager.sources.base import Fetcher, RemoteMeta, Source

if TYPE_CHECKING:
    # The transfer machinery (threads, hashing, sockets) is imported only
    # when something is transferred: a warm start never pays for it.
    from llmkube_stager.transfer import Completed, TransferEffects


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
    ) -> None:
        self.config = config
        self.log = log
        self._sleep = sleep
        self._wall_clock = wall_clock
        self._fs = fs
        self._fetcher: Fetcher | None = None
        self._source: Source | None = None
        self.metas: dict[str, RemoteMeta] = {}

    def fetcher(self, source: Source) -> Fetcher:
        if self._fetcher is None:
            self._source = source
            self._fetcher = source.fetcher()
            # A fetcher that reports on its own (S3: where its credentials
            # came from, a re-signed URL) takes the run's log.
            bind_log = getattr(self._fetcher, "bind_log", None)
            if bind_log is not None:
                bind_log(self.log)
        return self._fetcher

    def transfer_effects(self, root: str, listed: frozenset[str] = frozenset()) -> TransferEffects:
        from llmkube_stager.directio import direct_io_fits
        from llmkube_stager.transfer import TransferEffects

        return TransferEffects(
            log=self.log,
            sleep=self._sleep,
            wall_clock=self._wall_clock,
            timeouts=self.config.timeouts,
            progress_interval_s=self.config.progress_interval_s,
            free_bytes=lambda: _free_bytes(self._fs, root),
            # Under a cross-node flock nobody else writes: adopt at once.
            idle_s=0.0 if self._fs.is_fuse is False else IDLE_S,
            connections=self.config.connections,
            listed=listed,
            direct_io=self.config.direct_io and direct_io_fits(self._fs.fstype),
        )

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
    try:
        st = os.statvfs(root)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


@dataclass
class _Staged:
    action: Action
    done: Completed | None = None
    error: StagerError | None = None


class Executor:
    def __init__(self, session: Session, manifest: Manifest, source: Source) -> None:
        self._session = session
        self._log = session.log
        self._manifest = manifest
        self._source = source
        self._multi = manifest.multi_file

    def run(self, plan: Plan) -> tuple[FileResult, ...]:
        settled = {a.rel: self._settle(a) for a in plan.actions if not a.transfers}
        transfers = [a for a in plan.actions if a.transfers]
        if self._session.config.refresh_policy == "OnChange":
            moved = self._refresh_as_a_whole(transfers)
        else:
            moved = {a.rel: self._fetch_and_publish(a) for a in transfers}
        results = tuple({**settled, **moved}[a.rel] for a in plan.actions)
        if plan.may_write and moved and self._manifest.kind == "hf":
            self._record_validators(results)
        return results

    def _record_validators(self, results: tuple[FileResult, ...]) -> None:
        """Remember which hub blob each copy is, so that OnChange sees a
        same-size change (a config.json next to a re-sized shard) and never
        mixes two commits (spec §8.5). Hugging Face only: its blob ids are
        content hashes; a plain server's ETag may change without the bytes.
        Best effort, and only when this run transferred something."""
        from llmkube_stager.cache.records import read_validators, write_validators

        current = (Decision.REUSE, Decision.FETCH, Decision.REPAIR, Decision.REFRESH)
        updates = {
            r.rel: meta.etag
            for r in results
            if r.decision in current
            and (meta := self._session.metas.get(r.rel)) is not None
            and meta.etag
        }
        root = self._manifest.root
        if updates and any(read_validators(root).get(k) != v for k, v in updates.items()):
            self._try(lambda: write_validators(root, updates), self._manifest.files[0])

    # -- files that need no transfer ------------------------------------------------

    def _settle(self, action: Action) -> FileResult:
        file = self._manifest.file(action.rel)
        self._log.info("cache_hit", action.message, file=file.rel)
        if action.write_stamp and file.sha256:
            self._try(lambda: write_stamp(file.dest, file.sha256 or "", os.stat(file.dest)), file)
        if action.backfill_record:
            self._try(lambda: write_size_record(file.dest, os.stat(file.dest).st_size), file)
            self._log.info("backfilled", f"Backfilled size record for {file.rel}", file=file.rel)
        return FileResult(file.rel, action.decision)

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
        listed = frozenset(f.dest for f in self._manifest.files)
        effects = self._session.transfer_effects(self._manifest.root, listed)
        from llmkube_stager.transfer import fetch_partial

        meta = self._session.metas.get(file.rel)
        if meta is None:
            meta = self._session.probe(self._source, file, self._manifest.root)
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

    def _publish(self, action: Action, done: Completed) -> FileResult:
        from llmkube_stager.cache.publish import PartialLost
        from llmkube_stager.transfer import publish_completed

        file = self._manifest.file(action.rel)
        while True:
            try:
                size = publish_completed(done)
                break
            except PartialLost:
                self._log.warning(
                    "partial_lost", f"another writer adopted the partial of {file.rel}; again"
                )
                done = self._stage_partial(action)
        if file.sha256:
            self._try(lambda: write_stamp(file.dest, file.sha256 or "", os.stat(file.dest)), file)
        self._log.info("download_done", self._done_text(action), file=file.rel, size_bytes=size)
        return FileResult(file.rel, action.decision, done.bytes_received)

    def _done_text(self, action: Action) -> str:
        if action.decision is Decision.REFRESH or self._session.config.refresh_policy == "OnChange":
            return messages.refreshed(self._multi, action.rel)
        return messages.finished(self._manifest.kind, self._multi, action.rel)

    def _fetch_and_publish(self, action: Action) -> FileResult:
        try:
            return self._publish(action, self._stage_partial(action))
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
            )
        if self._multi:
            self._log.error("download_failed", f"failed to download {action.rel}", file=action.rel)
        if self._session.config.refresh_policy == "OnChange" and action.decision is Decision.FETCH:
            err.detail = f"{messages.missing_and_failed(self._multi, action.rel)}: {err.detail}"
        return err

    def _refresh_as_a_whole(self, actions: list[Action]) -> dict[str, FileResult]:
        staged = [self._try_stage(a) for a in actions]
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
        return {s.action.rel: self._publish(s.action, s.done) for s in staged if s.done}

    def _try_stage(self, action: Action) -> _Staged:
        try:
            return _Staged(action, done=self._stage_partial(action))
        except StagerError as err:
            return _Staged(action, error=err)

    def _kept(self, staged: _Staged, failures: list[_Staged]) -> FileResult:
        rel = staged.action.rel
        err = staged.error
        if err is not None and err.reason is Reason.CHECKSUM_MISMATCH:
            text = messages.pinned_kept(self._multi, rel)
        elif isinstance(err, SourceError) and not err.answered:
            text = messages.unreachable_kept(self._multi, rel)
        elif err is not None:
            text = f"Revalidation failed for {rel} ({err.detail}); kept cached copy"
        else:
            others = ", ".join(f.action.rel for f in failures)
            text = (
                f"Not publishing the new {rel}: {others} could not be refreshed, so the "
                "previous version of the whole model keeps serving; kept cached copy"
            )
        self._log.warning("kept", text, file=rel)
        return FileResult(rel, Decision.KEEP)


def ensure_dir(path: str, root: str, rel: str) -> None:
    """mkdir -p, refusing a directory that resolves outside the model root
    (a symlink planted in a shared cache must not redirect writes)."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise CacheError(
            f"cannot create {path}: {os.strerror(exc.errno or 0)}", file=rel or None
        ) from exc
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != real_root and not real.startswith(real_root + "/"):
        raise CacheError(f"{path} resolves outside the model directory", file=rel or None)
