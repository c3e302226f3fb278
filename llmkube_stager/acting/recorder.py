"""What a run writes into its run record beside the files it publishes
(cache/runrecord.py), in the writer's own record (a share's own file).

- The revision and commit a Hugging Face run publishes from, before its
  first publish, so an interrupted run is finished from the same commit
  (#10 defect 11); a run over the whole model also records which shares'
  commits it superseded (#21 item 4).
- The listing a listed source publishes from (#24 item 5, staging/listed.py).
- The validators of the copies, for every source (#46 item 1): what
  OnChange compares, so that a same-size replacement (a fine-tune of the
  base model's shape) is seen. Hugging Face blob ids are content hashes, a
  listed S3 set's ETags are compared for the whole set (#24 item 5), a
  plain server's strong ETag, else its Last-Modified (`RemoteMeta.validator`:
  never a weak ETag). Only what is known is recorded (#10 defect 12):
  files transferred this run (a file transferred without one clears the
  one of the bytes it replaced), and kept files whose validator was
  verified.
- The source the run stages from, credentials removed (#46 item 2).
- The intent of an OnChange set's publish (#10 defect 13).
- Whether the files a Hugging Face run over the whole model published are
  still its own (#29 item 1): two writers that no claim covers (a pod on a
  partitioned node and its replacement, two Jobs for one model) may resolve
  a moving branch to two commits and rename over each other's files. Where
  no lock excludes them, each writes its entry (cache/writers.py) before
  its first publish, so that readers refuse the model while writers of two
  commits are at it, or were and died. The writer whose commit the record
  names last owns the model: the other stops before its next publish
  (`guard_commit`). At the end (`settle`) a file this run published that
  holds other bytes now is another writer's: its validator is not recorded
  (no writer vouches for bytes it did not write); a run that leaves files
  of its own beside another commit's leaves its entry as mixed and fails,
  retryable; any other end removes its entry.

Bookkeeping writes are best effort: the copy is servable anyway.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable

from llmkube_stager.acting.session import Session
from llmkube_stager.cache import writers
from llmkube_stager.cache.listrec import write_listing
from llmkube_stager.cache.runrecord import (
    MAIN,
    PublishEntry,
    RunRecord,
    Update,
    read_run_record,
    record_name,
    write_run,
)
from llmkube_stager.errors import Reason, SourceError, StagerError
from llmkube_stager.model import Decision, FileResult, Manifest
from llmkube_stager.plan import model_source_id
from llmkube_stager.schemes import has_commits
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
        self._run_recorded = False
        self._recording = threading.Lock()
        self._manifest = manifest
        # #29 item 1: a Hugging Face run over the whole model (a share has
        # its Job's claim and a record of its own) watches for another
        # writer's commit: what it published, the main record as last read.
        self.watches_commit = has_commits(manifest.kind) and session.over_whole_model
        self._published: dict[str, os.stat_result] = {}
        self._foreign: frozenset[str] = frozenset()
        self._record_seen: tuple[int, int, int, float] | None = None
        # This run's entry among the writers (where no lock excludes them).
        self._entry = os.urandom(8).hex()  # no `secrets` import on a warm start
        self._entered = False

    def before_first_publish(self) -> None:
        with self._recording:  # files in flight: the first publish waits for it
            if self._run_recorded:
                return
            self._run_recorded = True
            self._record_listing()
            update = self._run_update()
            if update and update.changes(self._record, self._session.writer):
                self.write(update)
            self._enter()

    def begin_publish(self, entries: Iterable[PublishEntry]) -> None:
        """A set's renames are about to start: its intent, with the run's
        commit, in one write; unless another writer's commit owns the model
        (#29 item 1), checked before the intent: a set stopped halfway
        would leave a publish for the next writer to finish."""
        self.guard_commit()
        self._record_listing()
        self._run_recorded = True
        self.write(self._run_update() | Update(intent=tuple(entries)))
        self._enter()

    def end_publish(self) -> None:
        self.write(Update(intent=()))

    # -- #29 item 1: writers no claim covers ------------------------------------------------

    def _enter(self) -> None:
        """This run's entry, its commit, once it recorded the commit and
        before its first rename: where a lock excludes other writers, none."""
        mine = self._commit()
        if self._entered or not self.watches_commit or mine is None:
            return
        if self._session.strategy.lock_excludes:
            return
        self._entered = True
        self.best_effort(lambda: writers.enter(self._root, self._entry, mine))

    def published(self, rel: str, st: os.stat_result) -> None:
        """This run renamed `rel` into place: the inode it published."""
        with self._recording:
            self._published[rel] = st

    def guard_commit(self) -> None:
        """Before a publish: the main record still names this run's commit
        (or, until this run recorded it, the commit it named at the start).
        Another writer that recorded another commit since owns the model:
        this run publishes nothing more (ModelSourceChanged, retryable).
        Read again only when the record changed (one lstat a publish)."""
        mine = self._commit()
        if not self.watches_commit or mine is None:
            return
        path = os.path.join(self._root, record_name(MAIN))
        try:
            st = os.lstat(path)
        except OSError:
            return
        # The record is read again when it changed, and at least once a
        # second: a FUSE driver's attribute cache (blobfuse2: 120 s) may
        # show the old attributes of a record another node replaced, while
        # an open reads it anew.
        now_s = self._session.clock.monotonic()
        key = (st.st_ino, st.st_size, st.st_mtime_ns, float(int(now_s)))
        with self._recording:
            if key == self._record_seen:
                return
            self._record_seen = key
        owner = read_run_record(self._root).run(MAIN).commit
        # Until this run recorded its commit, the one the record named when
        # it began (an OnChange run replaces it as it publishes).
        expected = mine if self._run_recorded else self._record.run(MAIN).commit
        if owner and owner != expected:
            raise self._overtaken(owner, mine)

    def settle(self, kept_files: bool) -> StagerError | None:
        """After the transfers, whole or failed: which files this run
        published hold other bytes now (another writer's: their validators
        are not recorded), and whether another writer's commit owns the
        model. A run that leaves files of its own (published, or kept:
        `kept_files`) beside another commit's leaves its entry as mixed;
        any other end removes it. The error this run ends with, or None."""
        mine = self._commit()
        if not self.watches_commit or mine is None:
            return None
        if not (self._published or self._entered):
            return None
        seen = writers.read_writers(self._root)  # before the files are looked at
        foreign = frozenset(rel for rel, st in self._published.items() if not self._still(rel, st))
        self._foreign = foreign
        owner = read_run_record(self._root).run(MAIN).commit
        overtaken = bool(owner) and owner != mine
        if not foreign and not overtaken:
            self._leave()
            return self._answer([e for e in seen if e.name != self._entry], mine)
        left = len(self._published) > len(foreign) or kept_files
        # A node's attribute cache may show this run's inode where another
        # writer's now is: beside another commit, no file is vouched for.
        self._foreign = frozenset(self._published)
        if left:
            self._entered = True
            self.best_effort(lambda: writers.enter(self._root, self._entry, mine, mixed=True))
        else:
            self._leave()  # none of this run's files is left: the set is another's
        return self._overtaken(owner if overtaken else None, mine, foreign=sorted(foreign))

    def _answer(self, others: list[writers.WriterEntry], mine: str) -> StagerError | None:
        """A clean end and the other writers' entries it saw: one of this
        commit and not mixed says what the record says (a writer of it
        killed before its end): answered. Any other (a writer of another
        commit, or one that ended beside one) is answered only when every
        file of the model is proven this commit's: published by this run
        and its bytes hashed now (an attribute cache may show this run's
        inode where another writer's is), or verified against the origin
        by this run. Else the model stays refused and the run fails,
        retryable: its retry proves the set (staging/run.py)."""
        same = [e for e in others if e.commit == mine and not e.mixed]
        rest = [e for e in others if e not in same]
        if rest and self._proves_every_file():
            same, rest = same + rest, []
        if same:
            self.best_effort(lambda: writers.clear(self._root, same))
        if not rest:
            return None
        return SourceError(
            "another writer of the model left files of another commit, or died while "
            f"writing them, while this run staged commit {mine[:12]}: the model is refused "
            "until a writer proves every file by its bytes; run it again",
            reason=Reason.SOURCE_CHANGED,
            answered=True,
        )

    def _proves_every_file(self) -> bool:
        from llmkube_stager.cache.state import holds_version

        for file in self._manifest.files:
            if file.rel in self.verified:
                continue
            meta = self._session.metas.get(file.rel)
            if file.rel not in self._published or meta is None:
                return False
            if not holds_version(file.dest, meta.sha256, meta.etag):
                return False
        return True

    def _leave(self) -> None:
        if self._entered:
            self.best_effort(lambda: writers.leave(self._root, self._entry))

    def _still(self, rel: str, st: os.stat_result) -> bool:
        """`rel` still holds what this run published: the inode it renamed,
        or bytes of this run's version (a writer of the same commit renamed
        the same bytes over it)."""
        dest = self._manifest.file(rel).dest
        try:
            now = os.lstat(dest)
        except OSError:
            return False
        if os.path.samestat(now, st) and (now.st_size, now.st_mtime_ns) == (
            st.st_size,
            st.st_mtime_ns,
        ):
            return True
        from llmkube_stager.cache.state import holds_version

        meta = self._session.metas.get(rel)
        return meta is not None and holds_version(dest, meta.sha256, meta.etag)

    def _commit(self) -> str | None:
        resolved = self._session.resolved()
        return resolved.commit if resolved is not None else None

    def _overtaken(
        self, owner: str | None, mine: str, foreign: list[str] | None = None
    ) -> SourceError:
        resolved = self._session.resolved()
        revision = resolved.revision if resolved is not None else "the revision"
        theirs = f"commit {owner[:12]}" if owner else "other bytes"
        replaced = f" ({', '.join(foreign[:3])} replaced)" if foreign else ""
        return SourceError(
            f"another writer of the model staged {theirs} of {revision} while this run "
            f"staged commit {mine[:12]}{replaced} (the revision moved between their listings): "
            "this run stops, and a model left with files of both commits is refused until a "
            "writer stages it again from one; run it again (pin a commit to avoid it)",
            reason=Reason.SOURCE_CHANGED,
            answered=True,
        )

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
        if len(rels) == len(results) and whole_set and not self._foreign:
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
        # Never a validator for bytes this run did not write (#29 item 1);
        # "" where the origin gave none: the replaced bytes' is not theirs.
        return {rel: _validator(metas.get(rel)) for rel in rels if rel not in self._foreign}

    def _run_update(self) -> Update:
        """The source this run stages from (#46 item 2: a directory knows
        its source), and the revision and commit (Hugging Face)."""
        source = model_source_id(self._session.config.source)
        update = Update(source=source) if source else Update()
        resolved = self._session.resolved()
        if resolved is None or resolved.commit is None:
            return update
        update = update | Update(revision=resolved.revision, commit=resolved.commit)
        if self._session.over_whole_model:
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


def _validator(meta: RemoteMeta | None) -> str:
    return (meta.validator or "") if meta is not None else ""
