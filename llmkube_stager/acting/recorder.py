"""What a run writes into its run record beside the files it publishes
(cache/runrecord.py), in the writer's own record (a share's own file).

- The revision and commit a Hugging Face run publishes from, before its
  first publish, so an interrupted run is finished from the same commit
  (#10 defect 11); a run over the whole model also records which shares'
  commits it superseded (#21 item 4).
- The listing a listed source publishes from (#24 item 5, staging/listed.py).
- The validators of the copies, only where they name the bytes: Hugging
  Face blob ids are content hashes, and a listed S3 set's ETags are what
  OnChange compares for the whole set (#24 item 5); a plain server's ETag
  may change without the bytes. Only what is known is recorded (#10
  defect 12): files transferred this run, and kept files whose validator
  was verified.
- The intent of an OnChange set's publish (#10 defect 13).

Bookkeeping writes are best effort: the copy is servable anyway.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from llmkube_stager.acting.session import Session
from llmkube_stager.cache.listrec import write_listing
from llmkube_stager.cache.runrecord import MAIN, PublishEntry, RunRecord, Update, write_run
from llmkube_stager.model import Decision, FileResult, Manifest
from llmkube_stager.sources.base import ListingSource, RemoteMeta, Source


class Recorder:
    def __init__(
        self,
        session: Session,
        manifest: Manifest,
        source: Source,
        record: RunRecord,
        verified: frozenset[str] = frozenset(),
    ) -> None:
        self._session = session
        self._root = manifest.root
        self._first_rel = manifest.files[0].rel
        self._listing = source.listing if isinstance(source, ListingSource) else None
        self._record = record
        # OnChange: present files whose validator was verified against the
        # origin's (recorded, or hashed this run): only those are recorded.
        self.verified = verified
        self.keeps_validators = manifest.kind == "hf" or self._listing is not None
        self._run_recorded = False
        self._recording = threading.Lock()

    def before_first_publish(self) -> None:
        with self._recording:  # files in flight: the first publish waits for it
            if self._run_recorded:
                return
            self._run_recorded = True
            self._record_listing()
            update = self._run_update()
            if update and update.changes(self._record, self._session.writer):
                self.write(update)

    def begin_publish(self, entries: Iterable[PublishEntry]) -> None:
        """A set's renames are about to start: its intent, with the run's
        commit, in one write."""
        self._record_listing()
        self._run_recorded = True
        self.write(self._run_update() | Update(intent=tuple(entries)))

    def end_publish(self) -> None:
        self.write(Update(intent=()))

    def record_validators(self, results: tuple[FileResult, ...], whole_set: bool) -> None:
        """Which version each copy is, so that OnChange sees a same-size
        change (a config.json next to a re-sized shard) and never mixes two
        commits (spec §8.5). `whole_set`: every file of an OnChange run was
        verified against, or fetched from, one commit: the set is of that
        commit, whatever the records said (#21 item 4)."""
        moved = (Decision.FETCH, Decision.REPAIR, Decision.REFRESH)
        rels = [
            r.rel
            for r in results
            if r.decision in moved or (r.decision is Decision.REUSE and r.rel in self.verified)
        ]
        update = Update(validators=self._validators_of(rels))
        if len(rels) == len(results) and whole_set:
            update = update | self._run_update()
        if update and update.changes(self._record, self._session.writer):
            self.write(update)

    def write(self, update: Update) -> None:
        self.best_effort(lambda: write_run(self._root, self._session.writer, update))

    def best_effort(self, write: Callable[[], None], rel: str | None = None) -> None:
        try:
            write()
        except OSError as exc:
            self._session.log.warning(
                "record_write_failed",
                f"could not update records of {rel or self._first_rel}: {exc}",
            )

    def _validators_of(self, rels: list[str]) -> dict[str, str]:
        metas = self._session.metas
        return {rel: etag for rel in rels if (etag := _etag(metas.get(rel)))}

    def _run_update(self) -> Update:
        """The revision and commit this run publishes from (Hugging Face)."""
        resolved = self._session.resolved()
        if resolved is None or resolved.commit is None:
            return Update()
        update = Update(revision=resolved.revision, commit=resolved.commit)
        if self._session.writer == MAIN:
            # A run over the whole model supersedes the shares' commits
            # (RunRecord.commits); a model never sharded keeps the record it had.
            shares = self._record.share_commits()
            if shares:
                update = update | Update(over=shares)
        return update

    def _record_listing(self) -> None:
        listing = self._listing
        if listing is not None:
            self.best_effort(lambda: write_listing(self._root, listing))


def _etag(meta: RemoteMeta | None) -> str | None:
    return meta.etag if meta is not None else None
