"""cache.fs, pure parts: mountinfo parsing, mount lookup and FUSE classification (spec §9.2)."""

from __future__ import annotations

import pytest

from llmkube_stager.cache.fs import (
    FUSE_SUPER_MAGIC,
    MountEntry,
    classify,
    mount_for,
    parse_mountinfo,
)

EXT4_MAGIC = 0xEF53
XFS_MAGIC = 0x58465342
NFS_MAGIC = 0x6969

MOUNTINFO = "\n".join(
    [
        "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro",
        "25 22 0:23 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw",
        "100 22 0:50 / /models rw,nosuid,nodev,relatime shared:50 - fuse.bindfs bindfs "
        "rw,user_id=0,group_id=0,default_permissions,allow_other",
        "101 22 0:51 / /mnt/blob rw,nosuid,nodev,relatime - fuse.blobfuse2 blobfuse2 "
        "rw,user_id=0,group_id=0,allow_other",
        "102 22 0:52 / /run/desktop/mnt/host rw,relatime - virtiofs virtiofs0 rw",
        r"103 22 259:3 / /data/my\040models rw,relatime - xfs /dev/sdb1 rw,attr2,inode64",
        "104 22 259:4 /cache /ro-cache ro,relatime master:7 - ext4 /dev/sdc1 rw",
        "105 22 0:53 / /models2 rw,relatime - nfs4 server:/export rw,vers=4.1,hard",
        "106 22 0:54 / /mnt/s3 rw,nosuid,nodev - fuse s3fs rw,user_id=0,group_id=0",
        "107 22 0:55 / /mnt/ntfs rw,relatime - fuseblk /dev/sdd1 rw,user_id=0",
        "108 100 0:56 / /models/sub rw,relatime - tmpfs tmpfs rw,size=1024k",
    ]
)


@pytest.fixture(scope="module")
def entries() -> list[MountEntry]:
    return parse_mountinfo(MOUNTINFO)


def by_point(entries: list[MountEntry], point: str) -> MountEntry:
    (entry,) = [e for e in entries if e.mount_point == point]
    return entry


# --- parse_mountinfo -----------------------------------------------------------------------------


def test_every_well_formed_line_is_parsed(entries: list[MountEntry]) -> None:
    assert len(entries) == len(MOUNTINFO.splitlines())


def test_ext4_root(entries: list[MountEntry]) -> None:
    root = by_point(entries, "/")
    assert root.fstype == "ext4"
    assert root.source == "/dev/nvme0n1p2"
    assert "rw" in root.options
    assert "relatime" in root.options
    assert "ro" not in root.options


@pytest.mark.parametrize(
    ("point", "fstype", "source"),
    [
        ("/models", "fuse.bindfs", "bindfs"),
        ("/mnt/blob", "fuse.blobfuse2", "blobfuse2"),
        ("/run/desktop/mnt/host", "virtiofs", "virtiofs0"),
        ("/models2", "nfs4", "server:/export"),
        ("/mnt/s3", "fuse", "s3fs"),
        ("/mnt/ntfs", "fuseblk", "/dev/sdd1"),
    ],
)
def test_fstype_and_source(entries: list[MountEntry], point: str, fstype: str, source: str) -> None:
    entry = by_point(entries, point)
    assert entry.fstype == fstype
    assert entry.source == source


def test_escaped_mount_point_is_decoded(entries: list[MountEntry]) -> None:
    entry = by_point(entries, "/data/my models")
    assert entry.fstype == "xfs"


def test_escapes_for_tab_newline_and_backslash() -> None:
    line = r"1 0 0:1 / /a\011b\012c\134d rw - ext4 /dev/x rw"
    (entry,) = parse_mountinfo(line)
    assert entry.mount_point == "/a\tb\nc\\d"


def test_non_ascii_mount_point_is_kept() -> None:
    (entry,) = parse_mountinfo("1 0 0:1 / /mnt/modèles rw - ext4 /dev/x rw")
    assert entry.mount_point == "/mnt/modèles"


def test_read_only_mount_options(entries: list[MountEntry]) -> None:
    entry = by_point(entries, "/ro-cache")
    assert "ro" in entry.options
    assert entry.fstype == "ext4"


def test_optional_fields_do_not_shift_the_columns() -> None:
    line = "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 shared:2 unbindable - ext3 /dev/root rw"
    (entry,) = parse_mountinfo(line)
    assert entry.mount_point == "/mnt2"
    assert entry.fstype == "ext3"
    assert entry.options == frozenset({"rw", "noatime"})


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n",
        "garbage",
        "1 2 3 4 5 6 no separator here",
        "1 0 0:1 / /x rw - ext4",
        "1 2 - ext4 s",
    ],
)
def test_malformed_lines_are_skipped(text: str) -> None:
    assert parse_mountinfo(text) == []


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
    entries = parse_mountinfo(
        "1 0 0:1 / / rw - ext4 /dev/root rw\n2 1 0:2 / /models2 rw - fuse.bindfs bindfs rw"
    )
    found = mount_for("/models/k", entries)
    assert found is not None
    assert found.mount_point == "/"


def test_mount_for_last_of_stacked_mounts_wins() -> None:
    entries = parse_mountinfo(
        "1 0 0:1 / / rw - ext4 /dev/root rw\n"
        "2 1 0:2 / /models rw - ext4 /dev/a rw\n"
        "3 1 0:3 / /models rw - fuse.blobfuse2 blobfuse2 rw"
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


def test_end_to_end_from_mountinfo(entries: list[MountEntry]) -> None:
    info = classify("/models/k", None, mount_for("/models/k", entries), False, None)
    assert (info.is_fuse, info.driver) == (True, "bindfs")
    info = classify("/ro-cache/k", None, mount_for("/ro-cache/k", entries), False, None)
    assert (info.is_fuse, info.read_only) == (False, True)
    info = classify("/models/sub/k", None, mount_for("/models/sub/k", entries), False, None)
    assert (info.is_fuse, info.driver) == (False, "tmpfs")
