"""Orchestration: resolve -> probe fs -> inspect -> plan -> act -> Outcome.

`prepare` does everything up to the plan with local reads only (it is also
`plan`'s dry run); `execute` acts on the plan. A plan with nothing to write
returns before any fetcher exists, so a warm start opens no connection and
imports no HTTP library (spec §8.4).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from llmkube_stager.cache.lock import CacheLock
from llmkube_stager.cache.partials import IDLE_S
from llmkube_stager.cache.records import read_cache_state, write_size_record
from llmkube_stager.cache.sweep import sweep
from llmkube_stager.config import Config
from llmkube_stager.errors import CacheError, StagerError
from llmkube_stager.logs import Log
from llmkube_stager.model import (
    Action,
    CacheState,
    Decision,
    FileResult,
    FsInfo,
    Manifest,
    Outcome,
    Plan,
    RemoteFile,
    Role,
)
from llmkube_stager.plan import make_plan, refused
from llmkube_stager.sources import open_source
from llmkube_stager.sources.base import Fetcher, Source


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
            "cannot determine the cache filesystem type; treating it as one where locks work",
            path=fs.path,
        )
    role = role_of(config)
    cache = read_cache_state(manifest)
    plan = make_plan(manifest, cache, fs, role)
    return Prepared(source, manifest, fs, role, cache, plan, started)


def run_stage(config: Config, effects: Effects) -> tuple[Prepared, Outcome]:
    prepared = prepare(config, effects)
    _check_plan(prepared, effects.log)
    if not prepared.plan.writes:
        # Warm start: no lock, no mkdir, no sweep, no connection (spec §8.4).
        results = _Executor(config, effects, prepared).run()
        return prepared, Outcome(results, effects.monotonic() - prepared.started_s)
    _ensure_dir(prepared.manifest.root, prepared.manifest.root, "")
    with _writer_lock(config, effects, prepared):
        if prepared.fs.is_fuse is not True:
            # Another writer may have staged while we waited for the lock.
            prepared = _replan(prepared)
            _check_plan(prepared, effects.log, warn=False)
        _sweep(prepared, effects)
        results = _Executor(config, effects, prepared).run()
    return prepared, Outcome(results, effects.monotonic() - prepared.started_s)


def _check_plan(prepared: Prepared, log: Log, *, warn: bool = True) -> None:
    if warn:
        for warning in prepared.plan.warnings:
            log.warning("no_size_record", warning)
    refusal = refused(prepared.plan)
    if refusal is not None:
        raise _refusal_error(refusal, prepared)


def _replan(prepared: Prepared) -> Prepared:
    cache = read_cache_state(prepared.manifest)
    plan = make_plan(prepared.manifest, cache, prepared.fs, prepared.role)
    return replace(prepared, cache=cache, plan=plan)


def _writer_lock(
    config: Config, effects: Effects, prepared: Prepared
) -> contextlib.AbstractContextManager[object]:
    """Off FUSE (and when the type is unknown: the previous behavior, spec
    §16 item 3) writers take the flock; on FUSE nobody does (spec §9.3)."""
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
    manifest = prepared.manifest
    staging = frozenset(manifest.file(a.rel).dest for a in prepared.plan.actions if a.transfers)
    listed = frozenset(f.dest for f in manifest.files)
    root = manifest.root
    for path in sweep(root, listed, staging, effects.wall_clock()):
        effects.log.info("swept", "removed stale temp file", path=os.path.relpath(path, root))


def _refusal_error(action: Action, prepared: Prepared) -> StagerError:
    assert action.refusal is not None
    detail = (
        f"FUSE cache cannot guarantee cross-node file locking for staging {action.rel}"
        if action.refusal.value == "ModelCacheLockUnsupported"
        else f"cannot stage {action.rel}: {action.why}"
    )
    return CacheError(
        detail, reason=action.refusal, file=action.rel, source_kind=prepared.manifest.kind
    )


class _Executor:
    """Carries out a plan, one action at a time, in manifest order."""

    def __init__(self, config: Config, effects: Effects, prepared: Prepared) -> None:
        self._config = config
        self._effects = effects
        self._prepared = prepared
        self._log = effects.log
        self._fetcher: Fetcher | None = None

    def run(self) -> tuple[FileResult, ...]:
        manifest = self._prepared.manifest
        try:
            return tuple(self._act(a, manifest.file(a.rel)) for a in self._prepared.plan.actions)
        finally:
            if self._fetcher is not None:
                self._fetcher.close()

    def _act(self, action: Action, file: RemoteFile) -> FileResult:
        if action.decision in (Decision.REUSE, Decision.KEEP):
            self._log.info("cache_hit", self._hit_text(file.rel), file=file.rel)
            if action.backfill_record:
                self._backfill(file)
            return FileResult(file.rel, action.decision)
        return self._transfer(action, file)

    def _hit_text(self, rel: str) -> str:
        if self._prepared.manifest.multi_file:
            return f"Model artifact {rel} already cached, skipping download"
        if not self._config.cache_dir:
            return "Model already exists, skipping download"
        return "Model already cached, skipping download"

    def _backfill(self, file: RemoteFile) -> None:
        """Legacy file: record its local size as-is (scenario 53: a legacy
        file cannot be proven complete; accepted and documented)."""
        try:
            size = os.stat(file.dest).st_size
            write_size_record(file.dest, size)
        except OSError as exc:
            self._log.warning(
                "backfill_failed", f"could not backfill the size record of {file.rel}: {exc}"
            )
            return
        self._log.info("backfilled", f"Backfilled size record for {file.rel}", size_bytes=size)

    def _transfer(self, action: Action, file: RemoteFile) -> FileResult:
        from llmkube_stager.transfer import TransferEffects, fetch_file

        if action.decision is Decision.REPAIR:
            self._log.warning(
                "repair", f"{file.rel}: {action.why}; staging it again", file=file.rel
            )
        multi = self._prepared.manifest.multi_file
        self._log.info(
            "download_start",
            f"Downloading model artifact {file.rel}..." if multi else "Downloading model...",
            file=file.rel,
        )
        _ensure_dir(os.path.dirname(file.dest), self._prepared.manifest.root, file.rel)
        effects = TransferEffects(
            log=self._log,
            sleep=self._effects.sleep,
            wall_clock=self._effects.wall_clock,
            idle_s=0.0 if self._prepared.fs.is_fuse is False else IDLE_S,
            timeouts=self._config.timeouts,
            progress_interval_s=self._config.progress_interval_s,
            free_bytes=self._free_bytes,
        )
        try:
            fetched = fetch_file(self._fetcher_once(), file, effects)
        except StagerError as err:
            err.file = err.file or file.rel
            if multi:
                self._log.error("download_failed", f"failed to download {file.rel}", file=file.rel)
            raise
        self._log.info(
            "download_done",
            f"Model artifact {file.rel} downloaded" if multi else "Model downloaded successfully",
            file=file.rel,
            size_bytes=fetched.size_bytes,
        )
        return FileResult(file.rel, action.decision, fetched.bytes_received)

    def _fetcher_once(self) -> Fetcher:
        if self._fetcher is None:
            self._fetcher = self._prepared.source.fetcher()
        return self._fetcher

    def _free_bytes(self) -> int | None:
        fs = self._prepared.fs
        if not fs.free_space_meaningful:
            return None
        try:
            st = os.statvfs(self._prepared.manifest.root)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize


def _ensure_dir(path: str, root: str, rel: str) -> None:
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
