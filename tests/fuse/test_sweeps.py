"""Temp-debris sweeps (spec/behavior.md §10; scenarios 54, 61-66).

Writers remove the §10 debris patterns and the agent's own partial/temp
names only when older than 10 minutes (mtimes set with os.utime); never
`<file>.sha256.XXXXXX`, never a file the manifest lists, never a young
partial of a live writer; a FUSE serving pod sweeps nothing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from llmkube_stager.cache.records import write_atomic
from llmkube_stager.cache.sweep import is_atomic_debris
from llmkube_stager.layout import (
    atomic_tmp_path,
    marker_path,
    private_partial_path,
    record_path,
    stamp_path,
)
from tests.harness.disk import names, record_of, seed, snapshot
from tests.harness.mounts import FuseCache, TwoNodes
from tests.harness.origin import Fault, Origin, closed_port_url
from tests.harness.pod import Pod, multi_env, single_env
from tests.harness.sample import payload

OLD_S = 11 * 60  # just past the 10-minute gate
YOUNG_S = 5 * 60
DAY_S = 86400
WEIGHTS = payload(64 * 1024, 11)
DIGEST = "ab" * 32

# Every name the sweep must take once old, next to a settled file, paired
# with the same kind of name that is younger than 10 minutes (maybe a write
# in progress on storage where the lock does not exclude: kept, scenario 64).
DEBRIS = {
    # L4 atomic-write temp
    "model.safetensors.llmkube-tmp.AbC123": "model.safetensors.llmkube-tmp.AbC124",
    # L3 record temp (scenario 54)
    "model.safetensors.llmkube-size.Xy9Zq1": "model.safetensors.llmkube-size.Xy9Zq2",
    # L3 marker temp
    f"model.safetensors.{DIGEST}.sha256-rejected.Qw3Er5": (
        f"model.safetensors.{DIGEST}.sha256-rejected.Qw3Er6"
    ),
    # the agent's private partial of a dead writer
    "model.safetensors.0123456789ab.deadbeef.llmkube-part": (
        "model.safetensors.0123456789ab.feedface.llmkube-part"
    ),
    # the shell's resumable partial
    "model.safetensors.0123456789ab.tmp": "model.safetensors.0123456789ac.tmp",
    # the s3/local branches' partial
    "model.safetensors.tmp": None,
}
NEVER = "model.safetensors.sha256.Ldfhhl"  # older stamp writer: delete by hand


def _writer(kind: str, tmp_path: Path, fuse: FuseCache) -> tuple[Path, Path, bool]:
    """(backing dir the test inspects, dir the pod sees, stager?)"""
    if kind == "fuse-stager":
        return fuse.backing / "k", fuse.mnt / "k", True
    root = tmp_path / "models" / "k"
    return root, root, False


def _cache_needing_a_write(root: Path, origin: Origin) -> list[str]:
    """model.safetensors is settled (complete, recorded); tokenizer.json is
    missing, so the pod is a writer this start and runs its sweep."""
    origin.put("/repo/tokenizer.json", b'{"model": {}}')
    seed(root / "model.safetensors", WEIGHTS, record=len(WEIGHTS))
    return ["model.safetensors", "tokenizer.json"]


@pytest.mark.parametrize("kind", ["fuse-stager", "off-fuse-serving"])
def test_scenarios_61_64_old_debris_swept_young_debris_kept(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache, kind: str
) -> None:
    root, seen, stager = _writer(kind, tmp_path, fuse_cache)
    files = _cache_needing_a_write(root, origin)
    for old, young in DEBRIS.items():
        seed(root / old, b"old", age_s=OLD_S)
        if young:
            seed(root / young, b"young", age_s=YOUNG_S)
    run = Pod(tmp_path, multi_env(origin.url + "/repo/", seen, files), stager=stager).run("stage")
    run.ok()

    left = names(root)
    for old, young in DEBRIS.items():
        assert old not in left, f"{old} (11 min old) was not swept: {left}"
        assert young is None or young in left, f"{young} (5 min old) was swept"
    assert (root / "model.safetensors").read_bytes() == WEIGHTS
    assert (root / "tokenizer.json").read_bytes() == b'{"model": {}}'


def test_scenario_61_single_file_atomic_temp_swept_when_a_writer_starts(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    origin.put("/m.gguf", WEIGHTS)
    root = fuse_cache.backing / "k"
    seed(root / "model.gguf.llmkube-tmp.AbC123", b"4096", age_s=OLD_S)
    env = single_env(origin.url + "/m.gguf", fuse_cache.mnt / "k")
    run = Pod(tmp_path, env, stager=True).run("stage")
    run.ok()
    # The validators the file came with (#46 item 1) beside its size record.
    assert names(root) == [".llmkube-validators", "model.gguf", "model.gguf.llmkube-size"]
    assert (root / "model.gguf").read_bytes() == WEIGHTS


def test_scenario_54_record_temp_of_a_killed_pod_is_eventually_swept(
    tmp_path: Path, fuse_cache: FuseCache
) -> None:
    """A pod killed between mktemp and mv left the temp and no record: the
    next stager backfills the record and sweeps the temp."""
    root = fuse_cache.backing / "k"
    seed(root / "model.safetensors", WEIGHTS, age_s=DAY_S)
    seed(root / "model.safetensors.llmkube-size.Ab12Cd", b"65", age_s=OLD_S)
    env = multi_env(closed_port_url() + "/repo/", fuse_cache.mnt / "k", ["model.safetensors"])
    run = Pod(tmp_path, env, stager=True).run("stage")
    run.ok()
    assert names(root) == ["model.safetensors", "model.safetensors.llmkube-size"]
    assert record_of(root / "model.safetensors") == str(len(WEIGHTS))


@pytest.mark.parametrize("where", ["fuse", "plain"])
def test_scenario_62_atomic_write_removes_its_temp_when_the_rename_fails(
    tmp_path: Path, request: pytest.FixtureRequest, where: str
) -> None:
    base = request.getfixturevalue("fuse_cache").mnt if where == "fuse" else tmp_path / "plain"
    target = base / "k" / "model.safetensors.llmkube-size"
    target.mkdir(parents=True)  # rename of a file onto a directory fails
    (target / "keep").write_text("inside")
    with pytest.raises(OSError):
        write_atomic(str(target), b"12345")
    assert names(base / "k") == [
        "model.safetensors.llmkube-size",
        "model.safetensors.llmkube-size/keep",
    ]
    assert (target / "keep").read_text() == "inside"


def test_scenario_63_every_writer_temp_name_matches_a_sweep_pattern(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    dest = str(fuse_cache.backing / "k" / "model.safetensors")
    targets = (record_path(dest), stamp_path(dest), marker_path(dest, DIGEST))
    temps = {os.path.basename(atomic_tmp_path(t)) for t in targets for _ in range(100)}
    assert all(is_atomic_debris(name) for name in temps), sorted(temps)[:5]
    # The old `$1.XXXXXX` stamp temp did not match; it is never swept.
    assert not is_atomic_debris(NEVER)

    # End to end on the mount: one of each real name, 11 minutes old, next to
    # a dead writer's private partial; a FUSE stager sweeps all of them.
    root = Path(dest).parent
    files = _cache_needing_a_write(root, origin)
    made = sorted({os.path.basename(atomic_tmp_path(t)) for t in targets})
    part = os.path.basename(private_partial_path(dest, "CL1ET", "0badc0de"))
    for name in [*made, part]:
        seed(root / name, b"x", age_s=OLD_S)
    env = multi_env(origin.url + "/repo/", fuse_cache.mnt / "k", files)
    Pod(tmp_path, env, stager=True).run("stage").ok()
    left = names(root)
    assert [n for n in [*made, part] if n in left] == []


def test_scenario_65_stamp_temp_is_never_swept(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    root = fuse_cache.backing / "k"
    files = _cache_needing_a_write(root, origin)
    seed(root / NEVER, b"a repository file could look like this", age_s=DAY_S)
    env = multi_env(origin.url + "/repo/", fuse_cache.mnt / "k", files)
    Pod(tmp_path, env, stager=True).run("stage").ok()
    assert (root / NEVER).read_bytes() == b"a repository file could look like this"


def test_scenario_66_fuse_serving_pod_sweeps_nothing(tmp_path: Path, fuse_cache: FuseCache) -> None:
    root = fuse_cache.backing / "k"
    seed(root / "model.safetensors", WEIGHTS, record=len(WEIGHTS))
    for name in (*DEBRIS, NEVER):
        seed(root / name, b"old", age_s=DAY_S)
    before = snapshot(fuse_cache.backing)
    env = multi_env(closed_port_url() + "/repo/", fuse_cache.mnt / "k", ["model.safetensors"])
    run = Pod(tmp_path, env).run("stage")
    run.ok()
    assert "removed stale temp file" not in run.stderr
    assert snapshot(fuse_cache.backing) == before


def _seed_listed_tmp_files(root: Path, sibling: str) -> dict[str, bytes]:
    """Two repository files a sweep could take for debris, a day old with
    their records: `weights.tmp` and one shaped like the shell's partial of
    `sibling`. Returns them (name -> bytes)."""
    listed = {
        "weights.tmp": b"repo file ending in .tmp",
        f"{sibling}.0123456789ab.tmp": b"repo file shaped like a partial",
    }
    for name, data in listed.items():
        seed(root / name, data, record=len(data), age_s=DAY_S)
    return listed


def test_manifest_listed_tmp_files_are_never_swept(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    """A repository file may end in `.tmp` or look like the shell's partial
    of a sibling; listed in the manifest, it is a model file, not debris."""
    root = fuse_cache.backing / "k"
    listed = _seed_listed_tmp_files(root, "model.safetensors")
    files = [*_cache_needing_a_write(root, origin), *listed]
    env = multi_env(origin.url + "/repo/", fuse_cache.mnt / "k", files)
    run = Pod(tmp_path, env, stager=True).run("stage")
    run.ok()
    for name, data in listed.items():
        assert (root / name).read_bytes() == data, f"{name} was swept"


def test_manifest_listed_tmp_file_survives_staging_of_its_namesake(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    root = fuse_cache.backing / "k"
    listed = _seed_listed_tmp_files(root, "weights")
    origin.put("/repo/weights", WEIGHTS)  # missing: the stager stages it
    env = multi_env(origin.url + "/repo/", fuse_cache.mnt / "k", ["weights", *listed])
    run = Pod(tmp_path, env, stager=True).run("stage")
    run.ok()
    assert (root / "weights").read_bytes() == WEIGHTS
    for name, data in listed.items():
        assert (root / name).exists() and (root / name).read_bytes() == data, names(root)


def test_young_partial_of_a_live_writer_on_another_node_is_not_swept(
    tmp_path: Path, origin: Origin, two_nodes: TwoNodes
) -> None:
    """Writer A (node 1) stages big.bin slowly; writer B (node 2) stages
    small.bin into the same directory meanwhile and sweeps: A's young partial
    survives and A publishes the exact bytes."""
    big = payload(640 * 1024, 12)
    origin.put("/repo/big.bin", big)
    origin.set_fault("/repo/big.bin", Fault(rate_bytes_per_s=512 * 1024))
    origin.put("/repo/small.bin", b"small")
    root = two_nodes.backing / "k"
    root.mkdir()
    a = Pod(
        tmp_path, multi_env(origin.url + "/repo/", two_nodes.node1 / "k", ["big.bin"]), stager=True
    )
    b = Pod(
        tmp_path,
        multi_env(origin.url + "/repo/", two_nodes.node2 / "k", ["small.bin"]),
        stager=True,
    )
    # B's sweep must have something old to take, so it provably ran.
    seed(root / "small.bin.llmkube-tmp.AbC123", b"5", age_s=OLD_S)
    proc = a.popen("stage")
    deadline = time.monotonic() + 10
    while not [n for n in names(root) if n.startswith("big.bin.") and ".llmkube-part" in n]:
        assert proc.poll() is None and time.monotonic() < deadline, "A never started its partial"
        time.sleep(0.01)
    run_b = b.run("stage")
    run_b.ok()
    assert "small.bin.llmkube-tmp.AbC123" not in names(root), "B's sweep did not run"
    assert proc.poll() is None, "A should still be transferring while B swept"
    run_a = a.finish(proc)
    run_a.ok()
    assert (root / "big.bin").read_bytes() == big
    assert record_of(root / "big.bin") == str(len(big))
