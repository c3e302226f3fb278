"""Which read-only is a failing volume (#29 item 7): the mount table's two
sets of options, parsed from /proc/self/mountinfo text (proc(5)). The real
case (an ext4 that turns read-only under a transfer) is
tests/storage/test_storage_faults.py; here the kernels and mounts this
machine cannot make at once."""

from __future__ import annotations

from llmkube_stager.cache.fs import mount_options_of, turned

MOUNTINFO = "\n".join(
    [
        "22 1 0:21 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w",
        # Linux 6.x: ext4 after errors=remount-ro keeps the superblock "rw".
        "46 22 7:0 / /models rw,relatime shared:1 - ext4 /dev/loop0 "
        "rw,errors=remount-ro,emergency_ro",
        # Older kernels: the superblock turns "ro" under a "rw" mount.
        "47 22 7:1 / /old rw,relatime - ext4 /dev/loop1 ro,errors=remount-ro",
        # A Pod's readOnly volume: a read-only bind mount of a writable superblock.
        "48 22 7:2 /k /ro\\040cache ro,relatime - ext4 /dev/loop2 rw",
        "49 46 7:3 / /models/k1 rw,relatime - xfs /dev/loop3 rw",
    ]
)


def _turned(path: str) -> bool:
    options = mount_options_of(path, MOUNTINFO)
    assert options is not None
    return turned(*options)


def test_a_superblock_that_turned_read_only_under_a_read_write_mount_is_failing() -> None:
    assert _turned("/models/k0/model.gguf")
    assert _turned("/old/x")


def test_a_read_only_mount_is_the_access_mode() -> None:
    assert not _turned("/ro cache/model.gguf")
    assert not _turned("/tmp/x")


def test_the_last_longest_mount_point_decides() -> None:
    assert not _turned("/models/k1/model.gguf")  # a later, deeper mount of its own
