"""The run's mode (#32 item 3): a run stages the whole model, or one share
of a sharded prefetch (#16 item 4). It is chosen once (staging/run.py),
the way the acting layer chooses each-file or whole-set, and every step
that differs asks it instead of checking for a share:

- which files are its own (the plan's manifest, OnChange's probes);
- which interrupted publishes it finishes (#10 defect 13, #21 item 5);
- whether it takes the writer lock and sweeps stale temp files;
- whether it judges the set: refuses a warm start of an unwhole set,
  settles the commits writers mixed (#29 item 1);
- which commit it fetches at: the one recorded (IfNotPresent, #10 defect
  11), or its Job's (#21 item 4);
- which record it writes (its writer) and what it checks at the end (a
  share: the other shares' listings, the Job's claim, #21 item 4).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from llmkube_stager.acting.session import Session
from llmkube_stager.cache.jobclaim import JobCommit
from llmkube_stager.cache.runrecord import MAIN, PublishEntry, RunRecord, read_run_record
from llmkube_stager.cache.setstate import pending_publishes
from llmkube_stager.model import Manifest
from llmkube_stager.staging.share import Share, check_views, finish_share


class RunMode(Protocol):
    @property
    def writer(self) -> str:
        """Whose run record the run writes (cache/runrecord.py)."""
        ...

    @property
    def locks(self) -> bool:
        """Takes the writer lock where the filesystem makes it mean something."""
        ...

    @property
    def sweeps(self) -> bool:
        """Removes stale temp files before it writes."""
        ...

    @property
    def judges_set(self) -> bool:
        """Stages the whole model, so it can judge (and prove) the set."""
        ...

    @property
    def fetches_recorded_commit(self) -> bool:
        """IfNotPresent finishes from the commit the model's record names
        (#10 defect 11); a share fetches at its Job's claim instead."""
        ...

    def own(self, manifest: Manifest) -> Manifest:
        """The files this run stages."""
        ...

    def own_intents(self, record: RunRecord, root: str) -> list[PublishEntry]:
        """The publish intents this run finishes."""
        ...

    def finish(self, root: str, session: Session, *, may_write: bool) -> None:
        """What the run checks and records once its files are staged."""
        ...


@dataclass(frozen=True)
class WholeModel:
    """A run over the whole model: the model's own record, the writer lock,
    the sweep; it judges the set the model's writers left."""

    writer: str = MAIN
    locks: bool = True
    sweeps: bool = True
    judges_set: bool = True
    fetches_recorded_commit: bool = True

    def own(self, manifest: Manifest) -> Manifest:
        return manifest

    def own_intents(self, record: RunRecord, root: str) -> list[PublishEntry]:
        """Its own intents and those of shares whose partials are still
        there (the whole model is its own; a share's intent it finished
        stays in that share's record, which only the share rewrites)."""
        own = list(record.run(MAIN).intent)
        left = [e for p in pending_publishes(record, root) for e in p.entries if e not in own]
        return own + left

    def finish(self, root: str, session: Session, *, may_write: bool) -> None:
        return None


@dataclass(frozen=True)
class OneShare:
    """A share of a sharded prefetch (staging/share.py): its files only,
    its own record, and the commit its Job agreed on (Hugging Face, #21
    item 4). No lock: the shares write disjoint files, and one pod waiting
    for another's lock would only serialize them. No sweep: the age gate is
    all that tells a dead writer's debris from another share's partial, and
    a pod of another share may wait for its retry longer than that. It
    cannot judge the set: it stages only its files."""

    share: Share
    claim: JobCommit | None = None
    locks: bool = False
    sweeps: bool = False
    judges_set: bool = False
    fetches_recorded_commit: bool = False

    @classmethod
    def unlisted(cls, index: int, shards: int) -> OneShare:
        """Share `index` before the model is listed: its writer is known,
        its files are not yet (staging/run.py lists before it plans)."""
        return cls(Share(index, shards, frozenset(), ""))

    @property
    def writer(self) -> str:
        return self.share.id

    def own(self, manifest: Manifest) -> Manifest:
        # Planned only once listed (staging/run.py): an unlisted share would
        # plan no file and report success for a model it did not stage.
        if not self.share.digest:  # not an assert: `python -O` would drop it
            raise RuntimeError("a share's files are asked for before it listed the model")
        rels = self.share.rels
        return replace(manifest, files=tuple(f for f in manifest.files if f.rel in rels))

    def own_intents(self, record: RunRecord, root: str) -> list[PublishEntry]:
        return list(record.run(self.share.id).intent)

    def finish(self, root: str, session: Session, *, may_write: bool) -> None:
        """Every share saw one listing; whole under the Job's claim."""
        check_views(read_run_record(root), self.share)
        if may_write:
            finish_share(root, self.share, self.claim, session)


WHOLE_MODEL = WholeModel()
