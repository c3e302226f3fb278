"""Carries out a plan: the files that need no transfer are settled (hits,
record and stamp backfills: acting/warm.py), those that do are transferred
under the run's refresh policy, chosen here once: IfNotPresent publishes
each file as soon as it is whole (acting/each.py), OnChange the set at once
(acting/wholeset.py). Then the validators of what was moved or verified
are recorded (acting/recorder.py).

The write path's modules are imported only when the plan transfers
something: a warm start imports no transfer machinery.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmkube_stager.acting.recorder import Recorder
from llmkube_stager.acting.session import Session
from llmkube_stager.acting.warm import settle
from llmkube_stager.cache.runrecord import RunRecord
from llmkube_stager.errors import StagerError
from llmkube_stager.model import CacheState, FileResult, Manifest, Plan
from llmkube_stager.sources.base import Source

if TYPE_CHECKING:
    from llmkube_stager.acting.work import Transfers


@dataclass(frozen=True)
class Work:
    """What a plan is carried out against."""

    manifest: Manifest
    source: Source
    cache: CacheState
    record: RunRecord
    # OnChange: the present files whose validator the origin confirmed.
    verified: frozenset[str] = frozenset()


def execute(session: Session, work: Work, plan: Plan) -> tuple[FileResult, ...]:
    recorder = Recorder(session, work.manifest, work.source, work.record, work.verified)
    log = session.log
    settled = {
        a.rel: settle(a, work.manifest, work.cache, recorder, log)
        for a in plan.actions
        if not a.transfers
    }
    transfers = [a for a in plan.actions if a.transfers]
    whole_set = session.config.refresh_policy == "OnChange"
    moved: dict[str, FileResult] = {}
    if transfers:
        # #34 item 2: a signed model is published whole or not at all, whatever
        # the policy (a file failing its signed digest stops every other one).
        signed = session.config.signing is not None
        policy = _transfers(session, work, recorder, whole_set or signed)
        policy.open(transfers)
        try:
            moved = policy.run(transfers)
        except StagerError:
            # What this run published may sit beside another writer's
            # files of another commit: marked before it fails (#29 item 1).
            recorder.settle(kept_files=bool(settled))
            raise
    overtaken = recorder.settle(kept_files=bool(settled))
    done = {**settled, **moved}
    results = tuple(done[a.rel] for a in plan.actions)
    if plan.may_write and (moved or work.verified):
        recorder.record_validators(results, whole_set)
    if overtaken is not None:
        raise overtaken
    return results


def _transfers(session: Session, work: Work, recorder: Recorder, whole_set: bool) -> Transfers:
    """The write path begins here."""
    policy: type[Transfers]
    if whole_set:
        from llmkube_stager.acting.wholeset import WholeSet

        policy = WholeSet
    else:
        from llmkube_stager.acting.each import EachFile

        policy = EachFile
    return policy(session, work.manifest, work.source, recorder)
