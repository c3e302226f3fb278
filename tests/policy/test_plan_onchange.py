"""plan.make_plan / probes_needed under LLMKUBE_REFRESH_POLICY=OnChange: every
row of spec/behavior.md §8.1 (multi-file, writer), §8.2 (FUSE serving pod),
§8.3 (single-file) and the sha256-pin rows of §6.2/§6.3/§7.

Pure: Manifest, CacheState, FsInfo and Remote values in, a Plan out; no disk,
no network. Origin outcomes (§8 "Origin outcomes") map to `Remote` values as
the probe produces them: UP-same / UP-changed answer with a size; NOCL, CL0,
5xx and 429 answer without a usable size (the probe turns CL 0 into "unknown");
DOWN does not answer.
"""

from __future__ import annotations

from functools import partial

import pytest

from llmkube_stager.errors import Reason
from llmkube_stager.model import (
    Action,
    CacheState,
    Decision,
    FsInfo,
    LocalState,
    Manifest,
    PinState,
    Plan,
    Remote,
    RemoteFile,
    Role,
)
from llmkube_stager.plan import failed, make_plan, probes_needed
from tests.harness import plan_inputs
from tests.harness.plan_inputs import (
    BASE_URL,
    EXT4,
    FUSE,
    PIN,
    READ_ONLY,
    REL,
    ROOT,
    SIZE,
    UNKNOWN,
    cache_of,
    local_file,
    manifest_of,
)

# Origin outcomes as Remote values.
UP_SAME = Remote(answered=True, size_bytes=SIZE)
UP_CHANGED = Remote(answered=True, size_bytes=2 * SIZE)
NO_SIZE = Remote(answered=True, size_bytes=None, detail="no Content-Length / CL 0 / 5xx / 429")
DOWN = Remote(answered=False, detail="connection refused")
NO_SIZE_OUTCOMES = {"NOCL": NO_SIZE, "CL0": NO_SIZE, "5xx": NO_SIZE, "429": NO_SIZE}

MISSING = LocalState.MISSING
COMPLETE = LocalState.COMPLETE
MISMATCH = LocalState.MISMATCH
LEGACY = LocalState.LEGACY

UNCHANGED_LINE = f"Model artifact {REL} revalidated (unchanged, skipped download)"
UNREACHABLE_LINE = f"Revalidation unreachable for {REL}; kept cached copy"
FUSE_KEPT_LINE = (
    f"Upstream changed for {REL}; a serving pod does not stage on a FUSE cache, "
    "so it kept the cached copy"
)
PINNED_KEPT_LINE = (
    f"Model artifact {REL}: the origin served bytes that do not match the pinned "
    "spec.fileSha256; kept the pinned cached copy"
)


# This module's plans are OnChange's unless a test says otherwise.
plan_of = partial(plan_inputs.plan_of, policy="OnChange")


def one(
    state: LocalState,
    remote: Remote | None,
    *,
    fs: FsInfo = EXT4,
    role: Role = "serving",
    pin: PinState = PinState.UNPINNED,
    marker: bool = False,
    policy: str = "OnChange",
) -> tuple[Plan, Action]:
    lf = local_file(state, pin=pin, marker=marker)
    plan = plan_of(
        lf,
        remote=None if remote is None else {REL: remote},
        fs=fs,
        role=role,
        multi=True,
        policy=policy,
        pinned=pin is not PinState.UNPINNED,
    )
    (action,) = plan.actions
    return plan, action


# The pods of §8.1: a writer off FUSE, a FUSE stager, and an unknown filesystem
# (treated as one where flock works, spec §16 item 3).
WRITERS = [
    pytest.param(EXT4, "serving", id="ext4-serving"),
    pytest.param(EXT4, "stager", id="ext4-stager"),
    pytest.param(FUSE, "stager", id="fuse-stager"),
    pytest.param(UNKNOWN, "serving", id="unknown-fs"),
]


# --- probes_needed: who is asked ---


def test_probes_needed_if_not_present_asks_nobody() -> None:
    files = (
        local_file(COMPLETE, "a"),
        local_file(LEGACY, "b"),
        local_file(MISMATCH, "c"),
        local_file(MISSING, "d"),
    )
    cache = cache_of(files)
    assert probes_needed(manifest_of(*files), cache, "IfNotPresent") == ()


def test_probes_needed_on_change_asks_about_present_files_in_manifest_order() -> None:
    files = (
        local_file(LEGACY, "z-legacy"),
        local_file(MISSING, "a-missing"),
        local_file(COMPLETE, "m-complete"),
        local_file(MISMATCH, "b-truncated"),
        local_file(LocalState.NOT_A_FILE, "dir"),
    )
    cache = cache_of(files)
    assert probes_needed(manifest_of(*files), cache, "OnChange") == (
        "z-legacy",
        "m-complete",
        "b-truncated",
    )


def test_probes_needed_skips_a_file_whose_marker_already_answers() -> None:
    # spec §5.3 item 9: a marker for the pinned digest means 0 requests, HEAD included.
    kept = local_file(COMPLETE, "kept.bin", pin=PinState.STAMP_HIT, marker=True)
    bad = local_file(COMPLETE, "bad.bin", pin=PinState.MISMATCH, marker=True)
    asked = local_file(COMPLETE, "asked.bin", pin=PinState.STAMP_HIT)
    cache = cache_of((kept, bad, asked))
    assert probes_needed(manifest_of(kept, bad, asked, pinned=True), cache, "OnChange") == (
        "asked.bin",
    )


# --- §8.1 row "missing" ---


@pytest.mark.parametrize(("fs", "role"), WRITERS)
@pytest.mark.parametrize(
    "remote",
    [None, UP_CHANGED, NO_SIZE, DOWN],
    ids=["not-probed", "up", "no-size", "down"],
)
def test_8_1_missing_is_fetched_whatever_the_origin(
    fs: FsInfo, role: Role, remote: Remote | None
) -> None:
    plan, action = one(MISSING, remote, fs=fs, role=role)
    assert action.decision is Decision.FETCH
    assert action.transfers and plan.needs_network and plan.writes
    assert action.failure is None
    assert failed(plan) is None


# --- §8.1 row "present, record == size" ---


@pytest.mark.parametrize(("fs", "role"), WRITERS)
def test_8_1_complete_up_same_is_skipped_unchanged(fs: FsInfo, role: Role) -> None:
    plan, action = one(COMPLETE, UP_SAME, fs=fs, role=role)
    assert action.decision is Decision.REUSE
    assert action.message == UNCHANGED_LINE
    assert not action.transfers and not plan.writes and not plan.needs_network
    assert plan.warnings == ()


@pytest.mark.parametrize(("fs", "role"), WRITERS)
def test_8_1_complete_up_changed_is_refreshed(fs: FsInfo, role: Role) -> None:
    plan, action = one(COMPLETE, UP_CHANGED, fs=fs, role=role)
    # REFRESH: a failed transfer keeps the copy (unlike FETCH/REPAIR).
    assert action.decision is Decision.REFRESH
    assert str(2 * SIZE) in action.why and str(SIZE) in action.why
    assert plan.needs_network and plan.writes
    assert failed(plan) is None


@pytest.mark.parametrize(("fs", "role"), WRITERS)
@pytest.mark.parametrize("outcome", list(NO_SIZE_OUTCOMES))
def test_8_1_complete_no_usable_size_tries_the_get(fs: FsInfo, role: Role, outcome: str) -> None:
    # NOCL / CL0 / 5xx / 429: "unknown", never authoritative: try GET, keep on failure.
    plan, action = one(COMPLETE, NO_SIZE_OUTCOMES[outcome], fs=fs, role=role)
    assert action.decision is Decision.REFRESH
    assert "unknown" in action.why
    assert failed(plan) is None


@pytest.mark.parametrize(("fs", "role"), WRITERS)
@pytest.mark.parametrize("remote", [DOWN, None], ids=["down", "not-probed"])
def test_8_1_complete_origin_down_is_kept_offline(
    fs: FsInfo, role: Role, remote: Remote | None
) -> None:
    # §8.4 item 4: OnChange never goes down because the origin did.
    plan, action = one(COMPLETE, remote, fs=fs, role=role)
    assert action.decision is Decision.KEEP
    assert action.message == UNREACHABLE_LINE
    assert not action.transfers and not plan.needs_network and not plan.writes
    assert plan.warnings == ()  # scenario 29: kept with no warning
    assert failed(plan) is None


# --- §8.1 row "present, record != size (truncated)" ---


@pytest.mark.parametrize(("fs", "role"), WRITERS)
def test_8_1_truncated_origin_confirms_the_local_size_is_skipped(fs: FsInfo, role: Role) -> None:
    # "skip only if local size equals the origin's size"; the stale record is rewritten.
    plan, action = one(MISMATCH, Remote(answered=True, size_bytes=5), fs=fs, role=role)
    assert action.decision is Decision.REUSE
    assert action.message == UNCHANGED_LINE
    assert action.backfill_record is True
    assert plan.writes and not plan.needs_network
    assert not action.transfers


@pytest.mark.parametrize(("fs", "role"), WRITERS)
@pytest.mark.parametrize(
    "remote",
    [UP_CHANGED, Remote(answered=True, size_bytes=23), NO_SIZE],
    ids=["up-changed", "up-equals-record", "no-size"],
)
def test_8_1_truncated_origin_answering_is_repaired(fs: FsInfo, role: Role, remote: Remote) -> None:
    # scenario 31: origin up, truncated file -> repaired; a failed GET fails (REPAIR, not REFRESH).
    plan, action = one(MISMATCH, remote, fs=fs, role=role)
    assert action.decision is Decision.REPAIR
    assert "5" in action.why and "23" in action.why
    assert failed(plan) is None


@pytest.mark.parametrize(("fs", "role"), WRITERS)
@pytest.mark.parametrize("remote", [DOWN, None], ids=["down", "not-probed"])
def test_8_1_truncated_origin_down_fails_against_its_own_record(
    fs: FsInfo, role: Role, remote: Remote | None
) -> None:
    # scenario 28/46: a 5-byte file whose record says 23, offline -> FAIL.
    plan, action = one(MISMATCH, remote, fs=fs, role=role)
    assert action.decision is Decision.FAIL
    assert action.failure is Reason.CACHE_TRUNCATED
    assert failed(plan) == action
    assert not plan.needs_network


# --- §8.1 row "present, no valid record (legacy)" ---


@pytest.mark.parametrize(("fs", "role"), WRITERS)
def test_8_1_legacy_up_same_is_skipped_and_record_backfilled(fs: FsInfo, role: Role) -> None:
    plan, action = one(LEGACY, UP_SAME, fs=fs, role=role)
    assert action.decision is Decision.REUSE
    assert action.message == UNCHANGED_LINE
    assert action.backfill_record is True
    assert plan.warnings == ()
    assert not action.transfers


@pytest.mark.parametrize(("fs", "role"), WRITERS)
@pytest.mark.parametrize("remote", [UP_CHANGED, NO_SIZE], ids=["up-changed", "no-size"])
def test_8_1_legacy_changed_or_unknown_is_refreshed(fs: FsInfo, role: Role, remote: Remote) -> None:
    plan, action = one(LEGACY, remote, fs=fs, role=role)
    assert action.decision is Decision.REFRESH  # a failed GET keeps it
    assert failed(plan) is None


@pytest.mark.parametrize(("fs", "role"), WRITERS)
def test_8_1_legacy_origin_down_is_kept(fs: FsInfo, role: Role) -> None:
    plan, action = one(LEGACY, DOWN, fs=fs, role=role)
    assert action.decision is Decision.KEEP
    assert action.message == UNREACHABLE_LINE
    assert not action.transfers and not plan.needs_network
    assert failed(plan) is None


# --- unknown filesystem == ext4 for every OnChange row ---


@pytest.mark.parametrize("state", [MISSING, COMPLETE, MISMATCH, LEGACY])
@pytest.mark.parametrize(
    "remote",
    [UP_SAME, UP_CHANGED, NO_SIZE, DOWN, Remote(answered=True, size_bytes=5)],
    ids=["same", "changed", "no-size", "down", "size-5"],
)
@pytest.mark.parametrize("role", ["serving", "stager"])
def test_fuse_stager_and_unknown_fs_plan_like_ext4(
    state: LocalState, remote: Remote, role: Role
) -> None:
    ext4 = one(state, remote, fs=EXT4, role=role)[0]
    assert one(state, remote, fs=UNKNOWN, role=role)[0] == ext4
    assert one(state, remote, fs=FUSE, role="stager")[0] == ext4


# --- §8.2 FUSE serving pod ("FUSE reader") ---


@pytest.mark.parametrize(
    "remote", [UP_SAME, UP_CHANGED, NO_SIZE, DOWN], ids=["same", "changed", "no-size", "down"]
)
def test_8_2_fuse_reader_missing_is_refused(remote: Remote) -> None:
    plan, action = one(MISSING, remote, fs=FUSE)
    assert action.decision is Decision.FAIL
    assert action.failure is Reason.CACHE_LOCK_UNSUPPORTED
    assert "cross-node file locking" in action.why
    assert not plan.needs_network and not plan.writes


@pytest.mark.parametrize("state", [COMPLETE, LEGACY])
def test_8_2_fuse_reader_up_same_is_the_normal_unchanged_line(state: LocalState) -> None:
    plan, action = one(state, UP_SAME, fs=FUSE)
    assert action.decision is Decision.REUSE
    assert action.message == UNCHANGED_LINE
    assert action.backfill_record is False  # a FUSE reader writes nothing
    assert not plan.writes and not plan.needs_network


@pytest.mark.parametrize("state", [COMPLETE, LEGACY])
def test_8_2_fuse_reader_upstream_changed_keeps_without_calling_it_unreachable(
    state: LocalState,
) -> None:
    # scenarios 35, 51, 59: exit 0, one line, never "unreachable" for an answering origin.
    plan, action = one(state, UP_CHANGED, fs=FUSE)
    assert action.decision is Decision.KEEP
    assert action.message == FUSE_KEPT_LINE
    assert "unreachable" not in action.message.lower()
    assert not action.transfers and not plan.writes and not plan.needs_network
    assert failed(plan) is None


@pytest.mark.parametrize("state", [COMPLETE, LEGACY])
def test_8_2_fuse_reader_origin_down_keeps_with_the_unreachable_wording(state: LocalState) -> None:
    plan, action = one(state, DOWN, fs=FUSE)
    assert action.decision is Decision.KEEP
    assert action.message == UNREACHABLE_LINE
    assert not plan.writes and failed(plan) is None


@pytest.mark.parametrize("state", [COMPLETE, LEGACY])
def test_8_2_fuse_reader_origin_answered_without_size_keeps_and_is_not_unreachable(
    state: LocalState,
) -> None:
    # 5xx / NOCL: the origin answered, so the log must not say "unreachable" (brief, scenario 51).
    plan, action = one(state, NO_SIZE, fs=FUSE)
    assert action.decision is Decision.KEEP
    assert "unreachable" not in action.message.lower()
    assert REL in action.message
    assert action.message.endswith("so it kept the cached copy")
    assert not plan.writes and failed(plan) is None


@pytest.mark.parametrize(
    "remote", [UP_SAME, UP_CHANGED, NO_SIZE, DOWN], ids=["same", "changed", "no-size", "down"]
)
def test_8_2_fuse_reader_legacy_warns_and_never_backfills(remote: Remote) -> None:
    plan, action = one(LEGACY, remote, fs=FUSE)
    assert action.backfill_record is False
    assert len(plan.warnings) == 1 and "no valid size record" in plan.warnings[0]
    assert REL in plan.warnings[0]


@pytest.mark.parametrize(
    "remote",
    [
        UP_CHANGED,
        NO_SIZE,
        DOWN,
        None,
        # A reader cannot fix the stale record, so the origin's size alone does
        # not make it servable (a writer reuses it and rewrites the record,
        # §8.1 row 3).
        Remote(answered=True, size_bytes=5),
    ],
    ids=["changed", "no-size", "down", "not-probed", "origin-confirms-local-size"],
)
def test_8_2_fuse_reader_failing_local_checks_is_refused(remote: Remote | None) -> None:
    # §8.2 "present, fails local checks -> refusal exit 1", whatever the origin says.
    plan, action = one(MISMATCH, remote, fs=FUSE)
    assert action.decision is Decision.FAIL
    assert action.failure is Reason.CACHE_LOCK_UNSUPPORTED
    assert not plan.needs_network and not plan.writes


@pytest.mark.parametrize("remote", [UP_SAME, UP_CHANGED, DOWN], ids=["same", "changed", "down"])
def test_8_2_fuse_reader_digest_mismatch_is_refused(remote: Remote) -> None:
    plan, action = one(COMPLETE, remote, fs=FUSE, pin=PinState.MISMATCH)
    assert action.decision is Decision.FAIL
    assert action.failure is Reason.CACHE_LOCK_UNSUPPORTED
    assert not plan.needs_network


@pytest.mark.parametrize(
    ("state", "decision", "failure"),
    [
        (MISSING, Decision.FAIL, Reason.CACHE_LOCK_UNSUPPORTED),
        (COMPLETE, Decision.REUSE, None),
        (LEGACY, Decision.KEEP, None),
        (MISMATCH, Decision.FAIL, Reason.CACHE_LOCK_UNSUPPORTED),
    ],
)
def test_8_2_fuse_reader_if_not_present_column(
    state: LocalState, decision: Decision, failure: Reason | None
) -> None:
    plan, action = one(state, None, fs=FUSE, policy="IfNotPresent")
    assert (action.decision, action.failure) == (decision, failure)
    assert not plan.needs_network and not plan.writes


# --- read-only cache: like a FUSE reader, with its own wording ---


@pytest.mark.parametrize("role", ["serving", "stager"])
def test_read_only_cache_upstream_changed_keeps_with_its_own_reason(role: Role) -> None:
    plan, action = one(COMPLETE, UP_CHANGED, fs=READ_ONLY, role=role)
    assert action.decision is Decision.KEEP
    assert action.message == (
        f"Upstream changed for {REL}; the cache is read-only for this pod, "
        "so it kept the cached copy"
    )
    assert not plan.writes


@pytest.mark.parametrize("state", [MISSING, MISMATCH])
def test_read_only_cache_that_must_be_written_is_unwritable(state: LocalState) -> None:
    _, action = one(state, UP_CHANGED, fs=READ_ONLY)
    assert action.decision is Decision.FAIL
    assert action.failure is Reason.CACHE_UNWRITABLE


# --- §8.3 single-file ---


def single(
    state: LocalState, remote: Remote | None, fs: FsInfo = EXT4, role: Role = "serving"
) -> Action:
    lf = local_file(state, rel="model.gguf")
    plan = plan_of(
        lf, remote=None if remote is None else {"model.gguf": remote}, fs=fs, role=role, multi=False
    )
    return plan.actions[0]


def test_8_3_single_present_same_size_is_unchanged() -> None:
    action = single(COMPLETE, UP_SAME)
    assert action.decision is Decision.REUSE
    assert action.message == "Model revalidated (unchanged, skipped download)"


@pytest.mark.parametrize("remote", [UP_CHANGED, NO_SIZE], ids=["differs", "unknown"])
def test_8_3_single_present_size_differs_or_unknown_is_downloaded(remote: Remote) -> None:
    assert single(COMPLETE, remote).decision is Decision.REFRESH
    assert single(LEGACY, remote).decision is Decision.REFRESH


@pytest.mark.parametrize("state", [COMPLETE, LEGACY])
def test_8_3_single_present_origin_down_keeps_cached_copy(state: LocalState) -> None:
    action = single(state, DOWN)
    assert action.decision is Decision.KEEP
    assert action.message == "Revalidation unreachable; kept cached copy"


@pytest.mark.parametrize("remote", [UP_CHANGED, DOWN, None], ids=["up", "down", "not-probed"])
def test_8_3_single_missing_is_fetched_and_fails_if_the_get_fails(remote: Remote | None) -> None:
    # The executor turns a failed FETCH into `model missing and revalidation failed`.
    assert single(MISSING, remote).decision is Decision.FETCH


def test_8_3_single_truncated_offline_fails() -> None:
    action = single(MISMATCH, DOWN)
    assert action.decision is Decision.FAIL
    assert action.failure is Reason.CACHE_TRUNCATED


@pytest.mark.parametrize(
    ("state", "remote", "decision"),
    [
        (COMPLETE, UP_SAME, Decision.REUSE),
        (COMPLETE, UP_CHANGED, Decision.KEEP),
        (COMPLETE, DOWN, Decision.KEEP),
        (MISSING, UP_CHANGED, Decision.FAIL),
        (MISMATCH, UP_CHANGED, Decision.FAIL),
    ],
)
def test_8_3_single_fuse_reader_never_transfers(
    state: LocalState, remote: Remote, decision: Decision
) -> None:
    action = single(state, remote, fs=FUSE)
    assert action.decision is decision
    assert not action.transfers
    if decision is Decision.FAIL:
        assert action.failure is Reason.CACHE_LOCK_UNSUPPORTED
    if (state, remote) == (COMPLETE, UP_CHANGED):
        assert action.message == (
            "Upstream changed for model.gguf; a serving pod does not stage on a FUSE cache, "
            "so it kept the cached copy"
        )


def test_8_3_single_fuse_stager_refreshes() -> None:
    assert single(COMPLETE, UP_CHANGED, fs=FUSE, role="stager").decision is Decision.REFRESH


# --- sha256 pins (§6.2, §6.3, §7) ---


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
def test_pin_stamp_hit_is_reused_and_says_stamp_hit(policy: str) -> None:
    plan, action = one(COMPLETE, UP_SAME, pin=PinState.STAMP_HIT, policy=policy)
    assert action.decision is Decision.REUSE
    # The scripts' hit line stays whole; "stamp hit" is said beside it (#14).
    assert action.message in (
        "Model artifact model.safetensors already cached, skipping download",
        "Model artifact model.safetensors revalidated (unchanged, skipped download)",
    )
    assert "stamp hit" in action.why
    assert action.write_stamp is False
    assert not plan.writes


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
def test_pin_hashed_is_reused_and_stamped(policy: str) -> None:
    _, action = one(COMPLETE, UP_SAME, pin=PinState.HASHED, policy=policy)
    assert action.decision is Decision.REUSE
    assert "stamp hit" not in action.message
    assert action.write_stamp is True


def test_pin_hashed_on_a_fuse_reader_is_reused_without_writing_a_stamp() -> None:
    _, action = one(COMPLETE, UP_SAME, fs=FUSE, pin=PinState.HASHED)
    assert action.decision is Decision.REUSE
    assert action.write_stamp is False


def test_pin_outranks_the_size_record() -> None:
    # A file verified by its digest is usable although its record disagrees.
    _, action = one(MISMATCH, None, pin=PinState.HASHED, policy="IfNotPresent")
    assert action.decision is Decision.REUSE
    assert action.backfill_record is True


@pytest.mark.parametrize(
    ("policy", "remote"),
    [("IfNotPresent", None), ("OnChange", UP_SAME), ("OnChange", UP_CHANGED)],
    ids=["if-not-present", "on-change-size-match", "on-change-changed"],
)
def test_pin_corrupt_warm_copy_is_repaired_in_the_same_start(
    policy: str, remote: Remote | None
) -> None:
    # §7: corrupt warm cache (IfNotPresent or OnChange size-match) -> replaced
    # by a verified download; REPAIR, so a failed GET fails the run.
    plan, action = one(COMPLETE, remote, pin=PinState.MISMATCH, policy=policy)
    assert action.decision is Decision.REPAIR
    assert "sha256" in action.why
    assert failed(plan) is None


def test_pin_corrupt_copy_offline_fails() -> None:
    plan, action = one(COMPLETE, DOWN, pin=PinState.MISMATCH)
    assert action.decision is Decision.FAIL
    assert failed(plan) == action


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
def test_pin_marker_with_a_verified_copy(policy: str) -> None:
    plan, action = one(COMPLETE, None, pin=PinState.STAMP_HIT, marker=True, policy=policy)
    if policy == "OnChange":
        # spec §5.3 item 9: moved upstream, pinned copy kept, no HEAD next time.
        assert action.decision is Decision.KEEP
        assert action.message.startswith(PINNED_KEPT_LINE)
    else:
        assert action.decision is Decision.REUSE
    assert not plan.needs_network
    assert failed(plan) is None


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
@pytest.mark.parametrize("state", [MISSING, COMPLETE])
def test_pin_marker_without_a_verified_copy_fails_before_any_transfer(
    policy: str, state: LocalState
) -> None:
    pin = PinState.ABSENT if state is MISSING else PinState.MISMATCH
    plan, action = one(state, UP_CHANGED, pin=pin, marker=True, policy=policy)
    assert action.decision is Decision.FAIL
    assert action.failure is Reason.CHECKSUM_MISMATCH
    assert f"spec.fileSha256 mismatch for {REL}" in action.why
    assert "sha256-rejected" in action.why
    assert not plan.needs_network


def test_pin_single_file_marker_names_spec_sha256() -> None:
    lf = local_file(MISSING, rel="model.gguf", pin=PinState.ABSENT, marker=True)
    plan = plan_of(lf, multi=False, pinned=True, policy="IfNotPresent")
    assert plan.actions[0].decision is Decision.FAIL
    assert "spec.sha256 mismatch for model.gguf" in plan.actions[0].why


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
def test_pin_missing_without_marker_is_fetched(policy: str) -> None:
    assert one(MISSING, None, pin=PinState.ABSENT, policy=policy)[1].decision is Decision.FETCH


def test_partially_pinned_set_plans_the_unpinned_file_like_the_unpinned_path() -> None:
    pinned = local_file(COMPLETE, "model.safetensors", pin=PinState.STAMP_HIT)
    unpinned = local_file(COMPLETE, "config.json")
    remote = {"model.safetensors": UP_CHANGED, "config.json": UP_SAME}
    cache = CacheState(True, {"model.safetensors": pinned, "config.json": unpinned})
    files = (
        RemoteFile("model.safetensors", BASE_URL + "model.safetensors", ROOT + "/m", sha256=PIN),
        RemoteFile("config.json", BASE_URL + "config.json", ROOT + "/c"),
    )
    mixed = make_plan(
        Manifest("hf", ROOT, files, True, "x"), cache, EXT4, "serving", "OnChange", remote
    )
    alone = plan_of(unpinned, remote={"config.json": UP_SAME}, multi=True)
    assert mixed.actions[1] == alone.actions[0]
    assert mixed.actions[0].decision is Decision.REFRESH


# --- whole plans ---


def test_on_change_plan_mixes_rows_and_fails_on_the_first_failure() -> None:
    files = (
        local_file(COMPLETE, "config.json"),
        local_file(COMPLETE, "model-00001.safetensors"),
        local_file(MISMATCH, "model-00002.safetensors"),
        local_file(MISSING, "tokenizer.json"),
    )
    remote = {
        "config.json": UP_SAME,
        "model-00001.safetensors": UP_CHANGED,
        "model-00002.safetensors": DOWN,
    }
    plan = plan_of(*files, remote=remote)
    assert [a.decision for a in plan.actions] == [
        Decision.REUSE,
        Decision.REFRESH,
        Decision.FAIL,
        Decision.FETCH,
    ]
    first = failed(plan)
    assert first is not None and first.rel == "model-00002.safetensors"


def test_on_change_warm_offline_plan_writes_nothing() -> None:
    files = tuple(local_file(COMPLETE, f"model-{i:05d}.safetensors") for i in range(1, 21))
    plan = plan_of(*files, remote={f.rel: DOWN for f in files})
    assert {a.decision for a in plan.actions} == {Decision.KEEP}
    assert not plan.writes and not plan.needs_network and failed(plan) is None
