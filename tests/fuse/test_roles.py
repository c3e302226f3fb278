"""Who may write the cache, on a real FUSE mount (bindfs) and off it
(spec/behavior.md §9.3, §8.2; scenarios 25-27, 35, 48, 51-53, 56-57, 59-60).

Every FUSE test looks at the BACKING directory (what the storage holds)
before and after: a FUSE serving pod must leave it bit-for-bit identical:
no mkdir, no lock file, no sweep, no record backfill, no partial cleanup.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

import pytest

from llmkube_stager.cache.fs import FUSE_SUPER_MAGIC, MountEntry, classify, mount_for, probe_fs
from tests.harness.contract import REMEDY_HTTP
from tests.harness.disk import LOCK_NAME, names, record_of, seed, snapshot
from tests.harness.mounts import FUSE_MAGIC_HEX, FuseCache, TwoNodes
from tests.harness.origin import Origin, closed_port_url, gets
from tests.harness.pod import Pod, multi_env, single_env
from tests.harness.sample import payload

DAY_S = 86400.0
CONFIG = b'{"architectures": ["LlamaForCausalLM"]}\n'
WEIGHTS = payload(96 * 1024, 1)
OLD_DEBRIS = "config.json.llmkube-tmp.AbC123"
OLD_PARTIAL = "config.json.0123456789ab.tmp"
UPSTREAM_CHANGED = (
    "Upstream changed for {rel}; a serving pod does not stage on a FUSE cache, "
    "so it kept the cached copy"
)


# -- the §9.3 matrix ----------------------------------------------------------------
#
# One layout exercises every verb of a row: the root exists with a legacy
# config.json (no size record: backfill), old temp debris and an old legacy
# partial (sweep), and sub/model.safetensors is missing (mkdir of sub/, stage).


def _matrix_cache(backing: Path, origin: Origin) -> Path:
    origin.put("/repo/config.json", CONFIG)
    origin.put("/repo/sub/model.safetensors", WEIGHTS)
    root = backing / "0123456789abcdef"
    seed(root / "config.json", CONFIG, age_s=DAY_S)
    seed(root / OLD_DEBRIS, b"12", age_s=DAY_S)
    seed(root / OLD_PARTIAL, CONFIG[:5], age_s=DAY_S)
    return root


def _matrix_pod(tmp_path: Path, origin: Origin, seen_root: Path, *, stager: bool) -> Pod:
    env = multi_env(origin.url + "/repo/", seen_root, ["config.json", "sub/model.safetensors"])
    return Pod(tmp_path, env, stager=stager)


def _assert_wrote_everything(root: Path, origin: Origin) -> None:
    # stage (+ mkdir of sub/)
    assert (root / "sub" / "model.safetensors").read_bytes() == WEIGHTS
    assert record_of(root / "sub" / "model.safetensors") == str(len(WEIGHTS))
    # backfill of the legacy file, which is kept as-is (zero requests for it)
    assert (root / "config.json").read_bytes() == CONFIG
    assert record_of(root / "config.json") == str(len(CONFIG))
    assert gets(origin, "/repo/config.json") == []
    assert origin.requests("/repo/config.json") == []
    # sweep of debris older than 10 minutes
    assert not (root / OLD_DEBRIS).exists(), names(root)
    assert not (root / OLD_PARTIAL).exists(), names(root)
    assert len(gets(origin, "/repo/sub/model.safetensors")) == 1


@pytest.mark.parametrize("stager", [False, True], ids=["serving-pod", "stager"])
def test_row_off_fuse_mkdirs_locks_sweeps_stages_backfills(
    tmp_path: Path, origin: Origin, stager: bool
) -> None:
    """Off FUSE both rows are the same: a serving pod and a stager alike."""
    root = _matrix_cache(tmp_path / "models", origin)
    run = _matrix_pod(tmp_path, origin, root, stager=stager).run("stage")
    run.ok()
    _assert_wrote_everything(root, origin)
    who = "a stager" if stager else "a writer"
    assert (root / LOCK_NAME).is_file(), f"off FUSE {who} takes the flock"


def test_row_stager_on_fuse_mkdirs_sweeps_stages_backfills_without_flock(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    root = _matrix_cache(fuse_cache.backing, origin)
    seen = fuse_cache.mnt / root.name
    run = _matrix_pod(tmp_path, origin, seen, stager=True).run("stage")
    run.ok()
    _assert_wrote_everything(root, origin)
    assert not (root / LOCK_NAME).exists(), "a FUSE stager must not rely on flock"


def test_row_serving_pod_on_fuse_writes_nothing_and_refuses_to_stage(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    root = _matrix_cache(fuse_cache.backing, origin)
    before = snapshot(fuse_cache.backing)
    pod = _matrix_pod(tmp_path, origin, fuse_cache.mnt / root.name, stager=False)
    run = pod.run("stage", LLMKUBE_REMEDY_WORDS="operator")  # the operator's serving pod

    doc = run.failed("ModelCacheLockUnsupported").term
    assert doc["remedy"] == REMEDY_HTTP
    assert doc["file"] == "sub/model.safetensors"
    assert "FUSE cache cannot guarantee cross-node file locking for staging" in doc["message"]
    # No mkdir, no lock file, no sweep, no backfill, no partial cleanup.
    assert snapshot(fuse_cache.backing) == before
    assert not (root / "sub").exists()
    assert not (root / LOCK_NAME).exists()
    assert origin.requests() == [], "a serving pod on FUSE never transfers"
    assert "Downloading model" not in run.stderr


@pytest.mark.parametrize("kind", ["http", "hf"])
def test_fuse_refusal_remedy_is_one_constant_in_log_message_and_remedy(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache, kind: str
) -> None:
    """§9.4 / scenario 40: the remedy printed in the log line, inside the
    termination `message` and in `remedy` is the same constant; http and hf
    sources are prefetchable and share it. (This tree has no s3:// or local
    source module yet, so their constants cannot be reached through the CLI.)
    The refusal comes before any request: the hf case would otherwise try
    the hub, which is unreachable from here."""
    origin.put("/repo/model.safetensors", WEIGHTS)
    source = origin.url + "/repo/" if kind == "http" else "hf://org/repo/"
    env = multi_env(source, fuse_cache.mnt / "k", ["model.safetensors"])
    # Under the operator (whose cacheLockRemedyIn looks for the constant).
    run = Pod(tmp_path, env).run("stage", LLMKUBE_REMEDY_WORDS="operator")
    doc = run.failed("ModelCacheLockUnsupported").term
    assert doc["remedy"] == REMEDY_HTTP
    assert doc["message"] == (
        "ERROR: ModelCacheLockUnsupported: FUSE cache cannot guarantee cross-node file "
        f"locking for staging model.safetensors; {REMEDY_HTTP}"
    )
    error_lines = [line for line in run.stderr.splitlines() if "ModelCacheLockUnsupported" in line]
    assert error_lines and all(REMEDY_HTTP in line for line in error_lines), run.stderr
    assert doc["retryable"] is False
    assert origin.requests() == []
    # A Job or a person of one's own: the variable that makes a prefetch Job
    # (#46 item 6), one remedy in the log and the message alike.
    own = Pod(tmp_path, env).run("stage").failed("ModelCacheLockUnsupported").term
    assert "LLMKUBE_PREFETCH_STAGER=true" in own["remedy"] and "spec." not in own["remedy"]
    assert origin.requests() == []


# -- scenario 25, 48, 57: warm FUSE caches, serving pods ----------------------------


def test_scenario_25_warm_fuse_cache_serving_pod_no_lock_no_writes(
    tmp_path: Path, fuse_cache: FuseCache
) -> None:
    root = fuse_cache.backing / "k"
    seed(root / "config.json", CONFIG, record=len(CONFIG))
    seed(root / "model.safetensors", WEIGHTS, record=len(WEIGHTS))
    before = snapshot(fuse_cache.backing)
    env = multi_env(
        closed_port_url() + "/repo/", fuse_cache.mnt / "k", ["config.json", "model.safetensors"]
    )
    run = Pod(tmp_path, env).run("stage")
    doc = run.ok().term
    assert doc["stats"]["reused"] == 2 and doc["stats"]["fetched"] == 0
    assert "Model artifact model.safetensors already cached, skipping download" in run.stderr
    assert snapshot(fuse_cache.backing) == before
    assert not (root / LOCK_NAME).exists()


def test_scenario_48_warm_fuse_cache_without_record_starts_and_writes_nothing(
    tmp_path: Path, fuse_cache: FuseCache
) -> None:
    root = fuse_cache.backing / "k"
    seed(root / "model.safetensors", WEIGHTS)  # staged before LLMKube PR #2185: no record
    seed(root / OLD_DEBRIS, b"1", age_s=DAY_S)  # a reader must not sweep it either
    before = snapshot(fuse_cache.backing)
    env = multi_env(closed_port_url() + "/repo/", fuse_cache.mnt / "k", ["model.safetensors"])
    run = Pod(tmp_path, env).run("stage")
    run.ok()
    assert "no valid size record" in run.stderr
    assert snapshot(fuse_cache.backing) == before
    assert record_of(root / "model.safetensors") is None


def test_scenario_57_warm_single_file_fuse_cache_no_lock_zero_downloads(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    origin.put("/m.gguf", WEIGHTS)
    root = fuse_cache.backing / "k"
    seed(root / "model.gguf", WEIGHTS, record=len(WEIGHTS))
    # The old s3/local branches' `$MODEL_PATH.tmp`: a FUSE reader must not
    # `rm -f` it (§9.3), however old.
    seed(root / "model.gguf.tmp", WEIGHTS[:10], age_s=DAY_S)
    before = snapshot(fuse_cache.backing)
    run = Pod(tmp_path, single_env(origin.url + "/m.gguf", fuse_cache.mnt / "k")).run("stage")
    run.ok()
    assert "Model already cached, skipping download" in run.stderr
    assert origin.requests() == []
    assert snapshot(fuse_cache.backing) == before
    assert not (root / LOCK_NAME).exists()


# -- scenario 26, 56: a missing file on FUSE ----------------------------------------


def test_scenario_26_missing_file_serving_refuses_then_stager_stages(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    origin.put("/repo/model.safetensors", WEIGHTS)
    seen = fuse_cache.mnt / "k"
    env = multi_env(origin.url + "/repo/", seen, ["model.safetensors"])
    before = snapshot(fuse_cache.backing)

    refused = Pod(tmp_path, env).run("stage")
    doc = refused.failed("ModelCacheLockUnsupported").term
    assert "for staging model.safetensors; " in doc["message"]
    assert snapshot(fuse_cache.backing) == before, "the refusal must not even mkdir"
    assert origin.requests() == []

    staged = Pod(tmp_path, env, stager=True).run("stage")
    assert staged.ok().term["stats"]["fetched"] == 1
    dest = fuse_cache.backing / "k" / "model.safetensors"
    assert dest.read_bytes() == WEIGHTS
    assert record_of(dest) == str(len(WEIGHTS))
    assert not (fuse_cache.backing / "k" / LOCK_NAME).exists()

    again = Pod(tmp_path, env).run("stage")  # the serving pod now starts warm
    assert again.ok().term["stats"]["reused"] == 1


def test_scenario_56_single_file_serving_pod_never_downloads_on_fuse(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    origin.put("/m.gguf", WEIGHTS)
    before = snapshot(fuse_cache.backing)
    run = Pod(tmp_path, single_env(origin.url + "/m.gguf", fuse_cache.mnt / "k")).run("stage")
    run.failed("ModelCacheLockUnsupported")
    assert "Downloading model..." not in run.stderr
    assert origin.requests() == [], "no probe and no download"
    assert snapshot(fuse_cache.backing) == before


def test_scenario_56_single_file_stager_does_not_rely_on_flock(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    """A FUSE stager takes no flock: even with the lock file present and
    flock-held by someone else, it stages at once (LLMKUBE_LOCK_TIMEOUT=1
    would fail a stager that waited for it)."""
    origin.put("/m.gguf", WEIGHTS)
    root = fuse_cache.backing / "k"
    root.mkdir()
    lock_path = root / LOCK_NAME
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o664)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        env = single_env(origin.url + "/m.gguf", fuse_cache.mnt / "k")
        run = Pod(tmp_path, env, stager=True).run("stage", env={"LLMKUBE_LOCK_TIMEOUT": "1"})
    finally:
        os.close(fd)
    run.ok()
    assert "Downloading model..." in run.stderr
    assert "Waiting for another writer" not in run.stderr
    assert (root / "model.gguf").read_bytes() == WEIGHTS
    assert record_of(root / "model.gguf") == str(len(WEIGHTS))
    assert len(gets(origin, "/m.gguf")) == 1


# -- scenario 27: detection ----------------------------------------------------------


def test_scenario_27_inspect_reports_fuse_and_bindfs_on_a_real_mount(
    tmp_path: Path, fuse_cache: FuseCache
) -> None:
    seed(fuse_cache.backing / "k" / "model.gguf", WEIGHTS, record=len(WEIGHTS))
    stat = subprocess.run(
        ["stat", "-f", "-c", "%t", str(fuse_cache.mnt)], capture_output=True, text=True, check=True
    )
    assert stat.stdout.strip() == FUSE_MAGIC_HEX  # what the shell scripts test

    run = Pod(tmp_path, {}).run("inspect", "--json", str(fuse_cache.mnt / "k"))
    assert run.returncode == 0, str(run)
    fs = json.loads(run.stdout)["fs"]
    assert fs["is_fuse"] is True
    assert fs["driver"] == "bindfs"
    assert fs["fstype"] == "fuse.bindfs"
    assert fs["lock_scope"] == "node-local"

    off = probe_fs(str(tmp_path))
    assert off.is_fuse is False and off.lock_scope == "cross-node"


def test_plain_bindfs_mount_driver_is_not_the_backing_path(
    tmp_path: Path, plain_bindfs: FuseCache
) -> None:
    """`bindfs --no-allow-other SRC MNT` appears as `fuse SRC` in the mount
    table. It is FUSE all right, but SRC is not a driver name."""
    info = probe_fs(str(plain_bindfs.mnt))
    assert info.is_fuse is True
    assert info.fstype == "fuse"
    assert not info.driver.startswith("/"), info.driver


def test_scenario_27_virtiofs_is_classified_as_fuse() -> None:
    """virtiofs (Docker Desktop bind mounts, Kata volumes) reports the FUSE
    magic (spec §9.2, scenario 13/27). A virtiofs mount cannot be produced in
    this sandbox (it needs a hypervisor's virtio-fs device), so the mount
    table classification is tested with a real-shaped mount table."""
    entries = [
        MountEntry("/", "ext4", "/dev/vda", frozenset({"rw", "relatime"})),
        MountEntry("/run/desktop/mnt/host", "virtiofs", "virtiofs0", frozenset({"rw", "relatime"})),
    ]
    mount = mount_for("/run/desktop/mnt/host/models/k", entries)
    assert mount is not None and mount.fstype == "virtiofs"
    by_magic = classify("/run/desktop/mnt/host/models/k", FUSE_SUPER_MAGIC, mount, False, 1)
    assert by_magic.is_fuse is True and by_magic.driver == "virtiofs"
    assert by_magic.lock_scope == "node-local"
    # statfs unavailable: the mount table alone still says FUSE.
    by_table = classify("/run/desktop/mnt/host/models/k", None, mount, False, None)
    assert by_table.is_fuse is True and by_table.driver == "virtiofs"
    ext4 = classify("/models/k", 0xEF53, mount_for("/models/k", entries), False, 1)
    assert ext4.is_fuse is False


# -- scenario 35, 51, 59: OnChange on FUSE, serving pods ----------------------------


def _onchange_warm(backing: Path, old: bytes, *, record: bool) -> Path:
    root = backing / "k"
    seed(root / "config.json", CONFIG, record=len(CONFIG))
    seed(root / "model.safetensors", old, record=len(old) if record else None)
    return root


@pytest.mark.parametrize("recorded", [True, False], ids=["changed-recorded", "changed"])
def test_scenario_51_59_onchange_upstream_changed_keeps_copy_never_unreachable(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache, recorded: bool
) -> None:
    old = payload(4096, 2)
    new = payload(6000, 3)  # upstream re-uploaded: another size
    origin.put("/repo/config.json", CONFIG)
    origin.put("/repo/model.safetensors", new)
    root = _onchange_warm(fuse_cache.backing, old, record=recorded)
    before = snapshot(fuse_cache.backing)
    env = multi_env(
        origin.url + "/repo/", fuse_cache.mnt / "k", ["config.json", "model.safetensors"]
    )
    run = Pod(tmp_path, env).run("stage", env={"LLMKUBE_REFRESH_POLICY": "OnChange"})

    doc = run.ok().term
    assert UPSTREAM_CHANGED.format(rel="model.safetensors") in run.stderr
    assert "unreachable" not in run.stderr.lower()
    assert "Model artifact config.json revalidated (unchanged, skipped download)" in run.stderr
    assert doc["stats"]["kept"] == 1
    assert gets(origin) == [], "a serving pod on FUSE never transfers"
    assert snapshot(fuse_cache.backing) == before
    assert (root / "model.safetensors").read_bytes() == old


def test_scenario_59_onchange_offline_uses_the_unreachable_wording(
    tmp_path: Path, fuse_cache: FuseCache
) -> None:
    _onchange_warm(fuse_cache.backing, payload(4096, 2), record=True)
    before = snapshot(fuse_cache.backing)
    env = multi_env(
        closed_port_url() + "/repo/", fuse_cache.mnt / "k", ["config.json", "model.safetensors"]
    )
    run = Pod(tmp_path, env).run("stage", env={"LLMKUBE_REFRESH_POLICY": "OnChange"})
    run.ok()
    assert "Revalidation unreachable for model.safetensors; kept cached copy" in run.stderr
    assert "Upstream changed" not in run.stderr
    assert snapshot(fuse_cache.backing) == before


def test_scenario_51_single_file_onchange_upstream_changed(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    old, new = payload(4096, 4), payload(5000, 5)
    origin.put("/m.gguf", new)
    seed(fuse_cache.backing / "k" / "model.gguf", old, record=len(old))
    before = snapshot(fuse_cache.backing)
    env = single_env(origin.url + "/m.gguf", fuse_cache.mnt / "k")
    run = Pod(tmp_path, env).run("stage", env={"LLMKUBE_REFRESH_POLICY": "OnChange"})
    run.ok()
    assert UPSTREAM_CHANGED.format(rel="model.gguf") in run.stderr
    assert "unreachable" not in run.stderr.lower()
    assert gets(origin) == []
    assert snapshot(fuse_cache.backing) == before


def test_scenario_35_onchange_upstream_change_does_not_fail_serving_pods(
    tmp_path: Path, origin: Origin, two_nodes: TwoNodes
) -> None:
    """Several serving pods on two nodes start at once after an upstream
    change: all of them start from the warm cache, none writes."""
    old = payload(8192, 6)
    origin.put("/repo/config.json", CONFIG + b" ")  # both files changed upstream
    origin.put("/repo/model.safetensors", payload(9000, 7))
    _onchange_warm(two_nodes.backing, old, record=True)
    before = snapshot(two_nodes.backing)
    procs = []
    for node in (two_nodes.node1, two_nodes.node2, two_nodes.node1, two_nodes.node2):
        env = multi_env(origin.url + "/repo/", node / "k", ["config.json", "model.safetensors"])
        pod = Pod(tmp_path, {**env, "LLMKUBE_REFRESH_POLICY": "OnChange"})
        procs.append((pod, pod.popen("stage")))
    for pod, proc in procs:
        run = pod.finish(proc)
        assert run.ok().term["stats"]["kept"] == 2
        assert UPSTREAM_CHANGED.format(rel="config.json") in run.stderr
    assert gets(origin) == []
    assert snapshot(two_nodes.backing) == before


# -- scenario 52, 53, 60: the FUSE stager backfills ---------------------------------


def test_scenario_52_60_fuse_stager_backfills_missing_size_record(
    tmp_path: Path, fuse_cache: FuseCache
) -> None:
    root = fuse_cache.backing / "k"
    seed(root / "model.safetensors", WEIGHTS)  # staged before LLMKube PR #2185
    env = multi_env(closed_port_url() + "/repo/", fuse_cache.mnt / "k", ["model.safetensors"])

    warned = Pod(tmp_path, env).run("stage")  # a serving pod warns, writes nothing
    warned.ok()
    assert "no valid size record" in warned.stderr
    assert record_of(root / "model.safetensors") is None

    run = Pod(tmp_path, env, stager=True).run("stage")
    run.ok()
    assert (root / "model.safetensors.llmkube-size").read_text() == str(len(WEIGHTS))
    assert (root / "model.safetensors").read_bytes() == WEIGHTS
    assert not (root / LOCK_NAME).exists()

    quiet = Pod(tmp_path, env).run("stage")  # serving pods stop warning
    quiet.ok()
    assert "no valid size record" not in quiet.stderr


def test_scenario_53_truncated_legacy_file_is_backfilled_as_is(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    """A legacy file truncated by LLMKube #2158 before the upgrade cannot be told
    from a complete one offline: its (wrong) size is recorded as-is, with
    zero origin requests (accepted trade-off, release note)."""
    origin.put("/repo/model.safetensors", WEIGHTS)
    root = fuse_cache.backing / "k"
    short = WEIGHTS[: len(WEIGHTS) // 3]
    seed(root / "model.safetensors", short)
    env = multi_env(origin.url + "/repo/", fuse_cache.mnt / "k", ["model.safetensors"])
    run = Pod(tmp_path, env, stager=True).run("stage")
    run.ok()
    assert record_of(root / "model.safetensors") == str(len(short))
    assert (root / "model.safetensors").read_bytes() == short
    assert origin.requests() == []


# "True", "1", "yes": the scripts' `= true` test made serving pods of them,
# and a serving pod must never write on FUSE (spec §9.3, #14 item 5).
@pytest.mark.parametrize("value", ["false", "", "no", "0", "True", "TRUE", "1", "yes", " true"])
def test_scenario_58_only_prefetch_stager_true_makes_a_stager(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache, value: str
) -> None:
    """The role switch is LLMKUBE_PREFETCH_STAGER=true; anything else (unset,
    false, empty) is a serving pod, which must refuse on FUSE. The mutation
    "the Job is not a stager" is caught because the refusal changes."""
    origin.put("/m.gguf", WEIGHTS)
    env = single_env(origin.url + "/m.gguf", fuse_cache.mnt / "k")

    serving = Pod(tmp_path, {**env, "LLMKUBE_PREFETCH_STAGER": value}).run("stage")
    serving.failed("ModelCacheLockUnsupported")
    assert origin.requests() == []

    stager = Pod(tmp_path, {**env, "LLMKUBE_PREFETCH_STAGER": "true"}).run("stage")
    assert stager.ok().term["stats"]["fetched"] == 1
    assert (fuse_cache.backing / "k" / "model.gguf").read_bytes() == WEIGHTS
