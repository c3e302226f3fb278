"""Everything up to the plan, with local reads only: the source and its
manifest, the filesystem probed once, the cache and its run record read,
the plan made. It is all `plan` does (its dry run), and the first half of
`stage` (staging/run.py), which makes the plan again whenever what it was
made from may have changed (under the writer lock, after revalidation),
and checks it for a file that cannot be staged before anything is written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from llmkube_stager.acting.executor import Work
from llmkube_stager.cache.runrecord import RunRecord, read_run_record
from llmkube_stager.cache.state import read_cache_state
from llmkube_stager.config import Config
from llmkube_stager.errors import CacheError, Reason, StagerError, TransferError, from_source
from llmkube_stager.logs import Log
from llmkube_stager.model import (
    Action,
    CacheState,
    FsInfo,
    Manifest,
    Plan,
    Remote,
    Role,
    Strategy,
)
from llmkube_stager.plan import (
    failed,
    make_plan,
    model_source_id,
    source_refusal,
    strategy_for,
)
from llmkube_stager.schemes import has_commits
from llmkube_stager.sources import open_source
from llmkube_stager.sources.base import ListingSource, Source
from llmkube_stager.staging.mode import WHOLE_MODEL, RunMode


@dataclass(frozen=True)
class Effects:
    log: Log
    probe_fs: Callable[[str], FsInfo]
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    # False for `plan` without `--probe`: no connection to the source at all
    # (CONTRACT §2); what only it could say is left unknown (`Prepared.unknown`).
    ask_source: bool = True


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
    # What the writers of the model directory recorded (cache/runrecord.py).
    record: RunRecord = field(default_factory=RunRecord)
    remote: Mapping[str, Remote] = field(default_factory=dict)
    # OnChange: the validators present files were verified to have (or
    # "unverified"), in place of a missing record (#10 defect 12).
    checked: Mapping[str, str] = field(default_factory=dict)
    # The whole model, or one share of a sharded prefetch (#32 item 3,
    # staging/mode.py): chosen once by the run; `plan` plans the whole model.
    mode: RunMode = WHOLE_MODEL
    # #46 item 2: the source the directory recorded, where it is not this
    # run's and OnChange proves each file by the hub's digests instead.
    other_source: str = ""
    # What the plan could not know without asking the source (`plan`
    # without `--probe`): the files of a listing never recorded, or whether
    # a recorded one still stands. Empty: nothing was left unknown.
    unknown: tuple[str, ...] = ()


def role_of(config: Config) -> Role:
    return "stager" if config.prefetch_stager else "serving"


def prepare(config: Config, effects: Effects) -> Prepared:
    started = effects.monotonic()
    source = open_source(config, effects.log)
    with from_source(source.kind):
        manifest, unknown = _manifest(config, source, effects)
    fs = effects.probe_fs(manifest.root)
    if fs.is_fuse is None:
        effects.log.warning(
            "fs_unknown",
            "cannot determine the cache filesystem type; treating it as one where flock works",
            path=fs.path,
        )
    role = role_of(config)
    strategy = strategy_for(fs, role, config.direct_io)
    prepared = Prepared(
        source, manifest, fs, role, CacheState(False), Plan((), False), strategy, unknown=unknown
    )
    prepared = replan(config, replace(prepared, started_s=started))
    return _another_source(config, prepared, effects.log)


def _another_source(config: Config, prepared: Prepared, log: Log) -> Prepared:
    """Before any probe, lock or write, for `stage` (OnChange too) and
    `plan` alike (#46 item 2, plan.source_refusal): files of another
    source are refused; but a Hugging Face writer under OnChange asks the
    hub for every file anyway, and its digests (LFS sha256, git blob id)
    prove each file by its bytes: no recorded validator is trusted, what
    is not proven is fetched (staging/onchange.py `_check_unrecorded`)."""
    manifest, files = prepared.manifest, prepared.cache.files.values()
    hub = has_commits(manifest.kind)
    recorded = prepared.record.source
    refusal = source_refusal(
        manifest.root,
        recorded,
        model_source_id(config.source),
        any_present=any(local.present for local in files),
        all_pinned=all(f.sha256 for f in manifest.files),
        hub=hub,
    )
    if refusal is None:
        return prepared
    if not (hub and config.refresh_policy == "OnChange" and prepared.strategy.may_write):
        raise refusal
    log.warning(
        "other_source",
        f"the cache directory holds files staged from {recorded}: each is kept only where "
        "proven by the hub's digests to be the file of MODEL_SOURCE, the rest fetched",
    )
    return replan(config, replace(prepared, other_source=recorded))


def _manifest(config: Config, source: Source, effects: Effects) -> tuple[Manifest, tuple[str, ...]]:
    """A source without MODEL_FILES lists its files (#24 item 5,
    staging/listed.py); what the manifest could not know unasked, with it.
    Only a listing asks the source here: a named file's manifest is the
    configuration's."""
    if not (isinstance(source, ListingSource) and source.lists):
        return source.manifest(), ()
    from llmkube_stager.staging.listed import NotAsked, asking, listed_manifest, refusing

    what = f"the files of {source.listing_source}"
    retry = asking(config, effects.log, effects.sleep) if effects.ask_source else refusing(what)
    try:
        return listed_manifest(config, source, effects.log, retry)
    except NotAsked:
        # No listing recorded: no file is known, the plan has no row.
        nothing = Manifest(source.kind, config.cache_dir, (), True, source.listing_source)
        return nothing, (f"{what}: no listing of them is recorded in the cache",)


def replan(config: Config, prepared: Prepared) -> Prepared:
    """The cache and its record read again, the plan made again."""
    record = read_run_record(prepared.manifest.root)
    # A model the writers' entries refuse (#29 item 1, cache/writers.py): no
    # recorded validator says what a file holds; OnChange proves each by
    # its bytes (staging/onchange.py).
    # Nor where they are another source's (#46 item 2, `_another_source`).
    distrust = bool(record.mixed or prepared.other_source)
    cache = read_cache_state(prepared.manifest, {} if distrust else record.validators)
    if prepared.checked:
        files = {
            rel: replace(local, validator=prepared.checked.get(rel, local.validator))
            for rel, local in cache.files.items()
        }
        cache = replace(cache, files=files)
    plan = make_plan(
        prepared.mode.own(prepared.manifest),
        cache,
        prepared.fs,
        prepared.role,
        config.refresh_policy,
        prepared.remote,
        cached=bool(config.cache_dir),
    )
    return replace(prepared, cache=cache, record=record, plan=plan)


def verified(prepared: Prepared) -> frozenset[str]:
    """OnChange: the present files whose validator the origin confirmed."""
    return frozenset(
        rel
        for rel, remote in prepared.remote.items()
        if remote.validator and prepared.cache.files[rel].validator == remote.validator
    )


def work_of(prepared: Prepared) -> Work:
    """What the acting layer carries the plan out against."""
    return Work(
        prepared.manifest, prepared.source, prepared.cache, prepared.record, verified(prepared)
    )


def check_plan(prepared: Prepared, log: Log, *, warn: bool = True) -> None:
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
