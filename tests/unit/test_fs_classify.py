"""cache.fs: the mount table (psutil), mount lookup and FUSE classification (spec §9.2)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from llmkube_stager.cache.fs import (
    FUSE_SUPER_MAGIC,
    MountEntry,
    classify,
    mount_for,
    mount_table,
    probe_fs,
    probe_fs_quick,
)
from tests.harness.features import missing_feature

EXT4_MAGIC = 0xEF53
XFS_MAGIC = 0x58465342
NFS_MAGIC = 0x6969

# (mount point, type, source, options) as the kernel's table shows them.
MOUNTS = [
    ("/", "ext4", "/dev/nvme0n1p2", "rw,relatime,errors=remount-ro"),
    ("/proc", "proc", "proc", "rw,nosuid,nodev,noexec,relatime"),
    ("/models", "fuse.bindfs", "bindfs", "rw,nosuid,nodev,relatime,user_id=0,allow_other"),
    ("/mnt/blob", "fuse.blobfuse2", "blobfuse2", "rw,nosuid,nodev,relatime,allow_other"),
    ("/run/desktop/mnt/host", "virtiofs", "virtiofs0", "rw,relatime"),
    ("/data/my models", "xfs", "/dev/sdb1", "rw,relatime,attr2,inode64"),
    ("/ro-cache", "ext4", "/dev/sdc1", "ro,relatime"),
    ("/models2", "nfs4", "server:/export", "rw,relatime,vers=4.1,hard"),
    ("/mnt/s3", "fuse", "s3fs", "rw,nosuid,nodev,user_id=0,group_id=0"),
    ("/mnt/ntfs", "fuseblk", "/dev/sdd1", "rw,relatime,user_id=0"),
    ("/models/sub", "tmpfs", "tmpfs", "rw,relatime,size=1024k"),
]


def table(*rows: tuple[str, str, str, str]) -> list[MountEntry]:
    return [MountEntry(p, t, src, frozenset(o.split(","))) for p, t, src, o in rows]


@pytest.fixture(scope="module")
def entries() -> list[MountEntry]:
    return table(*MOUNTS)


# --- the real mount table (psutil) -------------------------------------------------------------


def test_the_mount_table_has_the_root_and_the_tmp_directory(tmp_path: Path) -> None:
    mounts = mount_table()
    assert any(m.mount_point == "/" for m in mounts), mounts
    found = mount_for(os.path.realpath(tmp_path), mounts)
    assert found is not None and found.fstype, mounts


def test_a_mount_point_with_a_space_is_decoded(tmp_path: Path) -> None:
    """The kernel escapes a space as \\040; the table must give it back."""
    if os.geteuid() != 0:
        missing_feature("needs root to mount a tmpfs")
    point = tmp_path / "my models"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(point)], check=True)
    try:
        found = mount_for(str(point / "k"), mount_table())
        assert found is not None
        assert (found.mount_point, found.fstype) == (str(point), "tmpfs")
        assert probe_fs(str(point)).fstype == "tmpfs"
        quick = probe_fs_quick(str(point))
        assert (quick.fstype, quick.is_fuse, quick.direct_io_ok) == ("tmpfs", False, False)
    finally:
        subprocess.run(["umount", str(point)], check=True)


def test_the_quick_probe_agrees_with_the_full_one(tmp_path: Path) -> None:
    full, quick = probe_fs(str(tmp_path)), probe_fs_quick(str(tmp_path))
    assert (quick.is_fuse, quick.read_only, quick.direct_io_ok) == (
        full.is_fuse,
        full.read_only,
        full.direct_io_ok,
    )


# --- mount_for -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "point"),
    [
        ("/models/0123456789abcdef", "/models"),
        ("/models", "/models"),
        ("/models/sub/x", "/models/sub"),  # longest prefix wins
        ("/models2/k", "/models2"),
        ("/models-other/k", "/"),  # a sibling with a common prefix is not /models
        ("/modelsx", "/"),
        ("/data/my models/k", "/data/my models"),
        ("/etc/hosts", "/"),
    ],
)
def test_mount_for_picks_the_longest_matching_mount(
    entries: list[MountEntry], path: str, point: str
) -> None:
    found = mount_for(path, entries)
    assert found is not None
    assert found.mount_point == point


def test_mount_for_does_not_match_models2_for_models() -> None:
    entries = table(("/", "ext4", "/dev/root", "rw"), ("/models2", "fuse.bindfs", "bindfs", "rw"))
    found = mount_for("/models/k", entries)
    assert found is not None
    assert found.mount_point == "/"


def test_mount_for_last_of_stacked_mounts_wins() -> None:
    entries = table(
        ("/", "ext4", "/dev/root", "rw"),
        ("/models", "ext4", "/dev/a", "rw"),
        ("/models", "fuse.blobfuse2", "blobfuse2", "rw"),
    )
    found = mount_for("/models/k", entries)
    assert found is not None
    assert found.fstype == "fuse.blobfuse2"


def test_mount_for_without_entries() -> None:
    assert mount_for("/models/k", []) is None


# --- classify ------------------------------------------------------------------------------------


def mount(fstype: str, source: str = "src", options: str = "rw") -> MountEntry:
    return MountEntry("/models", fstype, source, frozenset(options.split(",")))


def test_fuse_magic_is_fuse() -> None:
    info = classify("/models/k", FUSE_SUPER_MAGIC, mount("fuse.blobfuse2", "blobfuse2"), False, 0)
    assert FUSE_SUPER_MAGIC == 0x65735546
    assert info.is_fuse is True
    assert info.lock_scope == "node-local"
    assert info.driver == "blobfuse2"
    assert info.fstype == "fuse.blobfuse2"
    assert info.free_space_meaningful is False


def test_fuse_magic_without_a_mount_entry() -> None:
    info = classify("/models/k", FUSE_SUPER_MAGIC, None, False, None)
    assert info.is_fuse is True
    assert info.fstype == "fuse"
    assert info.driver == "unknown"


def test_virtiofs_reports_the_fuse_magic_and_is_fuse() -> None:
    info = classify("/models/k", FUSE_SUPER_MAGIC, mount("virtiofs", "virtiofs0"), False, 10**9)
    assert info.is_fuse is True
    assert info.driver == "virtiofs"


@pytest.mark.parametrize("magic", [EXT4_MAGIC, XFS_MAGIC, NFS_MAGIC])
def test_other_magic_is_not_fuse(magic: int) -> None:
    info = classify("/models/k", magic, mount("ext4", "/dev/sda1"), False, 10**9)
    assert info.is_fuse is False
    assert info.lock_scope == "cross-node"
    assert info.driver == "ext4"
    assert info.free_space_meaningful is True
    assert info.free_bytes == 10**9


@pytest.mark.parametrize(
    ("fstype", "source", "is_fuse", "driver"),
    [
        ("fuse.bindfs", "bindfs", True, "bindfs"),
        ("fuse.blobfuse2", "blobfuse2", True, "blobfuse2"),
        ("fuse.fuse-overlayfs", "fuse-overlayfs", True, "fuse-overlayfs"),
        ("fuse", "s3fs", True, "s3fs"),
        # A path is the backing device or directory, not a driver name.
        ("fuseblk", "/dev/sdd1", True, "fuseblk"),
        ("fuse", "/srv/backing", True, "fuse"),
        ("virtiofs", "virtiofs0", True, "virtiofs"),
        ("ext4", "/dev/sda1", False, "ext4"),
        ("nfs4", "server:/export", False, "nfs4"),
        ("ceph", "10.0.0.1:/", False, "ceph"),
        ("overlay", "overlay", False, "overlay"),
    ],
)
def test_without_f_type_falls_back_to_the_mount_fstype(
    fstype: str, source: str, is_fuse: bool, driver: str
) -> None:
    info = classify("/models/k", None, mount(fstype, source), False, 123)
    assert info.is_fuse is is_fuse
    assert info.driver == driver
    assert info.fstype == fstype
    assert info.lock_scope == ("node-local" if is_fuse else "cross-node")


def test_f_type_wins_over_the_mount_table() -> None:
    info = classify("/models/k", EXT4_MAGIC, mount("fuse.bindfs", "bindfs"), False, 1)
    assert info.is_fuse is False


def test_nothing_known_is_unknown() -> None:
    info = classify("/models/k", None, None, False, None)
    assert info.is_fuse is None
    assert info.lock_scope == "unknown"
    assert info.fstype == "unknown"
    assert info.driver == "unknown"
    assert info.free_space_meaningful is False
    assert info.path == "/models/k"


def test_read_only_from_mount_options() -> None:
    info = classify("/models/k", EXT4_MAGIC, mount("ext4", options="ro,relatime"), False, 1)
    assert info.read_only is True


def test_read_only_from_statvfs() -> None:
    info = classify("/models/k", EXT4_MAGIC, mount("ext4", options="rw"), True, 1)
    assert info.read_only is True


def test_read_write() -> None:
    info = classify("/models/k", EXT4_MAGIC, mount("ext4", options="rw,relatime"), False, 1)
    assert info.read_only is False


def test_an_option_containing_ro_is_not_read_only() -> None:
    info = classify(
        "/models/k", EXT4_MAGIC, mount("ext4", options="rw,errors=remount-ro"), False, 1
    )
    assert info.read_only is False


@pytest.mark.parametrize("free", [0, 10**15, None])
def test_free_space_is_never_meaningful_on_fuse(free: int | None) -> None:
    info = classify("/models/k", FUSE_SUPER_MAGIC, mount("fuse.blobfuse2"), False, free)
    assert info.free_space_meaningful is False


def test_end_to_end_from_the_table(entries: list[MountEntry]) -> None:
    info = classify("/models/k", None, mount_for("/models/k", entries), False, None)
    assert (info.is_fuse, info.driver) == (True, "bindfs")
    info = classify("/ro-cache/k", None, mount_for("/ro-cache/k", entries), False, None)
    assert (info.is_fuse, info.read_only) == (False, True)
    info = classify("/models/sub/k", None, mount_for("/models/sub/k", entries), False, None)
    assert (info.is_fuse, info.driver) == (False, "tmpfs")
