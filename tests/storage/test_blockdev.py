"""The loop-device harness (#21 item 10) undoes what it makes, even when
the test fails inside it, and its filesystems are the real thing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.harness.blockdev import MIB, loop_fs
from tests.harness.mounts import is_mounted


def _attached(device: str) -> bool:
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=False).stdout
    return any(line.startswith(device + ":") for line in out.splitlines())


@pytest.mark.parametrize("fstype", ["ext4", "xfs"])
def test_teardown_detaches_and_unmounts_after_a_failure(tmp_path: Path, fstype: str) -> None:
    seen = {}
    with pytest.raises(RuntimeError, match="inside"), loop_fs(tmp_path / "v", fstype) as fs:
        seen.update(device=fs.device, backing=fs.backing)
        assert is_mounted(fs.mount_point)
        fstypes = Path("/proc/self/mounts").read_text()
        assert f"{fs.device} {os.path.realpath(fs.mount_point)} {fstype} " in fstypes
        (fs.mount_point / "f").write_bytes(b"x" * MIB)
        raise RuntimeError("a failure inside")
    assert not is_mounted(tmp_path / "v")
    assert not _attached(seen["device"]), "the loop device is still attached"
    assert not is_mounted(seen["backing"]), "the backing tmpfs is still mounted"


def test_remount_reads_from_the_device_and_grow_gives_room(tmp_path: Path) -> None:
    with loop_fs(tmp_path / "v", "ext4", 64 * MIB, backing_bytes=16 * MIB) as fs:
        free = fs.backing_free_bytes()
        fs.grow_backing(80 * MIB)
        assert fs.backing_free_bytes() > free + 32 * MIB
        (fs.mount_point / "f").write_bytes(b"y" * 4096)
        fs.remount()
        assert (fs.mount_point / "f").read_bytes() == b"y" * 4096
