"""Review of #21 (storage truth) as an adversary: real files on the suite's
local filesystem, our modules driven as the agent drives them, no patching."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from llmkube_stager.cache import evidence
from llmkube_stager.cache.heldpartial import HeldPartial
from llmkube_stager.cache.publish import publish, stamp_published
from llmkube_stager.cache.state import read_local_file
from llmkube_stager.model import PinState
from tests.harness.hub import FakeHub
from tests.harness.modelsets import (
    REPO,
    SHARDS,
    SimulatedKill,
    commit_files,
    hf_env,
    interrupt_after_first_publish,
)
from tests.harness.pod import Pod

SIZE_BYTES = 16 * evidence.BLOCK_BYTES


def _write_claim(path: str, data: bytes) -> HeldPartial:
    claim = HeldPartial.create(path)
    os.write(claim.fd, data)
    return claim


def test_a_stamp_never_vouches_for_another_writers_file_of_one_size_on_a_local_fs(
    tmp_path: os.PathLike[str],
) -> None:
    """Two writers with different pins of one name on a local filesystem (a
    hostPath volume): A is paused between its publish and its stamp, B
    publishes a file of the same size within the same second whose bytes
    differ only outside the three sampled blocks. The inode numbers of a
    local filesystem tell the truth; the size+mtime fallback (meant for
    rclone) must not make B's file count as A's, or A's stamp of X stands on
    B's Y with evidence that matches, and a pod pinned to X is served Y."""
    root = str(tmp_path)
    assert evidence.is_local(root)
    dest = os.path.join(root, "model.bin")
    x_bytes = bytes(range(256)) * (SIZE_BYTES // 256)
    changed_at = 2 * evidence.BLOCK_BYTES + 17
    sampled = evidence.offsets(SIZE_BYTES)
    assert all(not (o <= changed_at < o + evidence.BLOCK_BYTES) for o in sampled)
    y_bytes = x_bytes[:changed_at] + b"\xff" + x_bytes[changed_at + 1 :]
    pin_x = hashlib.sha256(x_bytes).hexdigest()
    pin_y = hashlib.sha256(y_bytes).hexdigest()

    a = _write_claim(os.path.join(root, "model.bin.llmkube-partial.aaaaaaaa"), x_bytes)
    published_a = publish(a, dest, SIZE_BYTES, "model.bin")
    st_a = published_a.st
    # A pauses here; B publishes its own file and stamps it.
    b = _write_claim(os.path.join(root, "model.bin.llmkube-partial.bbbbbbbb"), y_bytes)
    os.utime(b.fd, ns=(st_a.st_atime_ns, st_a.st_mtime_ns))  # the same second, as a race gives
    published_b = publish(b, dest, SIZE_BYTES, "model.bin")
    st_b = published_b.st
    stamp_published(dest, pin_y, published_b)
    assert st_b.st_ino != st_a.st_ino
    # A resumes and stamps what it published.
    stamp_published(dest, pin_x, published_a)

    with open(dest, "rb") as handle:
        assert handle.read() == y_bytes
    seen = read_local_file("model.bin", dest, pin=pin_x, root=root)
    assert seen.pin is PinState.MISMATCH, seen
    assert read_local_file("model.bin", dest, pin=pin_y, root=root).pin is not PinState.MISMATCH


# -- a roll-forward must not vouch for an old file of the new size (#21 item 5 review) --


def test_a_roll_forward_never_records_the_new_validator_for_an_old_file_of_one_size(
    pod: Pod, tmp_path: Path, hub: FakeHub
) -> None:
    """An OnChange publish of a commit whose files keep their sizes is
    killed after its first rename; one of its remaining partials is then
    taken by another writer (adopted: renamed to that writer's name) that
    dies in turn. The writer that rolls the publish forward finds that
    partial gone and the destination "of its size" (the old file): it took
    it for renamed into place and recorded the new commit's blob id for the
    old bytes, and every later OnChange start kept the old file as new."""

    def kill() -> None:
        raise SimulatedKill

    cache = tmp_path / "cache"
    old, new = commit_files(1), commit_files(2)
    assert {r: len(d) for r, d in old.items()} == {r: len(d) for r, d in new.items()}
    hub.add_repo(REPO, old)
    env = hf_env(tmp_path, hub, LLMKUBE_REFRESH_POLICY="OnChange")
    first = pod.stage(env)
    assert first.error is None, first.stderr
    hub.move_branch(REPO, "main", new)
    with pytest.raises(SimulatedKill):
        pod.stage(env, on_line=interrupt_after_first_publish(kill))
    left = sorted(p for p in os.listdir(cache) if p.endswith(".llmkube-part.tmp"))
    assert left, "no partial left by the killed publish"
    rel = next(r for r in SHARDS if left[0].startswith(r + "."))
    key = left[0][len(rel) + 1 :].split(".")[0]
    os.rename(cache / left[0], cache / f"{rel}.{key}.0badc0de.llmkube-part.tmp")
    assert (cache / rel).read_bytes() == old[rel]

    for _ in range(2):
        run = pod.stage(env)
        assert run.error is None, run.stderr
    assert {r: (cache / r).read_bytes() for r in SHARDS} == new, "an old file kept as new"


def test_a_roll_forward_never_renames_a_partial_cut_short_over_the_old_file(
    pod: Pod, tmp_path: Path, hub: FakeHub
) -> None:
    """#32 item 7: with `_synced_whole`'s size check deleted every test
    passed. An OnChange publish is killed after its first rename and one of
    its remaining partials is then cut short (a sweep or a failing disk).
    The writer that rolls the publish forward must leave the old file in
    place for that entry (it serves until the new one is whole), never
    rename the short partial over it; stopped right after the roll-forward,
    the destination holds the old bytes or the new ones, whole."""

    def kill() -> None:
        raise SimulatedKill

    cache = tmp_path / "cache"
    old, new = commit_files(1), commit_files(2)
    hub.add_repo(REPO, old)
    env = hf_env(tmp_path, hub, LLMKUBE_REFRESH_POLICY="OnChange")
    assert pod.stage(env).error is None
    hub.move_branch(REPO, "main", new)
    with pytest.raises(SimulatedKill):
        pod.stage(env, on_line=interrupt_after_first_publish(kill))
    left = sorted(p for p in os.listdir(cache) if p.endswith(".llmkube-part.tmp"))
    assert left, "no partial left by the killed publish"
    rel = next(r for r in SHARDS if left[0].startswith(r + "."))
    os.truncate(cache / left[0], len(new[rel]) // 2)

    def stop_after_roll_forward(text: str) -> None:
        if "left halfway" in text:
            kill()

    with pytest.raises(SimulatedKill):
        pod.stage(env, on_line=stop_after_roll_forward)
    assert (cache / rel).read_bytes() in (old[rel], new[rel]), "a short partial was published"
    run = pod.stage(env)
    assert run.error is None, run.stderr
    assert {r: (cache / r).read_bytes() for r in SHARDS} == new
