"""The planner: (manifest, cache state, filesystem, role, policy) -> Plan.

PURE: no disk, no network, no clock. Every row of spec/behavior.md §8 and
§9.3 is a unit test of this module.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmkube_stager.errors import Reason
from llmkube_stager.model import (
    Action,
    CacheState,
    Decision,
    FsInfo,
    LocalFile,
    LocalState,
    Manifest,
    Plan,
    Role,
)


@dataclass(frozen=True)
class Permission:
    """Whether this pod may write the cache, and if not, why (spec §9.3)."""

    may_write: bool
    refusal: Reason | None = None
    why: str = ""


def write_permission(fs: FsInfo, role: Role) -> Permission:
    if fs.read_only:
        return Permission(False, Reason.CACHE_UNWRITABLE, "the cache volume is mounted read-only")
    if fs.is_fuse and role == "serving":
        # A serving pod on FUSE writes nothing at all: flock does not exclude
        # across nodes there (#2158, #2254; seed-000).
        return Permission(
            False,
            Reason.CACHE_LOCK_UNSUPPORTED,
            "FUSE cache cannot guarantee cross-node file locking",
        )
    return Permission(True)


def make_plan(manifest: Manifest, cache: CacheState, fs: FsInfo, role: Role) -> Plan:
    """IfNotPresent: a present file is judged only by its own size record, never
    by the origin (spec §8.1 first column, §8.3, §8.4)."""
    permission = write_permission(fs, role)
    actions = tuple(_decide(cache.files[f.rel], permission) for f in manifest.files)
    warnings = tuple(
        f"no valid size record for {a.rel}; completeness cannot be proven until a stager "
        "backfills it"
        for a in actions
        if a.decision is Decision.KEEP and not a.backfill_record
    )
    return Plan(actions=actions, may_write=permission.may_write, warnings=warnings)


def _decide(local: LocalFile, permission: Permission) -> Action:
    state = local.state
    if state is LocalState.COMPLETE:
        return Action(local.rel, Decision.REUSE, "size matches its size record")
    if state is LocalState.LEGACY:
        # Legacy caches (before #2185) are kept without contacting the origin;
        # the record is backfilled where this pod may write (§6.2, scenario 44).
        return Action(
            local.rel,
            Decision.KEEP,
            "present without a valid size record; kept as-is",
            backfill_record=permission.may_write,
        )
    if state is LocalState.NOT_A_FILE:
        return Action(
            local.rel,
            Decision.REFUSE,
            "the destination exists but is not a regular file",
            refusal=Reason.CACHE_UNWRITABLE,
        )
    decision, why = _transfer_decision(local)
    if not permission.may_write:
        return Action(
            local.rel, Decision.REFUSE, f"{why}; {permission.why}", refusal=permission.refusal
        )
    return Action(local.rel, decision, why)


def _transfer_decision(local: LocalFile) -> tuple[Decision, str]:
    if local.state is LocalState.MISMATCH:
        return (
            Decision.REPAIR,
            f"size {local.size_bytes} differs from its size record {local.record_bytes}",
        )
    return Decision.FETCH, "not in the cache"


def refused(plan: Plan) -> Action | None:
    """The first refused action, if any: the run fails before any transfer."""
    return next((a for a in plan.actions if a.decision is Decision.REFUSE), None)
