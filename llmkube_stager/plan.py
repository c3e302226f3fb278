"""The planner: (manifest, cache state, filesystem, role, policy, probes) -> Plan.

PURE: no disk, no network, no clock. Every row of spec/behavior.md §8.1-§8.3
and §9.3 is a unit test of this module.

IfNotPresent judges a present file only by its own checks (size record, pin),
never by the origin (§8.1 first column). OnChange asks the origin (`Remote`)
and never goes down because the origin is unreachable: a copy that passes its
local checks is kept (§8.4 item 4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from llmkube_stager import messages
from llmkube_stager.config import RefreshPolicy
from llmkube_stager.errors import (
    REMEDY_LEADS_OUTSIDE,
    REMEDY_OTHER_HF_SOURCE,
    REMEDY_OTHER_SOURCE,
    REMEDY_UNREADABLE,
    ConfigError,
    Reason,
)
from llmkube_stager.logs import display_url
from llmkube_stager.model import (
    Action,
    CacheState,
    Decision,
    FsInfo,
    LocalFile,
    LocalState,
    Manifest,
    PinState,
    Plan,
    Remote,
    Role,
    Strategy,
)


def strategy_for(fs: FsInfo, role: Role, direct_io: bool = True) -> Strategy:
    """Whether this pod may write the cache and how (spec §9.3). `direct_io`
    is the user's LLMKUBE_DIRECT_IO (auto: where the filesystem allows)."""
    if fs.read_only:
        return Strategy(
            False,
            Reason.CACHE_UNWRITABLE,
            "the cache volume is mounted read-only",
            messages.READ_ONLY_WHY,
        )
    if fs.is_fuse and role == "serving":
        # A serving pod on FUSE writes nothing at all: flock does not exclude
        # across nodes there (LLMKube #2158, #2254; seed-000).
        return Strategy(
            False,
            Reason.CACHE_LOCK_UNSUPPORTED,
            "FUSE cache cannot guarantee cross-node file locking",
            messages.FUSE_READER_WHY,
        )
    return Strategy(
        True,
        take_lock=fs.is_fuse is not True,
        lock_excludes=fs.is_fuse is False,
        direct_io=direct_io and fs.direct_io_ok,
    )


@dataclass(frozen=True)
class _Ctx:
    multi: bool
    cached: bool  # a cache path (PVC), not an emptyDir: wording only
    permission: Strategy
    kind: str = "http"


def probes_needed(manifest: Manifest, cache: CacheState, policy: RefreshPolicy) -> tuple[str, ...]:
    """OnChange asks the origin about present files; a marker for the pinned
    digest already answers (0 requests, spec §5.3 item 9)."""
    if policy != "OnChange":
        return ()
    return tuple(
        f.rel
        for f in manifest.files
        if cache.files[f.rel].present and not cache.files[f.rel].marker
    )


def make_plan(
    manifest: Manifest,
    cache: CacheState,
    fs: FsInfo,
    role: Role,
    policy: RefreshPolicy = "IfNotPresent",
    remote: Mapping[str, Remote] | None = None,
    cached: bool = True,
) -> Plan:
    ctx = _Ctx(manifest.multi_file, cached, strategy_for(fs, role), manifest.kind)
    probes = remote or {}
    actions = tuple(
        _decide(ctx, cache.files[f.rel], policy, probes.get(f.rel), f.sha256)
        for f in manifest.files
    )
    invalid = tuple(
        f"{local.detail}; treated as absent"
        for local in (cache.files[f.rel] for f in manifest.files)
        if local.state is LocalState.LEGACY and local.detail
    )
    warnings = invalid + tuple(
        f"no valid size record for {a.rel}; completeness cannot be proven until a stager "
        "backfills it"
        for a, f in zip(actions, manifest.files, strict=True)
        if _unproven(a, cache.files[f.rel], policy)
    )
    return Plan(actions=actions, may_write=ctx.permission.may_write, warnings=warnings)


def _unproven(action: Action, local: LocalFile, policy: RefreshPolicy) -> bool:
    """A copy kept on no evidence: no record, no pin, no origin answer. Under
    OnChange the warning stays even when the record is backfilled (scenario
    30: "kept with a warning"); IfNotPresent backfills silently (scenario 44)."""
    if not local.present or local.record_bytes is not None or local.pin is not PinState.UNPINNED:
        return False
    if action.decision is Decision.KEEP and policy == "OnChange":
        return True
    return action.decision in (Decision.KEEP, Decision.REUSE) and not action.backfill_record


def _decide(
    ctx: _Ctx,
    local: LocalFile,
    policy: RefreshPolicy,
    remote: Remote | None,
    pin: str | None = None,
) -> Action:
    if local.marker and not local.usable:
        return _marker_failure(ctx, local, pin or "<digest>")
    if local.state in (LocalState.NOT_A_FILE, LocalState.UNREADABLE):
        return _cannot_judge(local)
    if policy == "OnChange":
        return _on_change(ctx, local, remote)
    if local.usable:
        legacy = local.state is LocalState.LEGACY and local.pin is PinState.UNPINNED
        decision = Decision.KEEP if legacy else Decision.REUSE
        return _accept(
            ctx, local, decision, messages.hit(ctx.multi, local.rel, ctx.cached, ctx.kind)
        )
    return _transfer(ctx, local, Decision.REPAIR if local.present else Decision.FETCH)


def _cannot_judge(local: LocalFile) -> Action:
    """Not a regular file inside the model directory, or not readable by
    this uid: nothing of it is read through, replaced or overwritten (#11)."""
    if local.state is LocalState.UNREADABLE:
        return Action(
            local.rel,
            Decision.FAIL,
            f"{local.detail}: the copy cannot be judged, and what this uid cannot read "
            "is never replaced",
            failure=Reason.CACHE_UNWRITABLE,
            remedy=REMEDY_UNREADABLE,
        )
    detail = f" ({local.detail})" if local.detail else ""
    return Action(
        local.rel,
        Decision.FAIL,
        f"the destination exists but is not a regular file{detail}",
        failure=Reason.CACHE_UNWRITABLE,
        remedy=REMEDY_LEADS_OUTSIDE,
    )


def _repair_failure(local: LocalFile) -> Reason:
    """What a failed repair reports: the pin, or the size record, not met."""
    if local.pin is PinState.MISMATCH:
        return Reason.CHECKSUM_MISMATCH
    return Reason.CACHE_TRUNCATED


def _accept(ctx: _Ctx, local: LocalFile, decision: Decision, message: str) -> Action:
    """Keep a usable copy; backfill a missing or stale record and the stamp
    where this pod may write (legacy caches, scenario 44/52)."""
    may_write = ctx.permission.may_write
    return Action(
        local.rel,
        decision,
        _accept_why(local),
        message,
        backfill_record=may_write and local.record_stale,
        write_stamp=may_write and local.pin is PinState.HASHED,
    )


def _accept_why(local: LocalFile) -> str:
    if local.pin is PinState.STAMP_HIT:
        # spec §7: "stamp hit" in the output, on its own line (the hit line is exact).
        return "matches its sha256 pin (stamp hit: same size and mtime, not read again)"
    if local.pin is PinState.HASHED:
        return f"matches its sha256 pin ({local.pin.value})"
    if local.record_bytes is None:
        return "present without a valid size record; kept as-is"
    return "size matches its size record"


def _transfer(ctx: _Ctx, local: LocalFile, decision: Decision) -> Action:
    why = _bad_why(local) if local.present else "not in the cache"
    if not ctx.permission.may_write:
        return Action(
            local.rel,
            Decision.FAIL,
            f"{why}; {ctx.permission.why}",
            failure=ctx.permission.refusal,
        )
    failure = _repair_failure(local) if decision is Decision.REPAIR else None
    return Action(local.rel, decision, why, failure=failure)


def _bad_why(local: LocalFile) -> str:
    if local.pin is PinState.MISMATCH:
        return "does not match its sha256 pin"
    return f"size {local.size_bytes} differs from its size record {local.record_bytes}"


def _marker_failure(ctx: _Ctx, local: LocalFile, pin: str) -> Action:
    """The origin already served bytes that failed this pin: do not fetch
    them again (spec §7: the marker bounds re-download loops)."""
    field = messages.pin_field(ctx.multi)
    return Action(
        local.rel,
        Decision.FAIL,
        f"{field} mismatch for {local.rel} was recorded earlier; delete "
        f"{local.rel}.{pin}.sha256-rejected to retry",
        failure=Reason.CHECKSUM_MISMATCH,
    )


def _on_change(ctx: _Ctx, local: LocalFile, remote: Remote | None) -> Action:
    multi, rel = ctx.multi, local.rel
    if not local.present:
        return _transfer(ctx, local, Decision.FETCH)
    if local.marker:  # usable, else _marker_failure ran
        return _accept(ctx, local, Decision.KEEP, messages.pinned_kept(multi, rel))
    probe = remote if remote is not None else Remote(answered=False)
    same_size = probe.size_bytes is not None and probe.size_bytes == local.size_bytes
    if local.usable:
        if _same_version(local, probe, same_size):
            return _unchanged(ctx, local, probe)
        return _changed_or_unknown(ctx, local, probe)
    same = _same_version(local, probe, same_size)
    if same and local.pin is PinState.UNPINNED and ctx.permission.may_write:
        # The record is stale, the origin confirms the size (§8.1 row 3); a
        # pod that may not write refuses instead (§8.2: fails local checks).
        return _unchanged(ctx, local, probe)
    if ctx.permission.may_write and not probe.answered:
        return Action(
            rel,
            Decision.FAIL,
            f"{_bad_why(local)} and the origin is unreachable ({probe.detail or 'no answer'})",
            failure=_repair_failure(local),
        )
    return _transfer(ctx, local, Decision.REPAIR)


def _same_version(local: LocalFile, probe: Remote, same_size: bool) -> bool:
    """With a recorded validator, a same-size change is a change: a
    fine-tune of the base model's shape over http(s) (#46 item 1), an HF
    config.json next to a re-sized shard (mixing it would mix revisions,
    §8.5). Without one on either side, the size decides, as in the scripts
    (a cache they left is judged by their rule)."""
    if probe.validator and local.validator:
        return probe.validator == local.validator and same_size
    return same_size


def _unchanged(ctx: _Ctx, local: LocalFile, probe: Remote) -> Action:
    """The scripts' line, and beside it, when the size alone decided, why
    nothing else could (#46 item 1: a person must see how little
    "unchanged" proved)."""
    action = _accept(ctx, local, Decision.REUSE, messages.unchanged(ctx.multi, local.rel))
    if probe.validator and local.validator:
        return action
    if not probe.validator:
        why = "the origin sends no strong ETag or Last-Modified for it"
    else:
        why = (
            "no validator was recorded when it was staged (by the scripts, or an agent "
            "before validators were recorded); a same-size change cannot be seen until "
            "it is staged again"
        )
    note = f"{local.rel} revalidated by its size only: {why}"
    return replace(action, note=note)


def _changed_or_unknown(ctx: _Ctx, local: LocalFile, probe: Remote) -> Action:
    multi, rel = ctx.multi, local.rel
    if not ctx.permission.may_write:
        if probe.answered:
            text = messages.reader_kept(rel, ctx.permission.keep_why, probe.size_bytes is not None)
        else:
            text = messages.unreachable_kept(multi, rel)
        return _accept(ctx, local, Decision.KEEP, text)
    if not probe.answered:
        return _accept(ctx, local, Decision.KEEP, messages.unreachable_kept(multi, rel))
    why = (
        f"upstream size {probe.size_bytes} differs from the cached {local.size_bytes}"
        if probe.size_bytes is not None
        else "upstream size unknown"
    )
    return Action(rel, Decision.REFRESH, why)


def failed(plan: Plan) -> Action | None:
    """The first failing action, if any: the run fails before any transfer."""
    return next((a for a in plan.actions if a.decision is Decision.FAIL), None)


def model_source_id(source: str) -> str:
    """The source as a cache directory records it (#46 item 2): as the log
    shows it, without userinfo, query or fragment, so that no credential is
    written, and a rotated token or a newly presigned URL of the same file
    is the same source."""
    return display_url(source.strip())


def source_refusal(
    root: str,
    recorded: str,
    current: str,
    *,
    any_present: bool,
    all_pinned: bool,
    hub: bool = False,
) -> ConfigError | None:
    """A directory holds one source's model (#46 item 2): the operator
    derives one per source, but a Job, KServe's local cache or a person may
    reuse one for another source, and every check of a file by its size
    record, its size or even its validator then calls the old model this
    one. Refused unless nothing of it is there, nothing was recorded (the
    scripts' directories: judged as before), or every file is pinned (the
    pins prove the bytes, whichever URL serves them). `hub`: a source with
    digests a hub declares, which OnChange can prove the files by."""
    if not (recorded and current) or recorded == current or not any_present or all_pinned:
        return None
    return ConfigError(
        f"the cache directory {root} holds the model staged from {recorded}, "
        f"not from MODEL_SOURCE {current}",
        remedy=REMEDY_OTHER_HF_SOURCE if hub else REMEDY_OTHER_SOURCE,
    )
