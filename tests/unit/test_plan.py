"""plan.make_plan: the IfNotPresent decision tables (spec §6.2, §8.1-§8.3, §9.3).

Every test builds FsInfo / CacheState / Manifest values directly
(tests/harness/plan_inputs.py): the planner is pure, so each table row is one
call.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmkube_stager.errors import Reason
from llmkube_stager.model import Decision, FsInfo, LocalState, Plan, Role
from llmkube_stager.plan import failed, strategy_for
from tests.harness.plan_inputs import EXT4, FUSE, READ_ONLY, UNKNOWN, local_file, plan_of

MISSING = LocalState.MISSING
COMPLETE = LocalState.COMPLETE
MISMATCH = LocalState.MISMATCH
LEGACY = LocalState.LEGACY
NOT_A_FILE = LocalState.NOT_A_FILE


def plan_for(states: dict[str, LocalState], fs: FsInfo = EXT4, role: Role = "serving") -> Plan:
    return plan_of(*(local_file(state, rel) for rel, state in states.items()), fs=fs, role=role)


def only(plan: Plan) -> tuple[Decision, bool, Reason | None]:
    (action,) = plan.actions
    return action.decision, action.backfill_record, action.failure


# --- §8.1 / §6.2, off FUSE (or FUSE stager), IfNotPresent ----------------------------------------


def test_missing_is_fetched() -> None:
    plan = plan_for({"model.safetensors": MISSING})
    assert only(plan) == (Decision.FETCH, False, None)
    assert plan.needs_network is True
    assert plan.writes is True
    assert plan.may_write is True
    assert failed(plan) is None


def test_complete_record_equals_size_is_reused_with_zero_network() -> None:
    plan = plan_for({"config.json": COMPLETE, "model.safetensors": COMPLETE})
    assert [a.decision for a in plan.actions] == [Decision.REUSE, Decision.REUSE]
    assert plan.needs_network is False
    assert plan.writes is False
    assert plan.warnings == ()
    assert failed(plan) is None


def test_record_differs_from_size_is_repaired() -> None:
    plan = plan_for({"model.safetensors": MISMATCH})
    decision, _, failure = only(plan)
    assert decision is Decision.REPAIR
    # What the run reports if the repair cannot be done now (CONTRACT §5).
    assert failure is Reason.CACHE_TRUNCATED
    assert plan.needs_network is True
    assert plan.writes is True
    assert "5" in plan.actions[0].why and "23" in plan.actions[0].why


def test_scenario_44_legacy_without_record_is_kept_and_backfilled_with_zero_network() -> None:
    # Also scenario 33: the origin's size does not matter, it is never asked.
    plan = plan_for({"model.safetensors": LEGACY})
    assert only(plan) == (Decision.KEEP, True, None)
    assert plan.needs_network is False
    assert plan.writes is True  # the backfilled record
    assert plan.warnings == ()


def test_legacy_on_unknown_fs_is_backfilled_like_non_fuse() -> None:
    plan = plan_for({"model.safetensors": LEGACY}, fs=UNKNOWN)
    assert only(plan) == (Decision.KEEP, True, None)


# --- §8.2 / §9.3, FUSE serving pod ---------------------------------------------------------------


def test_scenario_48_fuse_serving_legacy_is_kept_without_backfill_and_warns() -> None:
    plan = plan_for({"model.safetensors": LEGACY}, fs=FUSE, role="serving")
    assert only(plan) == (Decision.KEEP, False, None)
    assert plan.may_write is False
    assert plan.writes is False
    assert plan.needs_network is False
    assert len(plan.warnings) == 1
    assert "no valid size record" in plan.warnings[0]
    assert "model.safetensors" in plan.warnings[0]


def test_scenario_25_fuse_serving_warm_cache_reuses_and_writes_nothing() -> None:
    plan = plan_for({"config.json": COMPLETE, "model.safetensors": COMPLETE}, fs=FUSE)
    assert {a.decision for a in plan.actions} == {Decision.REUSE}
    assert plan.may_write is False
    assert plan.writes is False
    assert plan.needs_network is False
    assert failed(plan) is None


def test_scenario_26_fuse_serving_missing_is_refused_lock_unsupported() -> None:
    plan = plan_for({"model.safetensors": MISSING}, fs=FUSE, role="serving")
    decision, backfill, failure = only(plan)
    assert decision is Decision.FAIL
    assert failure is Reason.CACHE_LOCK_UNSUPPORTED
    assert backfill is False
    assert plan.needs_network is False
    assert plan.writes is False
    assert "cross-node file locking" in plan.actions[0].why


def test_scenario_26_fuse_stager_missing_is_fetched() -> None:
    plan = plan_for({"model.safetensors": MISSING}, fs=FUSE, role="stager")
    assert only(plan) == (Decision.FETCH, False, None)
    assert plan.may_write is True


def test_fuse_serving_record_mismatch_is_failed() -> None:
    plan = plan_for({"model.safetensors": MISMATCH}, fs=FUSE, role="serving")
    decision, _, failure = only(plan)
    assert decision is Decision.FAIL
    assert failure is Reason.CACHE_LOCK_UNSUPPORTED
    assert plan.needs_network is False


def test_fuse_stager_record_mismatch_is_repaired() -> None:
    plan = plan_for({"model.safetensors": MISMATCH}, fs=FUSE, role="stager")
    assert only(plan) == (Decision.REPAIR, False, Reason.CACHE_TRUNCATED)


def test_scenario_52_fuse_stager_backfills_a_legacy_record() -> None:
    plan = plan_for({"model.safetensors": LEGACY}, fs=FUSE, role="stager")
    assert only(plan) == (Decision.KEEP, True, None)
    assert plan.warnings == ()


# --- unknown filesystem (is_fuse None) behaves like non-FUSE -------------------------------------


@pytest.mark.parametrize("state", [MISSING, COMPLETE, MISMATCH, LEGACY, NOT_A_FILE])
@pytest.mark.parametrize("role", ["serving", "stager"])
def test_unknown_fs_behaves_like_non_fuse(state: LocalState, role: Role) -> None:
    on_unknown = plan_for({"m.bin": state}, fs=UNKNOWN, role=role)
    on_ext4 = plan_for({"m.bin": state}, fs=EXT4, role=role)
    assert on_unknown == on_ext4


# --- read-only cache -----------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["serving", "stager"])
def test_read_only_missing_is_refused_unwritable(role: Role) -> None:
    plan = plan_for({"model.safetensors": MISSING}, fs=READ_ONLY, role=role)
    decision, _, failure = only(plan)
    assert decision is Decision.FAIL
    assert failure is Reason.CACHE_UNWRITABLE
    assert "read-only" in plan.actions[0].why


def test_read_only_mismatch_is_refused_unwritable() -> None:
    plan = plan_for({"model.safetensors": MISMATCH}, fs=READ_ONLY)
    assert only(plan)[2] is Reason.CACHE_UNWRITABLE


def test_read_only_legacy_is_kept_without_backfill_and_warns() -> None:
    plan = plan_for({"model.safetensors": LEGACY}, fs=READ_ONLY)
    assert only(plan) == (Decision.KEEP, False, None)
    assert plan.writes is False
    assert any("no valid size record" in w for w in plan.warnings)


def test_scenario_5_read_only_warm_cache_starts_offline() -> None:
    plan = plan_for({"a.json": COMPLETE, "b.bin": COMPLETE}, fs=READ_ONLY)
    assert failed(plan) is None
    assert plan.needs_network is False
    assert plan.writes is False
    assert plan.may_write is False


# --- not a regular file --------------------------------------------------------------------------


@pytest.mark.parametrize("fs", [EXT4, FUSE, UNKNOWN, READ_ONLY], ids=["ext4", "fuse", "?", "ro"])
@pytest.mark.parametrize("role", ["serving", "stager"])
def test_not_a_file_is_failed(fs: FsInfo, role: Role) -> None:
    plan = plan_for({"model.safetensors": NOT_A_FILE}, fs=fs, role=role)
    decision, backfill, failure = only(plan)
    assert decision is Decision.FAIL
    assert failure is Reason.CACHE_UNWRITABLE
    assert backfill is False
    assert plan.needs_network is False


# --- §8.3 single-file ----------------------------------------------------------------------------


@pytest.mark.parametrize("fs", [EXT4, FUSE, READ_ONLY, UNKNOWN], ids=["ext4", "fuse", "ro", "?"])
@pytest.mark.parametrize("role", ["serving", "stager"])
def test_single_file_present_starts_with_zero_requests_on_any_fs(fs: FsInfo, role: Role) -> None:
    for state in (COMPLETE, LEGACY):
        plan = plan_for({"model.gguf": state}, fs=fs, role=role)
        assert failed(plan) is None
        assert plan.needs_network is False
        assert plan.actions[0].decision in (Decision.REUSE, Decision.KEEP)


# --- failed(), writes, ordering -----------------------------------------------------------------


def test_failed_returns_the_first_failure() -> None:
    plan = plan_for(
        {
            "config.json": COMPLETE,
            "tokenizer.json": MISSING,
            "model.safetensors": MISMATCH,
        },
        fs=FUSE,
    )
    first = failed(plan)
    assert first is not None
    assert first.rel == "tokenizer.json"
    assert first.failure is Reason.CACHE_LOCK_UNSUPPORTED


def test_failed_is_none_without_failures() -> None:
    assert failed(plan_for({"a": COMPLETE, "b": LEGACY, "c": MISSING})) is None


def test_actions_follow_manifest_order() -> None:
    rels = ["model-00002.safetensors", "config.json", "sub/tok.json", "model-00001.safetensors"]
    plan = plan_for(dict.fromkeys(rels, COMPLETE))
    assert [a.rel for a in plan.actions] == rels


@pytest.mark.parametrize(
    ("states", "writes"),
    [
        ({"a": COMPLETE}, False),
        ({"a": COMPLETE, "b": LEGACY}, True),
        ({"a": COMPLETE, "b": MISSING}, True),
        ({"a": COMPLETE, "b": MISMATCH}, True),
    ],
)
def test_plan_writes(states: dict[str, LocalState], writes: bool) -> None:
    assert plan_for(states).writes is writes


def test_mixed_plan_fetches_only_what_is_missing() -> None:
    plan = plan_for({"config.json": COMPLETE, "a.bin": LEGACY, "b.bin": MISSING, "c.bin": MISMATCH})
    assert [(a.rel, a.decision, a.transfers) for a in plan.actions] == [
        ("config.json", Decision.REUSE, False),
        ("a.bin", Decision.KEEP, False),
        ("b.bin", Decision.FETCH, True),
        ("c.bin", Decision.REPAIR, True),
    ]


# --- strategy_for (§9.3 matrix): every filesystem decision, made once ------------------------


@pytest.mark.parametrize(
    ("fs", "role", "may_write", "refusal", "take_lock", "lock_excludes"),
    [
        (EXT4, "serving", True, None, True, True),
        (EXT4, "stager", True, None, True, True),
        # Unknown type: the previous behavior, the lock (spec §16 item 3).
        (UNKNOWN, "serving", True, None, True, False),
        (UNKNOWN, "stager", True, None, True, False),
        (FUSE, "serving", False, Reason.CACHE_LOCK_UNSUPPORTED, False, False),
        (FUSE, "stager", True, None, False, False),
        (READ_ONLY, "serving", False, Reason.CACHE_UNWRITABLE, False, False),
        (READ_ONLY, "stager", False, Reason.CACHE_UNWRITABLE, False, False),
    ],
    ids=[
        "ext4-serving",
        "ext4-stager",
        "unknown-serving",
        "unknown-stager",
        "fuse-serving",
        "fuse-stager",
        "ro-serving",
        "ro-stager",
    ],
)
def test_strategy(
    fs: FsInfo,
    role: Role,
    may_write: bool,
    refusal: Reason | None,
    take_lock: bool,
    lock_excludes: bool,
) -> None:
    strategy = strategy_for(fs, role)
    assert strategy.may_write is may_write
    assert strategy.refusal is refusal
    assert bool(strategy.why) is not may_write
    assert strategy.take_lock is take_lock
    assert strategy.lock_excludes is lock_excludes


@pytest.mark.parametrize(
    ("direct_io_ok", "wanted", "direct"),
    [(True, True, True), (True, False, False), (False, True, False)],
)
def test_direct_io_needs_the_filesystem_and_the_setting(
    direct_io_ok: bool, wanted: bool, direct: bool
) -> None:
    fs = replace(EXT4, direct_io_ok=direct_io_ok)
    assert strategy_for(fs, "stager", wanted).direct_io is direct


# --- the old scripts' log lines (spec §13) -------------------------------------------------------


def test_hit_lines_multi_and_single_file() -> None:
    multi = plan_for({"config.json": COMPLETE, "model.safetensors": LEGACY})
    assert [a.message for a in multi.actions] == [
        "Model artifact config.json already cached, skipping download",
        "Model artifact model.safetensors already cached, skipping download",
    ]
    single = plan_for({"model.gguf": COMPLETE})
    assert single.actions[0].message == "Model already cached, skipping download"
