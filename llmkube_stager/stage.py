"""Orchestration: resolve -> probe fs -> inspect -> plan -> act -> Outcome.

`prepare` does everything up to the plan with local reads only (it is also
`plan`'s dry run). `run_stage` revalidates (OnChange), takes the writer lock
where it means something, re-plans under it, sweeps, and hands the plan to
the executor. A plan with nothing to write returns before any fetcher exists,
so a warm IfNotPresent start opens no connection and imports no HTTP library
(spec §8.4).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from llmkube_stager import messages
from llmkube_stager.cache.disk import ensure_dir
from llmkube_stager.cache.journal import INTENT_KEY, REVISION_KEY
from llmkube_stager.cache.setstate import Pending
from llmkube_stager.cache.state import read_cache_state
from llmkube_stager.config import Config
from llmkube_stager.errors import (
    CacheError,
    Reason,
    SourceError,
    StagerError,
    TransferError,
    from_source,
)
from llmkube_stager.executor import Executor, Session
from llmkube_stager.logs import Log
from llmkube_stager.model import (
    Action,
    CacheState,
    Decision,
    FileResult,
    FsInfo,
    Manifest,
    Outcome,
    PinState,
    Plan,
    Remote,
    Role,
    Strategy,
)
from llmkube_stager.plan import failed, make_plan, probes_needed, strategy_for
from llmkube_stager.sharding import (
    Share,
    agree_share,
    check_views,
    finish_share,
    narrowed,
    own_intents,
    record_share,
    take_share,
)
from llmkube_stager.sources import check_libraries, open_source
from llmkube_stager.sources.base import ListingSource, RemoteMeta, Source

if TYPE_CHECKING:
    from llmkube_stager.cache.shardrec import JobCommit


@dataclass(frozen=True)
class Effects:
    log: Log
    probe_fs: Callable[[str], FsInfo]
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time


@dataclass(frozen=True)
class Prepared:
    source: Source
    manifest: Manifest
    fs: FsInfo
    role: Role
    cache: CacheState
    plan: Plan
    strategy: Strategy
    started_s: float = field(default=0.0)
    remote: Mapping[str, Remote] = field(default_factory=dict)
    # OnChange: the validators present files were verified to have (or
    # "unverified"), in place of a missing record (defect 12).
    checked: Mapping[str, str] = field(default_factory=dict)
    # A sharded prefetch: the files this pod stages (sharding.py), and the
    # commit its Job agreed on (Hugging Face, #21 item 4).
    share: Share | None = None
    claim: JobCommit | None = None


def role_of(config: Config) -> Role:
    return "stager" if config.prefetch_stager else "serving"


def prepare(config: Config, effects: Effects) -> Prepared:
    started = effects.monotonic()
    source = open_source(config, effects.log)
    with from_source(source.kind):
        manifest = _manifest(config, source, effects)
    fs = effects.probe_fs(manifest.root)
    if fs.is_fuse is None:
        effects.log.warning(
            "fs_unknown",
            "cannot determine the cache filesystem type; treating it as one where flock works",
            path=fs.path,
        )
    role = role_of(config)
    strategy = strategy_for(fs, role, config.direct_io)
    prepared = Prepared(source, manifest, fs, role, CacheState(False), Plan((), False), strategy)
    return _replan(config, replace(prepared, started_s=started))


def _manifest(config: Config, source: Source, effects: Effects) -> Manifest:
    """A source without MODEL_FILES lists its files (#24 item 5, listed.py)."""
    if isinstance(source, ListingSource) and source.lists:
        from llmkube_stager.listed import listed_manifest

        return listed_manifest(config, source, effects.log, effects.sleep)
    return source.manifest()


def _replan(config: Config, prepared: Prepared) -> Prepared:
    cache = read_cache_state(prepared.manifest)
    if prepared.checked:
        files = {
            rel: replace(local, validator=prepared.checked.get(rel, local.validator))
            for rel, local in cache.files.items()
        }
        cache = replace(cache, files=files)
    plan = make_plan(
        narrowed(prepared.manifest, prepared.share),
        cache,
        prepared.fs,
        prepared.role,
        config.refresh_policy,
        prepared.remote,
        cached=bool(config.cache_dir),
    )
    return replace(prepared, cache=cache, plan=plan)


def run_stage(config: Config, effects: Effects) -> tuple[Prepared, Outcome]:
    prepared = prepare(config, effects)
    with from_source(prepared.manifest.kind):
        return _stage(config, effects, prepared)


def _stage(config: Config, effects: Effects, prepared: Prepared) -> tuple[Prepared, Outcome]:
    if prepared.manifest.kind == "pvc":
        return prepared, _verify_pvc(prepared, effects)
    session = Session(
        config, effects.log, effects.sleep, effects.wall_clock, prepared.fs, prepared.strategy
    )
    try:
        if config.shards > 1:
            prepared = _take_share(config, effects, prepared, session)
        elif prepared.strategy.may_write:
            prepared = _wait_for_live_publishes(config, effects, prepared)
        pending = bool(
            own_intents(prepared.cache.validators, prepared.share, prepared.manifest.root)
        )
        if not prepared.strategy.may_write:
            _refuse_unwhole(prepared)
        if config.refresh_policy == "OnChange" or any(a.transfers for a in prepared.plan.actions):
            # Before the first probe or mkdir: a missing library is a
            # configuration error with nothing on disk (#13.1), and so is
            # what a source can only check by reading a file (an S3 profile,
            # a token file, the CA bundle: #11.12).
            check_libraries(prepared.source)
            prepared.source.preflight()
        if config.refresh_policy == "OnChange":
            effects.log.info("revalidate", messages.REVALIDATING)
            prepared = _revalidate(config, prepared, session)
        _check_plan(prepared, effects.log)
        if not prepared.plan.writes and not (pending and prepared.strategy.may_write):
            # Warm start: no lock, no mkdir, no sweep (spec §8.4, §9.3); a
            # set a reader would refuse is not served either (#21 items 3, 4).
            if prepared.share is None:
                _refuse_unwhole(prepared, commits=not _all_verified(config, prepared))
            results = _executor(session, prepared).run(prepared.plan)
        else:
            results = _write(config, effects, prepared, session)
        if prepared.share is not None:
            check_views(read_cache_state(prepared.manifest).validators, prepared.share)
            if prepared.strategy.may_write:
                finish_share(prepared.manifest.root, prepared.share, prepared.claim, session)
    finally:
        session.close()
    return prepared, Outcome(results, effects.monotonic() - prepared.started_s)


def _take_share(config: Config, effects: Effects, prepared: Prepared, session: Session) -> Prepared:
    """List the model, take this pod's share, record it (sharding.py). A
    Hugging Face share lists at the one commit its Job agreed on (#21 item
    4): a retried pod too."""
    from llmkube_stager.cache.shardrec import validators_name

    session.validators_name = validators_name(config.shard_index, config.shards)
    claim = None
    if prepared.manifest.kind == "hf" and prepared.strategy.may_write:
        ensure_dir(prepared.manifest.root, prepared.manifest.root, "")  # the claim's directory
        clock = (effects.sleep, effects.monotonic)
        share, claim = agree_share(
            config,
            prepared.source,
            prepared.manifest,
            session,
            _kept_commit(config, prepared),
            clock,
        )
    else:
        share = take_share(config, prepared.source, prepared.manifest, session)
    if prepared.strategy.may_write:
        ensure_dir(prepared.manifest.root, prepared.manifest.root, "")
        record_share(prepared.manifest.root, share, session, claim)
    return _replan(config, replace(prepared, share=share, claim=claim))


def _kept_commit(config: Config, prepared: Prepared) -> str | None:
    """IfNotPresent keeps the files present: the Job stages the commit they
    come from (defect 11), when the records name one for this revision."""
    from llmkube_stager.cache.setstate import recorded_commits

    if config.refresh_policy != "IfNotPresent":
        return None
    record = prepared.cache.validators
    commits = set(recorded_commits(record).values())
    revisions = {
        v
        for k, v in record.items()
        if v and (k == REVISION_KEY or k.startswith(REVISION_KEY + "/"))
    }
    if len(commits) == 1 and revisions == {prepared.source.revision}:
        return commits.pop()
    return None


def _write(
    config: Config, effects: Effects, prepared: Prepared, session: Session
) -> tuple[FileResult, ...]:
    ensure_dir(prepared.manifest.root, prepared.manifest.root, "")
    with _writer_lock(config, effects, prepared):
        if prepared.strategy.take_lock:
            # Another writer may have staged while we waited for the lock.
            prepared = _replan(config, prepared)
        if _intents(prepared):
            _roll_forward(prepared, effects.log, session.validators_name)
            prepared = _replan(config, prepared)
        if prepared.strategy.take_lock or prepared.checked:
            _check_plan(prepared, effects.log, warn=False)
        if prepared.share is None:
            # A share never sweeps: the age gate is all that tells a dead
            # writer's debris from another share's partial, and a pod of
            # another share may wait for its retry longer than that.
            _sweep(prepared, effects)
        if config.refresh_policy == "IfNotPresent" and prepared.share is None:
            session.commit = _recorded_commit(prepared)
        return _executor(session, prepared).run(prepared.plan)


def _executor(session: Session, prepared: Prepared) -> Executor:
    verified = _verified(prepared)
    return Executor(session, prepared.manifest, prepared.source, prepared.cache, verified)


def _verified(prepared: Prepared) -> frozenset[str]:
    """OnChange: the present files whose validator the origin confirmed."""
    return frozenset(
        rel
        for rel, remote in prepared.remote.items()
        if remote.validator and prepared.cache.files[rel].validator == remote.validator
    )


def _all_verified(config: Config, prepared: Prepared) -> bool:
    """Every file of the plan was just verified against one commit: the set
    is that commit's whatever the records say, and the run records it."""
    verified = _verified(prepared)
    return config.refresh_policy == "OnChange" and all(
        a.rel in verified for a in prepared.plan.actions
    )


def _recorded_commit(prepared: Prepared) -> str | None:
    """IfNotPresent finishes an interrupted Hugging Face run from the commit
    its files came from (defect 11: one manifest, one commit); when the
    revision asked for is not the one recorded, the files present are of
    another revision: fail closed rather than mix."""
    from llmkube_stager.cache.setstate import judge_set, recorded_commits

    record = prepared.cache.validators
    commits = recorded_commits(record)
    if prepared.manifest.kind != "hf" or not commits or not prepared.plan.needs_network:
        return None
    if len(set(commits.values())) > 1:
        # Files of two commits (a sharded Job's, #21 item 4): finishing
        # from either would serve the mix.
        refusal = judge_set(record, prepared.manifest.root, prepared.manifest.kind)
        if refusal is not None:
            raise refusal
    writer, commit = sorted(commits.items())[0]
    revision = record.get(f"{REVISION_KEY}/{writer}" if writer else REVISION_KEY)
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


def _intents(prepared: Prepared) -> list[dict[str, object]]:
    return own_intents(prepared.cache.validators, prepared.share, prepared.manifest.root)


_PUBLISH_POLL_S = 0.5


def _wait_for_live_publishes(config: Config, effects: Effects, prepared: Prepared) -> Prepared:
    """An unsharded writer rolls forward only a dead writer's publish (#21
    item 5): a share takes no lock, so its partials' flocks and heartbeats
    say whether it lives (cache/setstate.py). A live publish is waited for,
    as a held lock is (LLMKUBE_LOCK_TIMEOUT), then the cache read again."""
    started = effects.monotonic()
    announced = False
    while live := _live_publishes(prepared):
        waited_s = effects.monotonic() - started
        if waited_s >= config.timeouts.lock_s:
            raise CacheError(
                f"another writer ({live[0].key}) was still publishing {len(live[0].entries)} "
                f"file(s) of the model after {config.timeouts.lock_s:g}s",
                reason=Reason.CACHE_LOCK_TIMEOUT,
                file=str(live[0].entries[0]["rel"]),
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
        prepared = _replan(config, prepared)
    return prepared


def _live_publishes(prepared: Prepared) -> list[Pending]:
    from llmkube_stager.cache.partials import IDLE_S, fs_now
    from llmkube_stager.cache.setstate import pending_publishes, publish_alive

    root = prepared.manifest.root
    pending = pending_publishes(prepared.cache.validators, root)
    if not pending:
        return []
    # Where flock excludes, a free flock is proof of death (as for adoption).
    idle_s = 0.0 if prepared.strategy.lock_excludes else IDLE_S
    now_s = fs_now(root) if idle_s > 0 else 0.0
    return [p for p in pending if publish_alive(p, root, now_s, idle_s)]


def _refuse_unwhole(prepared: Prepared, *, commits: bool = True) -> None:
    """A reader that finds a publish interrupted halfway (its partials still
    there: defect 13) or files of two commits (#21 item 4) does not serve
    them as one set: the judgement of every read-only command (setstate)."""
    from llmkube_stager.cache.setstate import judge_set

    validators, root = prepared.cache.validators, prepared.manifest.root
    refusal = judge_set(validators, root, prepared.manifest.kind, commits=commits)
    if refusal is not None:
        raise refusal


def _roll_forward(prepared: Prepared, log: Log, name: str) -> None:
    """Finish the publish a killed writer left halfway (defect 13)."""
    from llmkube_stager.cache.publish import roll_forward
    from llmkube_stager.cache.records import write_validators

    manifest = prepared.manifest
    updates = {INTENT_KEY: ""}
    listed = {f.rel: f for f in manifest.files}
    for entry in _intents(prepared):
        rel = str(entry["rel"])
        if rel not in listed:
            continue
        done = roll_forward(listed[rel].dest, str(entry["partial"]), int(str(entry["size"])))
        # A file that cannot be vouched for loses its validator: OnChange
        # then verifies it against the origin instead of trusting it (a
        # destination found of its size, None, may be the old file).
        updates[rel] = str(entry.get("validator") or "") if done is True else ""
    write_validators(manifest.root, updates, name)
    log.warning(
        "rolled_forward",
        "finished a publish that an earlier writer left halfway",
        path=manifest.root,
    )


def _verify_pvc(prepared: Prepared, effects: Effects) -> Outcome:
    """pvc:// never downloads: the mounted file must exist, be readable and
    match its pin; no stamp is written on the read-only claim (spec §3.5)."""
    from llmkube_stager.sources.local import stat_source

    file = prepared.manifest.files[0]
    stat_source(file.dest)
    if prepared.cache.files[file.rel].pin is PinState.MISMATCH:
        raise TransferError(
            f"SHA256 mismatch for the pre-staged model {file.dest}",
            reason=Reason.CHECKSUM_MISMATCH,
            file=file.rel,
        )
    effects.log.info("pvc_verified", f"Pre-staged model {file.dest} verified", file=file.rel)
    results = (FileResult(file.rel, Decision.REUSE),)
    return Outcome(results, effects.monotonic() - prepared.started_s)


def _revalidate(config: Config, prepared: Prepared, session: Session) -> Prepared:
    """OnChange: one probe per present file, then plan with what they said."""
    own = narrowed(prepared.manifest, prepared.share)
    rels = probes_needed(own, prepared.cache, config.refresh_policy)
    remote: dict[str, Remote] = {}
    unreachable: dict[str, str] = {}
    for rel in rels:
        file = prepared.manifest.file(rel)
        remote[rel] = _probe_one(session, file.url, rel, unreachable, prepared)
    checked = _check_unrecorded(prepared, session, remote)
    return _replan(config, replace(prepared, remote=remote, checked=checked))


def _check_unrecorded(
    prepared: Prepared, session: Session, remote: Mapping[str, Remote]
) -> dict[str, str]:
    """A Hugging Face copy without a recorded validator (staged by the
    scripts, or by a run that was interrupted) is not "unchanged" because
    its size matches: its bytes are checked against the hub's LFS sha256 or
    git blob id, once (defect 12). The result stands in for the record."""
    from llmkube_stager.cache.state import hash_file

    checked: dict[str, str] = {}
    if prepared.manifest.kind != "hf":
        return checked
    for rel, answer in remote.items():
        local = prepared.cache.files[rel]
        meta = session.metas.get(rel)
        if local.validator or not answer.validator or meta is None or not local.present:
            continue
        dest = prepared.manifest.file(rel).dest
        try:
            if meta.sha256 is not None:
                same = hash_file(dest)[0] == meta.sha256
            else:
                same = _git_blob_id(dest) == (meta.etag or "").strip('"')
        except OSError:
            same = False
        checked[rel] = answer.validator if same else "unverified"
    return checked


def _git_blob_id(path: str) -> str:
    import hashlib

    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        sha = hashlib.sha1(b"blob %d\x00" % size, usedforsecurity=False)
        while chunk := handle.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


def _probe_one(
    session: Session, url: str, rel: str, unreachable: dict[str, str], prepared: Prepared
) -> Remote:
    """One origin that did not answer is not asked again for every other
    file: a blackholed origin must not cost a timeout per shard (scenario 38)."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    if origin in unreachable:
        return Remote(answered=False, detail=unreachable[origin])
    try:
        # A share listed every file already (sharding.py): asked once.
        meta: RemoteMeta = session.metas.get(rel) or session.probe(
            prepared.source, prepared.manifest.file(rel), prepared.manifest.root
        )
    except SourceError as err:
        if not err.answered:
            unreachable[origin] = err.detail
        elif prepared.source.get_without_probe:
            # Answered without a usable size (5xx/429 on HEAD): the transfer
            # tries the GET without asking again (spec §8.1 "try GET").
            from llmkube_stager.sources.wire.probe import unknown_meta

            session.metas[rel] = unknown_meta(url)
        return Remote(answered=err.answered, detail=err.detail)
    return Remote(answered=True, size_bytes=meta.size_bytes, validator=meta.etag)


def _check_plan(prepared: Prepared, log: Log, *, warn: bool = True) -> None:
    if warn:
        for warning in prepared.plan.warnings:
            log.warning("no_size_record", warning)
    failure = failed(prepared.plan)
    if failure is not None:
        raise _failure_error(failure, prepared)


def _failure_error(action: Action, prepared: Prepared) -> StagerError:
    reason = action.failure or Reason.INTERNAL
    if reason is Reason.CACHE_LOCK_UNSUPPORTED:
        detail = f"FUSE cache cannot guarantee cross-node file locking for staging {action.rel}"
    elif reason is Reason.CHECKSUM_MISMATCH:
        return TransferError(action.why, reason=reason, file=action.rel)
    else:
        detail = f"cannot stage {action.rel}: {action.why}"
    return CacheError(
        detail,
        reason=reason,
        file=action.rel,
        source_kind=prepared.manifest.kind,
        remedy=action.remedy or None,
    )


def _writer_lock(
    config: Config, effects: Effects, prepared: Prepared
) -> contextlib.AbstractContextManager[object]:
    """Off FUSE (and when the type is unknown: the previous behavior, spec
    §16 item 3) writers take the flock; on FUSE nobody does (spec §9.3)."""
    from llmkube_stager.cache.lock import CacheLock

    if not prepared.strategy.take_lock or prepared.share is not None:
        # The shares of a sharded prefetch write disjoint files: one pod
        # waiting for another's lock would only serialize them.
        return contextlib.nullcontext()
    return CacheLock(
        prepared.manifest.root,
        config.timeouts.lock_s,
        effects.log,
        effects.monotonic,
        effects.sleep,
    )


def _sweep(prepared: Prepared, effects: Effects) -> None:
    from llmkube_stager.cache.sweep import sweep

    manifest = prepared.manifest
    staging = frozenset(manifest.file(a.rel).dest for a in prepared.plan.actions if a.transfers)
    listed = frozenset(f.dest for f in manifest.files)
    root = manifest.root
    for path in sweep(root, listed, staging, effects.wall_clock()):
        effects.log.info("swept", "removed stale temp file", path=os.path.relpath(path, root))
