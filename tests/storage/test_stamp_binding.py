"""A stamp is bound to the file it was taken of (#29 item 2).

On plain ext4 and XFS (loop images), a file replaced by another of the same
size within the same mtime second keeps its name's `.sha256` stamp triple
(digest, size, mtime second) true, and a second file that differs from the
first only outside the three sampled blocks (their offsets depend on the
size alone) matches the evidence too. Before: a pod pinned to the old
digest got `stage` and `verify` exit 0 on the new bytes. Now a publish
retires the stamp and evidence of what it replaces, and a stamp is bound to
its file's inode and change time, so a writer that retires nothing (the
scripts' `mv`, an older agent) fools no reader either.

"Within the same second" is made so with `os.utime` (a fast writer on a
fast origin gets it for free; a test cannot wait for the clock).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmkube_stager.cache import evidence
from llmkube_stager.layout import EVIDENCE_SUFFIX
from tests.harness.blockdev import loop_fs
from tests.harness.disk import sha256
from tests.harness.hub import FakeHub
from tests.harness.modelsets import REPO, hf_env
from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload

SIZE_BYTES = 16 * evidence.BLOCK_BYTES
URL_PATH = "/m/model.gguf"
REL = "model.gguf"


def _x_and_y() -> tuple[bytes, bytes]:
    """Two files of SIZE_BYTES that differ only outside the sampled blocks."""
    x = payload(SIZE_BYTES, 29)
    changed_at = 2 * evidence.BLOCK_BYTES + 17
    assert all(not (o <= changed_at < o + evidence.BLOCK_BYTES) for o in evidence.offsets(len(x)))
    y = x[:changed_at] + bytes([x[changed_at] ^ 0xFF]) + x[changed_at + 1 :]
    return x, y


@contextlib.contextmanager
def _on_volume(tmp_path: Path, pod: Pod, fstype: str) -> Iterator[Pod]:
    with loop_fs(tmp_path / "vol", fstype) as fs:
        pod.models = fs.mount_point / "models"
        pod.cache_dir = pod.models / "k1"
        yield pod


@pytest.fixture(params=["ext4", "xfs"])
def volume_pod(request: pytest.FixtureRequest, tmp_path: Path, pod: Pod) -> Iterator[Pod]:
    with _on_volume(tmp_path, pod, request.param) as on_volume:
        yield on_volume


@pytest.fixture
def ext4_pod(tmp_path: Path, pod: Pod) -> Iterator[Pod]:
    """ext4 hands a freed inode number to the next file at once (XFS later)."""
    with _on_volume(tmp_path, pod, "ext4") as on_volume:
        yield on_volume


def _point(pod: Pod, origin: Origin) -> Path:
    """A one-file multi-file model (OnChange compares its recorded validator)."""
    pod.cache_dir = pod.multi(origin.url + "/m/", [REL])
    return pod.dest(REL)


def _pin(data: bytes) -> dict[str, str]:
    return {"MODEL_FILE_SHA256": f"{sha256(data)} {REL}"}


def _same_second(dest: Path, like: os.stat_result) -> None:
    os.utime(dest, ns=(like.st_atime_ns, like.st_mtime_ns))


def _stamped_x(pod: Pod, origin: Origin, x: bytes) -> tuple[Path, os.stat_result]:
    origin.put(URL_PATH, x)
    dest = _point(pod, origin)
    pod.run("stage", env=_pin(x)).ok()
    assert Path(f"{dest}.sha256").read_text().startswith(sha256(x))
    assert Path(f"{dest}{EVIDENCE_SUFFIX}").exists()
    return dest, dest.stat()


def _pinned_to_x_refuses(pod: Pod, x: bytes, y: bytes) -> None:
    """`verify` refuses Y; a pinned `stage` that exits 0 has X in place (it
    staged X again from the origin)."""
    dest = pod.dest(REL)
    assert dest.read_bytes() == y, "the test's premise: Y is in place"
    verify = pod.run("verify", env=_pin(x))
    verify.failed("ModelTransferChecksumMismatch")
    stage = pod.run("stage", env=_pin(x), LLMKUBE_PREFETCH_STAGER="false")
    served_y = stage.returncode == 0 and dest.read_bytes() != x
    assert not served_y, f"a pod pinned to X was served Y\n{stage}"


def test_an_unpinned_publish_retires_the_stamp_of_what_it_replaces(
    volume_pod: Pod, tmp_path: Path, hub: FakeHub
) -> None:
    """The issue's case: `main` moves to a commit whose file has the same
    size; an unpinned OnChange prefetch replaces X with Y."""
    pod = volume_pod
    x, y = _x_and_y()
    hub.add_repo(REPO, {REL: x})
    env = {**hf_env(tmp_path, hub), "CACHE_DIR": str(pod.cache_dir), "MODEL_FILES": REL}
    pod.run("stage", env=env, LLMKUBE_PREFETCH_STAGER="true").ok()
    pod.run("stage", env={**env, **_pin(x)}).ok()
    dest = pod.dest(REL)
    assert Path(f"{dest}.sha256").read_text().startswith(sha256(x))
    x_st = dest.stat()

    hub.move_branch(REPO, "main", {REL: y})
    run = pod.run("stage", env=env, LLMKUBE_REFRESH_POLICY="OnChange").ok()
    assert dest.read_bytes() == y, run.stderr
    _same_second(dest, x_st)

    verify = pod.run("verify", env={**env, **_pin(x)})
    verify.failed("ModelTransferChecksumMismatch")
    stage = pod.run("stage", env={**env, **_pin(x)}, HF_ENDPOINT="http://127.0.0.1:9")
    assert stage.returncode != 0, f"a pod pinned to X was served Y\n{stage}"
    assert not Path(f"{dest}.sha256").exists(), "the stamp of X outlived its file"
    assert not Path(f"{dest}{EVIDENCE_SUFFIX}").exists(), "X's evidence outlived its file"


def test_a_stamp_left_by_a_writer_that_retires_nothing_binds_to_its_inode(
    volume_pod: Pod, origin: Origin
) -> None:
    """The scripts publish with `mv "$MODEL_PARTIAL" "$MODEL_PATH"` and an
    older agent without retiring: our stamp and evidence of X stay beside
    their Y, which matches them in size, mtime second and sampled blocks."""
    pod = volume_pod
    x, y = _x_and_y()
    dest, x_st = _stamped_x(pod, origin, x)

    partial = dest.with_name("model.gguf.0123456789ab.tmp")
    partial.write_bytes(y)
    os.replace(partial, dest)
    _same_second(dest, x_st)

    assert dest.stat().st_ino != x_st.st_ino
    _pinned_to_x_refuses(pod, x, y)


def test_a_stamp_binds_to_its_change_time_where_the_inode_number_was_reused(
    ext4_pod: Pod, origin: Origin
) -> None:
    """X deleted and Y created: ext4 hands Y X's freed inode number, so the
    inode number alone does not tell the two files apart; their change
    times do."""
    pod = ext4_pod
    x, y = _x_and_y()
    dest, x_st = _stamped_x(pod, origin, x)

    os.unlink(dest)
    dest.write_bytes(y)
    _same_second(dest, x_st)

    assert dest.stat().st_ino == x_st.st_ino, "the premise: the inode number was reused"
    _pinned_to_x_refuses(pod, x, y)


def test_a_bound_stamp_of_an_unchanged_file_is_still_a_hit(volume_pod: Pod, origin: Origin) -> None:
    pod = volume_pod
    x, _ = _x_and_y()
    dest, _ = _stamped_x(pod, origin, x)

    run = pod.run("stage", env=_pin(x)).ok()
    assert "stamp hit" in run.stderr, run.stderr
    assert dest.read_bytes() == x


# -- stamps of the scripts, the metal agent and older agents (spec §4.2) -------------------


def _scripts_stamp(dest: Path, data: bytes) -> None:
    """The scripts' stamp: the triple, no evidence, written after the file."""
    st = dest.stat()
    tmp = dest.with_name(dest.name + ".llmkube-tmp.abcdef")
    tmp.write_text(f"{sha256(data)} {st.st_size} {int(st.st_mtime)}")
    os.replace(tmp, f"{dest}.sha256")


def test_a_scripts_stamp_of_an_unchanged_file_is_still_a_hit(
    volume_pod: Pod, origin: Origin
) -> None:
    pod = volume_pod
    x, _ = _x_and_y()
    origin.put(URL_PATH, x)
    dest = _point(pod, origin)
    dest.parent.mkdir(parents=True)
    dest.write_bytes(x)
    _scripts_stamp(dest, x)

    run = pod.run("stage", env=_pin(x)).ok()
    assert "stamp hit" in run.stderr, run.stderr


def test_a_scripts_stamp_is_not_trusted_over_a_file_replaced_after_it(
    volume_pod: Pod, origin: Origin
) -> None:
    """A stamp without binding (the scripts', the metal agent's, an older
    agent's evidence) is trusted only when it was put in place after its
    file last changed: a file renamed onto the name later is not its file."""
    pod = volume_pod
    x, y = _x_and_y()
    origin.put(URL_PATH, y)
    dest = _point(pod, origin)
    dest.parent.mkdir(parents=True)
    dest.write_bytes(x)
    _scripts_stamp(dest, x)
    x_st = dest.stat()

    partial = dest.with_name("model.gguf.0123456789ab.tmp")
    partial.write_bytes(y)
    os.replace(partial, dest)
    _same_second(dest, x_st)

    _pinned_to_x_refuses(pod, x, y)
