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
from tests.harness.mounts import TwoNodes
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
