"""Storage faults are the volume's reasons, not bugs (#21 item 7).

On real storage: EIO under a transfer (an XFS forced shutdown), ENOTCONN
(the bindfs daemon of a FUSE mount killed under a prefetch stager), and a
volume without a free inode (a tiny ext4 made with few inodes) each end with
a cache reason whose remedy fits, the contract's exit code, no traceback.
A refused preflight leaves no empty partial; a transfer cut by a full tmpfs
keeps what it wrote, and the next start resumes from it.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from llmkube_stager.errors import (
    REMEDY_CACHE_DISCONNECTED,
    REMEDY_CACHE_FAILING,
    REMEDY_CACHE_TURNED_READ_ONLY,
    REMEDY_OUT_OF_INODES,
    REMEDY_UNWRITABLE,
)
from tests.harness.blockdev import MIB, loop_fs
from tests.harness.disk import debris
from tests.harness.features import missing_feature
from tests.harness.mounts import fuse_missing, mount_bindfs, tmpfs, unmount
from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload


def _wait_for(what: str, check: Callable[[], bool], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _partial_bytes(directory: Path) -> int:
    """Bytes written into the partials under `directory` (0 while there is
    none): what is allocated, since the parallel engine's data file is
    sparse, sized to the whole file from the start."""
    try:
        return sum(
            min(st.st_size, st.st_blocks * 512)
            for entry in directory.iterdir()
            if ".llmkube-" in entry.name or entry.name.endswith(".tmp")
            for st in (entry.stat(),)
        )
    except OSError:
        return 0


def _stage_until_partial(pod: Pod, at_least: int) -> subprocess.Popen[str]:
    proc = pod.popen("stage")
    _wait_for(
        "the transfer to write its partial",
        lambda: _partial_bytes(pod.cache_dir) >= at_least or proc.poll() is not None,
    )
    assert proc.poll() is None, "the stage ended before the fault was injected"
    return proc


def test_eio_under_a_transfer_is_a_failing_volume(tmp_path: Path, origin: Origin, pod: Pod) -> None:
    """`xfs_io -x -c shutdown` while the partial is being written."""
    origin.put("/m/model.gguf", payload(24 * MIB, 7), rate_bytes_per_s=8 * MIB)
    with loop_fs(tmp_path / "vol", "xfs") as xfs:
        pod.models = xfs.mount_point / "models"
        pod.cache_dir = pod.models / "k1"
        pod.single(origin.url + "/m/model.gguf")
        proc = _stage_until_partial(pod, 2 * MIB)

        xfs.shutdown()
        run = pod.finish(proc, 30)

        doc = run.failed("ModelCacheFailing", exit_code=4, retryable=False).term
        assert doc["remedy"] == REMEDY_CACHE_FAILING
        assert doc["file"] == "model.gguf", doc


@pytest.mark.parametrize("connections", ["1", "4"], ids=["stream", "parallel"])
def test_an_ext4_that_turns_read_only_under_a_transfer_is_a_failing_volume(
    tmp_path: Path, origin: Origin, pod: Pod, connections: str
) -> None:
    """#29 item 7: ext4 mounted `errors=remount-ro` raises an error while the
    partial is being written; every write after it is EROFS. The volume was
    writable when the run began: it is failing (before: ModelCacheUnwritable,
    "check the volume's access mode, fsGroup")."""
    origin.put("/m/model.gguf", payload(24 * MIB, 8), rate_bytes_per_s=8 * MIB)
    with loop_fs(tmp_path / "vol", "ext4", mount_options="errors=remount-ro") as ext4:
        pod.models = ext4.mount_point / "models"
        pod.cache_dir = pod.models / "k1"
        pod.single(origin.url + "/m/model.gguf")
        pod.env["LLMKUBE_CONNECTIONS"] = connections
        proc = _stage_until_partial(pod, 2 * MIB)

        ext4.fail_ext4()
        run = pod.finish(proc, 30)

        doc = run.failed("ModelCacheFailing", exit_code=4, retryable=False).term
        assert doc["remedy"] == REMEDY_CACHE_TURNED_READ_ONLY
        assert doc["file"] == "model.gguf", doc


def test_an_ext4_turned_read_only_before_the_run_is_a_failing_volume(
    tmp_path: Path, origin: Origin, pod: Pod
) -> None:
    """The ext4 failed under an earlier run and stays read-only: a writer
    that must write (the model changed upstream) is told the volume is
    failing, not to check an access mode that is read-write. (A reader of
    an unchanged model reads it as before.)"""
    origin.put("/m/model.gguf", payload(256 * 1024, 13))
    with loop_fs(tmp_path / "vol", "ext4", mount_options="errors=remount-ro") as ext4:
        pod.models = ext4.mount_point / "models"
        pod.cache_dir = pod.models / "k1"
        pod.single(origin.url + "/m/model.gguf")
        pod.run("stage").ok()
        origin.put("/m/model.gguf", payload(300 * 1024, 14))
        ext4.fail_ext4()

        run = pod.run("stage", LLMKUBE_PREFETCH_STAGER="true", LLMKUBE_REFRESH_POLICY="OnChange")

        doc = run.failed("ModelCacheFailing", exit_code=4, retryable=False).term
        assert doc["remedy"] == REMEDY_CACHE_TURNED_READ_ONLY
        pod.run("verify").ok()


def test_an_ext4_mounted_read_only_is_still_unwritable(
    tmp_path: Path, origin: Origin, pod: Pod
) -> None:
    """A volume read-only from the start (a read-only mount) is the access
    mode's: ModelCacheUnwritable with its remedy, as before."""
    origin.put("/m/model.gguf", payload(256 * 1024, 15))
    with loop_fs(tmp_path / "vol", "ext4", mount_options="ro") as ext4:
        pod.models = ext4.mount_point / "models"
        pod.cache_dir = pod.models / "k1"
        pod.single(origin.url + "/m/model.gguf")

        run = pod.run("stage", LLMKUBE_PREFETCH_STAGER="true")

        doc = run.failed("ModelCacheUnwritable").term
        assert doc["remedy"] == REMEDY_UNWRITABLE


def _bindfs_pid(mount_point: Path) -> int:
    target = os.path.realpath(mount_point)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"bindfs") and target.encode() in argv:
            return int(entry)
    raise AssertionError(f"no bindfs process serves {mount_point}")


def test_enotconn_under_a_prefetch_is_a_dead_mount(
    tmp_path: Path, origin: Origin, pod: Pod
) -> None:
    """The FUSE daemon (bindfs) is killed while a prefetch stager writes."""
    missing = fuse_missing()
    if missing is not None:
        missing_feature(missing)
    origin.put("/m/model.gguf", payload(24 * MIB, 8), rate_bytes_per_s=8 * MIB)
    backing, mount_point = tmp_path / "backing", tmp_path / "fuse"
    backing.mkdir()
    mount_bindfs(backing, mount_point)
    try:
        pod.models = mount_point / "models"
        pod.cache_dir = pod.models / "k1"
        pod.single(origin.url + "/m/model.gguf")
        pod.env["LLMKUBE_PREFETCH_STAGER"] = "true"
        proc = _stage_until_partial(pod, 2 * MIB)

        os.kill(_bindfs_pid(mount_point), signal.SIGKILL)
        run = pod.finish(proc, 30)

        doc = run.failed("ModelCacheDisconnected", exit_code=1, retryable=True).term
        assert doc["remedy"] == REMEDY_CACHE_DISCONNECTED
        # What it wrote is in the backing directory, for the next pod's mount.
        assert _partial_bytes(backing / "models" / "k1") >= 2 * MIB
    finally:
        unmount(mount_point)


@pytest.mark.parametrize("model_dir", ["exists", "missing"])
def test_no_free_inode_is_out_of_space_with_the_inode_remedy(
    tmp_path: Path, origin: Origin, pod: Pod, model_dir: str
) -> None:
    """A tiny ext4 made with few inodes, all taken: bytes to spare."""
    origin.put("/m/model.gguf", payload(64 * 1024, 9))
    with loop_fs(tmp_path / "vol", "ext4", 16 * MIB, inodes=32) as ext4:
        pod.models = ext4.mount_point / "models"
        pod.cache_dir = pod.models / "k1"
        pod.single(origin.url + "/m/model.gguf")
        if model_dir == "exists":
            pod.cache_dir.mkdir(parents=True)
        filler = ext4.mount_point / "filler"
        filler.mkdir()
        with pytest.raises(OSError):
            for i in range(10_000):
                (filler / str(i)).touch()
        assert os.statvfs(ext4.mount_point).f_bavail > 8 * MIB // 4096, "bytes must be free"

        run = pod.run("stage")

        doc = run.failed("ModelTransferOutOfSpace", exit_code=4).term
        assert doc["remedy"] == REMEDY_OUT_OF_INODES, doc
        assert "inode" in doc["message"], doc


def test_a_refused_preflight_leaves_no_empty_partial(
    tmp_path: Path, origin: Origin, pod: Pod
) -> None:
    origin.put("/m/model.gguf", payload(3 * MIB, 10))
    with tmpfs(tmp_path / "vol", "size=2m,mode=0755") as volume:
        pod.models = volume / "models"
        pod.cache_dir = pod.models / "k1"
        pod.single(origin.url + "/m/model.gguf")

        run = pod.run("stage")

        run.failed("ModelTransferOutOfSpace", exit_code=4)
        assert debris(pod.cache_dir) == [], "the refusal left a partial"


@pytest.mark.parametrize(
    ("engine", "size", "volume_size"),
    [("stream", 16 * MIB + 321, "24m"), ("parallel", 72 * MIB + 321, "96m")],
)
def test_a_transfer_cut_by_a_full_tmpfs_keeps_its_bytes_for_the_next_start(
    tmp_path: Path, origin: Origin, pod: Pod, engine: str, size: int, volume_size: str
) -> None:
    data = payload(size, 11)
    origin.put("/m/model.gguf", data, rate_bytes_per_s=8 * MIB)
    with tmpfs(tmp_path / "vol", f"size={volume_size},mode=0755") as volume:
        pod.models = volume / "models"
        pod.cache_dir = pod.models / "k1"
        dest = pod.single(origin.url + "/m/model.gguf")
        # Through the page cache, 72 MiB go over ranged connections at once
        # (engine.py's page-cache split), with their resume journal.
        pod.env.update(
            LLMKUBE_DIRECT_IO="off", LLMKUBE_CONNECTIONS="1" if engine == "stream" else "2"
        )
        # The parallel engine's journal claims what it committed (every
        # 0.25 s while young): past a few commits before the volume fills.
        at_least = 4 * MIB if engine == "stream" else 12 * MIB
        proc = _stage_until_partial(pod, at_least)
        _fill(volume / "filler")

        run = pod.finish(proc, 30)

        run.failed("ModelTransferOutOfSpace", exit_code=4)
        kept = _partial_bytes(pod.cache_dir)
        assert kept >= at_least, f"the partial kept {kept} bytes"
        (volume / "filler").unlink()
        served_before = sum(r.body_bytes for r in origin.requests("/m/model.gguf", "GET"))

        pod.run("stage").ok()

        assert hashlib.sha256(dest.read_bytes()).digest() == hashlib.sha256(data).digest()
        served = sum(r.body_bytes for r in origin.requests("/m/model.gguf", "GET")) - served_before
        # What was in flight since the last journal commit may be fetched again.
        slack = MIB if engine == "stream" else 8 * MIB
        assert served <= len(data) - kept + slack, f"the next start fetched {served} bytes"
        assert served < len(data) - at_least // 2, "the next start did not resume"


def _fill(path: Path) -> None:
    """Write until the volume is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"\0" * MIB):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


@pytest.mark.parametrize("command", ["stage", "verify"])
def test_a_failing_volume_under_a_warm_cache_is_its_reason(
    tmp_path: Path, origin: Origin, pod: Pod, command: str
) -> None:
    """The volume fails before the run (an XFS shut down under a staged
    model): EIO reading the cache is the volume's failure, not a file this
    uid cannot read (the fsGroup remedy would send the user the wrong way)."""
    origin.put("/m/model.gguf", payload(256 * 1024, 12))
    with loop_fs(tmp_path / "vol", "xfs") as xfs:
        pod.models = xfs.mount_point / "models"
        pod.cache_dir = pod.models / "k1"
        pod.single(origin.url + "/m/model.gguf")
        pod.run("stage").ok()
        xfs.shutdown()

        run = pod.run(command)

        doc = run.failed("ModelCacheFailing", exit_code=4).term
        assert doc["remedy"] == REMEDY_CACHE_FAILING
