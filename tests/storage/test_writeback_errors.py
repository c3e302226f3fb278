"""A write-back error is never swallowed (#21 item 1).

ext4 or XFS on a loop device over a sparse image on a tmpfs smaller than
the image: the filesystem takes the writes, the loop device runs out of room
while writing them back, then gets room again. Linux reports such an error
once per open file (errseq): whichever call asks first (sync_file_range of
the write-back thread, the parallel journal's fdatasync) gets it, and the
publish fsync then returns 0 over pages that never reached the disk. The
transfer must fail with a storage reason, publish nothing, journal nothing
of it; `verify` must not pass; with room again, the next start stages the
right bytes (read back after a remount: from the device, not the page cache).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.blockdev import MIB, LoopFs, loop_fs
from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload

# The write-back thread starts a round every 64 MiB and reports a round's
# error at the next one's wait: the error of 64-128 MiB is seen at 192 MiB,
# and the file must go on after that for the publish fsync to succeed.
SIZE = 224 * MIB + 4093
BACKING_BYTES = 100 * MIB  # the loop device's store fills at ~95 MiB of data
STORAGE_REASONS = {"ModelTransferOutOfSpace", "ModelCacheFailing"}


@pytest.fixture
def ext4(tmp_path: Path) -> Iterator[LoopFs]:
    with loop_fs(tmp_path / "vol", "ext4", 512 * MIB, backing_bytes=BACKING_BYTES) as fs:
        yield fs


@pytest.fixture(params=["ext4", "xfs"])
def loopfs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LoopFs]:
    with loop_fs(tmp_path / "vol", request.param, 512 * MIB, backing_bytes=BACKING_BYTES) as fs:
        yield fs


class _RoomAgain:
    """Gives the loop device's store room again shortly after it filled
    (the issue's "runs out of space for a while")."""

    def __init__(self, fs: LoopFs) -> None:
        self._fs = fs
        self._stop = threading.Event()
        self.filled = False
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._fs.backing_free_bytes() < MIB:
                self.filled = True
                time.sleep(0.2)
                self._fs.grow_backing(2048 * MIB)
                return
            time.sleep(0.005)

    def __enter__(self) -> _RoomAgain:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.parametrize("connections", ["1", "4"], ids=["stream", "parallel"])
def test_a_writeback_error_fails_the_transfer_and_publishes_nothing(
    loopfs: LoopFs, origin: Origin, pod: Pod, connections: str
) -> None:
    data = payload(SIZE, 21)
    # Paced so that the store fills in the middle of the file.
    origin.put("/m/model.gguf", data, rate_bytes_per_s=96 * MIB)
    pod.models = loopfs.mount_point / "models"
    dest = pod.single(origin.url + "/m/model.gguf")
    pod.env.update(LLMKUBE_CONNECTIONS=connections, LLMKUBE_DIRECT_IO="off")

    with _RoomAgain(loopfs) as room:
        run = pod.run("stage", timeout=60)
    assert room.filled, "the loop device's store never filled: the test proves nothing"

    doc = run.failed().term
    assert doc["reason"] in STORAGE_REASONS, doc
    assert not dest.exists(), "a file whose write-back failed was published"
    pod.run("verify").failed()

    again = pod.run("stage", timeout=60)
    again.ok()
    loopfs.remount()
    assert hashlib.sha256(dest.read_bytes()).digest() == hashlib.sha256(data).digest(), (
        "the published file is not the origin's on the device"
    )


def test_roll_forward_fsyncs_another_writers_partial_and_fails_on_its_error(
    ext4: LoopFs,
) -> None:
    """A writer died between its publish intent and its renames, its
    partial's pages still dirty: the next writer's roll-forward must fsync
    them before the rename, and a failing fsync renames nothing."""
    from llmkube_stager.cache.publish import roll_forward
    from llmkube_stager.errors import StagerError

    directory = ext4.mount_point / "models" / "k"
    directory.mkdir(parents=True)
    partial, dest = directory / "model.gguf.abc.llmkube-part", directory / "model.gguf"
    size = 160 * MIB
    # The dead writer: its bytes in the page cache only (no fsync), more
    # than the loop device's store can take.
    subprocess.run(
        [sys.executable, "-c", _WRITE_NO_FSYNC, str(partial), str(size)], check=True, timeout=60
    )

    with pytest.raises(StagerError) as caught:
        roll_forward(str(dest), partial.name, size)

    assert caught.value.reason.value in STORAGE_REASONS, caught.value
    assert not dest.exists(), "a partial whose data never reached the disk was renamed into place"


_WRITE_NO_FSYNC = """
import os, sys
path, size = sys.argv[1], int(sys.argv[2])
block = os.urandom(1 << 20)
with open(path, "wb") as out:
    for _ in range(size >> 20):
        out.write(block)
"""
