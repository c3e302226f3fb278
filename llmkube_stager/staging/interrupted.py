"""What an earlier run left in the model directory: a publish interrupted
halfway (#10 defect 13), which a writer finishes (staging/write.py: the
intents its mode owns, staging/mode.py), a reader refuses and an
unsharded writer waits for while its writer lives (#21 item 5); and the
commit the files present come from, which an IfNotPresent run finishes
from (#10 defect 11), never mixing two (#21 item 4).
"""

from __future__ import annotations

from llmkube_stager.cache.setstate import (
    FutureWatch,
    Pending,
    judge_set,
    pending_publishes,
    publish_alive,
)
from llmkube_stager.config import Config
from llmkube_stager.errors import CacheError, Reason
from llmkube_stager.schemes import has_commits
from llmkube_stager.staging.prepare import Effects, Prepared, replan

_PUBLISH_POLL_S = 0.5


def wait_for_live_publishes(config: Config, effects: Effects, prepared: Prepared) -> Prepared:
    """An unsharded writer rolls forward only a dead writer's publish (#21
    item 5): a share takes no lock, so its partials' flocks and heartbeats
    say whether it lives (cache/setstate.py). A live publish is waited for,
    as a held lock is (LLMKUBE_LOCK_TIMEOUT), then the cache read again.
    Partials dated in the future are watched over the wait (#29 item 5)."""
    started = effects.monotonic()
    announced = False
    watch = FutureWatch()
    while live := _live_publishes(prepared, watch):
        waited_s = effects.monotonic() - started
        if waited_s >= config.timeouts.lock_s:
            raise CacheError(
                f"another writer ({live[0].key}) was still publishing {len(live[0].entries)} "
                f"file(s) of the model after {config.timeouts.lock_s:g}s",
                reason=Reason.CACHE_LOCK_TIMEOUT,
                file=live[0].entries[0].rel,
            )
        if not announced:
            announced = True
            effects.log.info(
                "publish_wait",
                f"another writer is publishing {len(live[0].entries)} file(s) of the model; "
                "waiting for it to finish",
                writer=live[0].key,
            )
        effects.sleep(_PUBLISH_POLL_S)
        watch.waited(_PUBLISH_POLL_S)
        prepared = replan(config, prepared)
    return prepared


def _live_publishes(prepared: Prepared, watch: FutureWatch) -> list[Pending]:
    root = prepared.manifest.root
    pending = pending_publishes(prepared.record, root)
    if not pending:
        return []  # every start but one after a killed publish: nothing more imported
    from llmkube_stager.cache.partials import IDLE_S, fs_now

    # Where flock excludes, a free flock is proof of death (as for adoption).
    idle_s = 0.0 if prepared.strategy.lock_excludes else IDLE_S
    now_s = fs_now(root) if idle_s > 0 else 0.0
    return [p for p in pending if publish_alive(p, root, now_s, idle_s, watch)]


def refuse_unwhole(prepared: Prepared, *, commits: bool = True) -> None:
    """A reader that finds a publish interrupted halfway (its partials still
    there: #10 defect 13) or files of two commits (#21 item 4) does not
    serve them as one set: the judgement of every read-only command
    (cache/setstate.py)."""
    refusal = judge_set(
        prepared.record, prepared.manifest.root, prepared.manifest.kind, commits=commits
    )
    if refusal is not None:
        raise refusal


def kept_commit(config: Config, prepared: Prepared) -> str | None:
    """IfNotPresent keeps the files present: a sharded Job stages the commit
    they come from (#10 defect 11), when the record names one for this
    revision."""
    if config.refresh_policy != "IfNotPresent":
        return None
    commits = set(prepared.record.commits().values())
    if len(commits) == 1 and prepared.record.revisions() == {prepared.source.revision}:
        return commits.pop()
    return None


def recorded_commit(prepared: Prepared) -> str | None:
    """IfNotPresent finishes an interrupted Hugging Face run from the commit
    its files came from (#10 defect 11: one manifest, one commit); when the
    revision asked for is not the one recorded, the files present are of
    another revision: fail closed rather than mix."""
    record = prepared.record
    commits = record.commits()
    if not has_commits(prepared.manifest.kind) or not commits or not prepared.plan.needs_network:
        return None
    if len(set(commits.values())) > 1:
        # Files of two commits (a sharded Job's, #21 item 4): finishing
        # from either would serve the mix.
        refuse_unwhole(prepared)
    writer, commit = sorted(commits.items())[0]
    revision = record.run(writer).revision or None
    present = [a for a in prepared.plan.actions if not a.transfers]
    if not present:
        return None
    asked_revision = prepared.source.revision or revision
    if asked_revision not in (revision, commit):
        raise CacheError(
            f"the cache holds files of revision {revision} (commit {commit[:12]}) and "
            f"MODEL_SOURCE asks for {asked_revision}: finishing the model would mix two "
            "revisions; use LLMKUBE_REFRESH_POLICY=OnChange or clear the model directory",
            reason=Reason.CACHE_INCOMPLETE,
            source_kind=prepared.manifest.kind,
        )
    return commit
