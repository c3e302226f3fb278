"""The files of a plan that transfer: each staged into a complete, verified
partial (transfer/), then renamed into place (cache/publish.py). What both
refresh policies share; when they publish is theirs: each file as soon as
it is whole (acting/each.py, IfNotPresent) or the set at once
(acting/wholeset.py, OnChange).

This module and the two policies are the write path: the acting layer
imports them only when a plan transfers something (acting/executor.py), so
their imports (the transfer engine, the partials) cost a warm start nothing.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TypeVar

from llmkube_stager import messages
from llmkube_stager.acting.inflight import ByteBudget, Done, run_in_flight
from llmkube_stager.acting.recorder import Recorder
from llmkube_stager.acting.session import Session
from llmkube_stager.cache.disk import ensure_dir
from llmkube_stager.cache.partialnames import without_partials
from llmkube_stager.cache.publish import PartialLost, stamp_published
from llmkube_stager.cache.records import write_marker
from llmkube_stager.cache.state import read_local_file
from llmkube_stager.errors import (
    REMEDY_SIGNATURE_FILES,
    CacheError,
    Reason,
    SignatureError,
    SourceError,
    StagerError,
    TransferError,
)
from llmkube_stager.model import Action, Decision, FileResult, LocalState, Manifest, RemoteFile
from llmkube_stager.sources.base import Fetcher, RemoteMeta, Source, meta_instead
from llmkube_stager.transfer import (
    Completed,
    ModelProgress,
    TransferEffects,
    discard,
    fetch_partial,
    publish_completed,
)

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


def _check_signed_origin(file: RemoteFile, meta: RemoteMeta) -> None:
    """#34 item 2: a digest the origin lists (HF LFS) that is not the signed
    one is a refusal before a byte is fetched, never a choice."""
    if file.signed and meta.sha256 is not None and meta.sha256 != file.sha256:
        raise SignatureError(
            f"the origin lists sha256 {meta.sha256} for {file.rel}, its signature {file.sha256}",
            file=file.rel,
            remedy=REMEDY_SIGNATURE_FILES,
        )


class Transfers:
    """The transfers of one run, under one refresh policy (a subclass)."""

    def __init__(
        self, session: Session, manifest: Manifest, source: Source, recorder: Recorder
    ) -> None:
        self._session = session
        self._log = session.log
        self._manifest = manifest
        self._source = source
        self._recorder = recorder
        self._multi = manifest.multi_file
        self._listed = frozenset(f.dest for f in manifest.files)
        # Destinations with no partial beside them when the transfers began.
        self._no_partials = frozenset[str]()
        self._budget = ByteBudget(IN_FLIGHT_BUDGET_BYTES)
        self._limit = session.config.files_in_flight
        self._probe_failed: dict[str, StagerError] = {}
        self._progress = ModelProgress(files_total=0)

    def run(self, actions: list[Action]) -> dict[str, FileResult]:
        raise NotImplementedError

    def open(self, transfers: list[Action]) -> None:
        """Before files go in flight: one listing per directory says which
        destinations have no partial to resume (the transfer then skips
        listing the directory for each file: O(files^2) for a model of
        2,000 files in one directory), and the first probe runs here, so
        the fetcher, its clients and the Hugging Face revision are resolved
        once."""
        dests = [self._manifest.file(a.rel).dest for a in transfers]
        self._no_partials = without_partials(dests)
        self._progress = ModelProgress(
            len(transfers), {a.rel: self._known_size(a) for a in transfers}
        )
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

    def _known_size(self, action: Action) -> int | None:
        """A file's size before its transfer: the listing's, or the probe's."""
        file = self._manifest.file(action.rel)
        meta = self._session.metas.get(action.rel)
        return file.size_bytes if meta is None else meta.size_bytes

    def in_flight(self, actions: list[Action], work: Callable[[Action], _R]) -> list[Done[_R]]:
        return run_in_flight(actions, work, self._limit)

    # -- one file into a verified partial ------------------------------------------------

    def stage_partial(self, action: Action) -> Completed:
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
        meta = self._session.metas.get(file.rel)
        if file.rel in self._probe_failed:
            raise self._probe_failed.pop(file.rel)
        if meta is None:
            meta = self._session.probe(self._source, file, self._manifest.root)
        _check_signed_origin(file, meta)
        effects = dataclasses.replace(effects, model=self._progress)
        with self._budget.reserve(_footprint_bytes(meta)):
            done = self._fetch(fetcher, file, effects, meta)
        self._check_digest(file, done)
        return done

    def _fetch(
        self, fetcher: Fetcher, file: RemoteFile, effects: TransferEffects, meta: RemoteMeta
    ) -> Completed:
        """The file into a partial; a fetcher that holds a second copy (the
        mirror before the origin, mirror/reader.py) is asked once for it
        when the first failed."""
        try:
            return fetch_partial(fetcher, file, effects, meta)
        except StagerError as err:
            other = meta_instead(fetcher, file, meta, err)
            if other is None:
                raise
            first = err
        self._session.metas[file.rel] = other
        try:
            return fetch_partial(fetcher, file, effects, other)
        except StagerError as err:
            both = f"{err.detail} (the mirror failed first: {first.detail})"
            raise err.amended(detail=both) from err

    def _check_digest(self, file: RemoteFile, done: Completed) -> None:
        """Hashed while received; a mismatch is discarded before publish and
        leaves a marker that stops re-download loops (spec §7)."""
        if file.sha256 is None or done.sha256 == file.sha256:
            return
        discard(done)
        if file.signed:
            # #34 item 2: refused before publish; no marker (the fix is the
            # publisher's or the origin's, and the signature says which).
            raise SignatureError(
                f"{file.rel} does not have the sha256 its signature gives it: signed "
                f"{file.sha256}, received {done.sha256}; the download was discarded",
                file=file.rel,
                remedy=REMEDY_SIGNATURE_FILES,
            )
        write_marker(file.dest, file.sha256, done.sha256 or "")
        raise TransferError(
            f"{messages.pin_field(self._multi)} mismatch for {file.rel}: expected {file.sha256}, "
            f"received {done.sha256}; the download was discarded",
            reason=Reason.CHECKSUM_MISMATCH,
            file=file.rel,
        )

    # -- into place ----------------------------------------------------------------------

    def publish_once(self, action: Action, done: Completed) -> FileResult | None:
        """Rename one complete partial into place; None when another writer
        adopted it meanwhile (the caller decides what then)."""
        file = self._manifest.file(action.rel)
        try:
            published = publish_completed(done)
        except PartialLost:
            self._log.warning(
                "partial_lost",
                # A sweep of the scripts (`find ... -name '*.tmp' -delete`)
                # takes it as well as an adopting writer (#30 item 4).
                f"the partial of {file.rel} was taken (adopted by another writer, or removed by "
                "a script's *.tmp sweep); staging it again",
                file=file.rel,
            )
            return None
        self._recorder.published(file.rel, published.st)
        if file.sha256:
            pin = file.sha256
            self._recorder.best_effort(lambda: stamp_published(file.dest, pin, published), file.rel)
        self._log.info(
            "download_done", self.done_text(action), file=file.rel, size_bytes=published.st.st_size
        )
        return FileResult(file.rel, action.decision, done.bytes_received)

    def fetch_and_publish(self, action: Action) -> FileResult:
        try:
            done = self.stage_partial(action)
            self._recorder.before_first_publish()
            try:
                self._recorder.guard_commit()  # #29 item 1
            except StagerError:
                discard(done)
                raise
            return self._publish(action, done)
        except StagerError as err:
            raise self.failed(action, err) from None

    def _publish(self, action: Action, done: Completed) -> FileResult:
        while (result := self.publish_once(action, done)) is None:
            current = self._published_meanwhile(action)
            if current is not None:
                return current
            done = self.stage_partial(action)
        return result

    def _published_meanwhile(self, action: Action) -> FileResult | None:
        """The writer that adopted our partial may have published it: a
        complete, right file needs no second download (#10 defect 10's waste)."""
        file = self._manifest.file(action.rel)
        local = read_local_file(file.rel, file.dest, file.sha256)
        if local.usable and local.state is LocalState.COMPLETE:
            self._log.info("published_meanwhile", f"{file.rel} was published by another writer")
            return FileResult(file.rel, action.decision)
        return None

    # -- the policy's words --------------------------------------------------------------

    def done_text(self, action: Action) -> str:
        if action.decision is Decision.REFRESH:
            return messages.refreshed(self._multi, action.rel)
        return messages.finished(self._manifest.kind, self._multi, action.rel)

    def failed(self, action: Action, err: StagerError) -> StagerError:
        """The error a failed file ends the run with, its line logged."""
        if not err.file:
            err = err.amended(file=action.rel)  # #32 item 5: never changed once raised
        if action.decision is Decision.REPAIR and isinstance(err, SourceError):
            # One reason for both policies: the copy fails its own checks (its
            # record, or its pin) and the origin cannot repair it now.
            err = CacheError(
                f"{action.rel}: {action.why}, and the origin could not repair it: {err.detail}",
                reason=action.failure or Reason.CACHE_TRUNCATED,
                file=action.rel,
                wire=err.wire,
            )
        self.report_failure(action, err)
        return err

    def report_failure(self, action: Action, err: StagerError) -> None:
        if self._multi:
            line = messages.failed_to_download(action.rel)
            self._log.error("download_failed", line, file=action.rel)
