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
from urllib.parse import urlsplit

from llmkube_stager import messages
from llmkube_stager.cache.state import read_cache_state
from llmkube_stager.config import Config
from llmkube_stager.errors import CacheError, Reason, SourceError, StagerError, TransferError
from llmkube_stager.executor import Executor, Session, ensure_dir
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
)
from llmkube_stager.plan import failed, make_plan, probes_needed
from llmkube_stager.sources import open_source
from llmkube_stager.sources.base import RemoteMeta, Source


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
    started_s: float = field(default=0.0)
    remote: Mapping[str, Remote] = field(default_factory=dict)


def role_of(config: Config) -> Role:
    return "stager" if config.prefetch_stager else "serving"


def prepare(config: Config, effects: Effects) -> Prepared:
    started = effects.monotonic()
    source = open_source(config)
    manifest = source.manifest()
    fs = effects.probe_fs(manifest.root)
    if fs.is_fuse is None:
        effects.log.warning(
            "fs_unknown",
            "cannot determine the cache filesystem type; treating it as one where flock works",
            path=fs.path,
        )
    prepared = Prepared(source, manifest, fs, role_of(config), CacheState(False), Plan((), False))
    return _replan(config, replace(prepared, started_s=started))


def _replan(config: Config, prepared: Prepared) -> Prepared:
    cache = read_cache_state(prepared.manifest)
    plan = make_plan(
        prepared.manifest,
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
    if prepared.manifest.kind == "pvc":
        return prepared, _verify_pvc(prepared, effects)
    session = Session(config, effects.log, effects.sleep, effects.wall_clock, prepared.fs)
    try:
        if config.refresh_policy == "OnChange":
            effects.log.info("revalidate", messages.REVALIDATING)
            prepared = _revalidate(config, prepared, session)
        _check_plan(prepared, effects.log)
        if not prepared.plan.writes:
            # Warm start: no lock, no mkdir, no sweep (spec §8.4, §9.3).
            results = Executor(session, prepared.manifest, prepared.source).run(prepared.plan)
        else:
            if any(action.transfers for action in prepared.plan.actions):
                # Opening the fetcher checks what only it can (an S3 profile,
                # the CA bundle) before the model directory and lock exist.
                session.fetcher(prepared.source)
            results = _write(config, effects, prepared, session)
    finally:
        session.close()
    return prepared, Outcome(results, effects.monotonic() - prepared.started_s)


def _write(
    config: Config, effects: Effects, prepared: Prepared, session: Session
) -> tuple[FileResult, ...]:
    ensure_dir(prepared.manifest.root, prepared.manifest.root, "")
    with _writer_lock(config, effects, prepared):
        if prepared.fs.is_fuse is not True:
            # Another writer may have staged while we waited for the lock.
            prepared = _replan(config, prepared)
            _check_plan(prepared, effects.log, warn=False)
        _sweep(prepared, effects)
        return Executor(session, prepared.manifest, prepared.source).run(prepared.plan)


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
    rels = probes_needed(prepared.manifest, prepared.cache, config.refresh_policy)
    remote: dict[str, Remote] = {}
    unreachable: dict[str, str] = {}
    for rel in rels:
        file = prepared.manifest.file(rel)
        remote[rel] = _probe_one(session, file.url, rel, unreachable, prepared)
    return _replan(config, replace(prepared, remote=remote))


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
        meta: RemoteMeta = session.probe(
            prepared.source, prepared.manifest.file(rel), prepared.manifest.root
        )
    except SourceError as err:
        if not err.answered:
            unreachable[origin] = err.detail
        elif getattr(prepared.source, "get_without_probe", False):
            # Answered without a usable size (5xx/429 on HEAD): the transfer
            # tries the GET without asking again (spec §8.1 "try GET").
            from llmkube_stager.sources.http_probe import unknown_meta

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
    return CacheError(detail, reason=reason, file=action.rel, source_kind=prepared.manifest.kind)


def _writer_lock(
    config: Config, effects: Effects, prepared: Prepared
) -> contextlib.AbstractContextManager[object]:
    """Off FUSE (and when the type is unknown: the previous behavior, spec
    §16 item 3) writers take the flock; on FUSE nobody does (spec §9.3)."""
    from llmkube_stager.cache.lock import CacheLock

    if prepared.fs.is_fuse:
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
