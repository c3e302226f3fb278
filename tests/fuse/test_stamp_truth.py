"""A stamp binds to the bytes, not to what a cache says about a name
(#21 item 2). The race itself is tests/harness/stamp_race.py; here on two bindfs
mounts whose kernels keep entries and attributes for 30 s (as real FUSE
drivers do), so A's node reports A's inode after B's rename, every run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmkube_stager.cache import evidence
from llmkube_stager.cache.records import stamp_matches, stamp_status
from llmkube_stager.layout import EVIDENCE_SUFFIX
from tests.harness.disk import sha256
from tests.harness.hub import FakeHub
from tests.harness.modelsets import REPO, hf_env
from tests.harness.mounts import FuseCache, TwoNodes
from tests.harness.pod import Pod
from tests.harness.stamp_race import assert_never_served_y, run_stamp_race


def test_a_stamp_never_vouches_for_another_writers_bytes(
    tmp_path: Path, caching_nodes: TwoNodes
) -> None:
    dest = caching_nodes.backing / "k" / "model.gguf"
    verdicts = run_stamp_race(tmp_path, caching_nodes.node1, caching_nodes.node2)
    assert dest.read_bytes() == verdicts.y, "B published last"
    assert_never_served_y(verdicts)
    for (verify, _), (stage, _) in (verdicts.while_stamped, verdicts.after):
        verify.failed("ModelTransferChecksumMismatch")
        # A serving pod on FUSE writes nothing: it refuses what it cannot fix.
        assert stage.returncode != 0, str(stage)
    stamp = Path(f"{dest}.sha256")
    assert not stamp.exists() or not stamp.read_text().startswith(sha256(verdicts.x)), (
        "A took back the stamp its bytes did not bear out"
    )


# -- the reader's rule, on a plain directory -------------------------------------------


def _stamped(tmp_path: Path, data: bytes, evidence_of: bytes | None) -> tuple[Path, str]:
    """A file stamped for `data`'s digest, with the evidence of `evidence_of`
    (None: no evidence, as the scripts and the metal agent stamp)."""
    dest = tmp_path / "k" / "model.gguf"
    dest.parent.mkdir(parents=True)
    dest.write_bytes(data)
    st = dest.stat()
    digest = sha256(data)
    Path(f"{dest}.sha256").write_text(f"{digest} {st.st_size} {int(st.st_mtime)}")
    if evidence_of is not None:
        other = tmp_path / "other"
        other.write_bytes(evidence_of)
        fd = os.open(other, os.O_RDONLY)
        try:
            seen = evidence.of_descriptor(fd, len(evidence_of))
        finally:
            os.close(fd)
        line = f"{evidence.SCHEME} {digest} {st.st_size} {int(st.st_mtime)} {seen}"
        Path(f"{dest}{EVIDENCE_SUFFIX}").write_text(line)
    return dest, digest


@pytest.mark.parametrize(
    ("evidence_of", "trusted"),
    [("same", True), ("other", False), (None, True)],
    ids=["evidence-of-these-bytes", "evidence-of-other-bytes", "no-evidence-legacy"],
)
def test_a_stamp_is_trusted_only_as_far_as_its_evidence_matches_the_bytes(
    tmp_path: Path, evidence_of: str | None, trusted: bool
) -> None:
    x, y = os.urandom(3 * 4096 + 17), os.urandom(3 * 4096 + 17)
    vouched = {"same": x, "other": y, None: None}[evidence_of]
    dest, digest = _stamped(tmp_path, x, vouched)
    assert stamp_matches(str(dest), digest, dest.stat()) is trusted
    # What `inspect` reports of it.
    assert stamp_status(str(dest), dest.stat()) == ("matches" if trusted else "contradicted")


# -- #29 item 2 on FUSE: a publish retires the stamp of what it replaces ------------------


def test_an_unpinned_publish_on_fuse_retires_the_stamp_of_what_it_replaces(
    tmp_path: Path, hub: FakeHub, fuse_cache: FuseCache
) -> None:
    """Where inode numbers and change times are not the stamp's binding
    (FUSE: rclone numbers inodes by path, s3fs per node), the publish that
    replaces a file must take its stamp and evidence away: `main` moves to
    a commit whose file has the same size and differs only outside the
    sampled blocks, an unpinned OnChange prefetch replaces it. Before: a
    pod pinned to the old digest got `verify` exit 0 on the new bytes."""
    x = os.urandom(16 * evidence.BLOCK_BYTES)
    changed_at = 2 * evidence.BLOCK_BYTES + 17
    y = x[:changed_at] + bytes([x[changed_at] ^ 0xFF]) + x[changed_at + 1 :]
    rel = "model.gguf"
    cache = fuse_cache.mnt / "k"
    hub.add_repo(REPO, {rel: x})
    env = {**hf_env(tmp_path, hub), "CACHE_DIR": str(cache), "MODEL_FILES": rel}
    pinned = {**env, "MODEL_FILE_SHA256": f"{sha256(x)} {rel}"}
    pod = Pod(tmp_path, stager=True)
    pod.run("stage", env=pinned).ok()
    assert Path(f"{cache / rel}.sha256").read_text().startswith(sha256(x))
    x_st = (cache / rel).stat()

    hub.move_branch(REPO, "main", {rel: y})
    pod.run("stage", env=env, LLMKUBE_REFRESH_POLICY="OnChange").ok()
    assert (cache / rel).read_bytes() == y
    os.utime(cache / rel, ns=(x_st.st_atime_ns, x_st.st_mtime_ns))  # the same second

    pod.run("verify", env=pinned).failed("ModelTransferChecksumMismatch")
    assert not Path(f"{cache / rel}.sha256").exists(), "the stamp of X outlived its file"
    assert not Path(f"{cache / rel}{EVIDENCE_SUFFIX}").exists()
