"""A stamp binds to the bytes, not to what a cache says about a name
(#21 item 2). The race itself is in stamp_race.py; here on two bindfs
mounts whose kernels keep entries and attributes for 30 s (as real FUSE
drivers do), so A's node reports A's inode after B's rename, every run."""

from __future__ import annotations

from pathlib import Path

from stamp_race import assert_never_served_y, run_stamp_race, sha256_of

from tests.harness.mounts import TwoNodes


def test_a_stamp_never_vouches_for_another_writers_bytes(
    tmp_path: Path, caching_nodes: TwoNodes
) -> None:
    dest = caching_nodes.backing / "k" / "model.gguf"
    verdicts = run_stamp_race(tmp_path, caching_nodes.node1, caching_nodes.node2, dest.read_bytes)
    assert dest.read_bytes() == verdicts.y, "B published last"
    assert_never_served_y(verdicts)
    for verify, stage in (verdicts.while_stamped, verdicts.after):
        verify.failed("ModelTransferChecksumMismatch")
        # A serving pod on FUSE writes nothing: it refuses what it cannot fix.
        assert stage.returncode != 0, str(stage)
    stamp = Path(f"{dest}.sha256")
    assert not stamp.exists() or not stamp.read_text().startswith(sha256_of(verdicts.x)), (
        "A took back the stamp its bytes did not bear out"
    )
