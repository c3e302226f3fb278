"""Filesystem probe, decided once per run (spec §9.2).

`statfs(2)` gives `f_type` (Python's `os.statvfs` has none, nor has psutil),
`statvfs` gives free space and the read-only flag, and the mount table
(psutil) names the driver (`fuse.bindfs`, `fuse.blobfuse2`, `virtiofs`) and
the mount's device and options. `classify` is pure.

Two depths, because a warm start must stay cheap (docs/design.md):
`probe_fs_quick` (the `stage` command) needs only the statfs magic and the
statvfs flags: FUSE-ness, read-only, and whether O_DIRECT fits all follow
from them; psutil is imported only when statfs cannot be called. `probe_fs`
(`plan`, `inspect`) adds the mount table for the driver, device and options.
`free_bytes` (the transfer's free-space preflight) is psutil's disk usage.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from llmkube_stager.model import FsInfo

FUSE_SUPER_MAGIC = 0x65735546
_FUSE_FSTYPES = ("fuse", "fuseblk", "virtiofs")
# Filesystems (mount table names) where O_DIRECT is a plain block I/O path: on
# NFS each direct write is a synchronous round trip, FUSE drivers differ,
# tmpfs has nothing to bypass (docs/design.md).
DIRECT_IO_FSTYPES = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs"})
# statfs magics (linux/magic.h) of the common cache filesystems, so that the
# warm path can name them without the mount table. ext2/3/4 share one.
MAGIC_FSTYPES: dict[int, str] = {
    0xEF53: "ext4",
    0x58465342: "xfs",
    0x9123683E: "btrfs",
    0x01021994: "tmpfs",
    0x6969: "nfs",
    0x794C7630: "overlay",
    0x00C36400: "ceph",
    0xFF534D42: "cifs",
    0x5346414F: "afs",
    FUSE_SUPER_MAGIC: "fuse",
}
_DIRECT_IO_MAGICS = frozenset({0xEF53, 0x58465342, 0x9123683E})


@dataclass(frozen=True)
class MountEntry:
    mount_point: str
    fstype: str
    source: str
    options: frozenset[str]


def mount_table() -> list[MountEntry]:
    """Every mount of this process's namespace (psutil reads the kernel's
    table and decodes its escapes); [] when it cannot be read."""
    import psutil

    try:
        parts = psutil.disk_partitions(all=True)
    except OSError:
        return []
    return [
        MountEntry(p.mountpoint, p.fstype, p.device, frozenset(p.opts.split(","))) for p in parts
    ]


def mount_for(path: str, entries: list[MountEntry]) -> MountEntry | None:
    """The mount a (resolved) path lives on: the last longest matching mount point."""
    best: MountEntry | None = None
    for entry in entries:
        point = entry.mount_point.rstrip("/") or "/"
        inside = path == point or path.startswith(point + "/") or point == "/"
        if inside and (best is None or len(point) >= len(best.mount_point.rstrip("/") or "/")):
            best = entry
    return best


def classify(
    path: str, f_type: int | None, mount: MountEntry | None, read_only: bool, free_bytes: int | None
) -> FsInfo:
    """Pure: decide FUSE-ness and the driver from what the probes saw."""
    fstype = mount.fstype if mount else ""
    is_fuse: bool | None
    if f_type is not None:
        is_fuse = f_type == FUSE_SUPER_MAGIC
    elif mount is not None:
        is_fuse = fstype.split(".")[0] in _FUSE_FSTYPES
    else:
        is_fuse = None
    return FsInfo(
        path=path,
        fstype=fstype or ("fuse" if is_fuse else "unknown"),
        driver=_driver(mount),
        is_fuse=is_fuse,
        read_only=read_only or (mount is not None and "ro" in mount.options),
        free_bytes=free_bytes,
        direct_io_ok=fstype in DIRECT_IO_FSTYPES,
    )


def _driver(mount: MountEntry | None) -> str:
    if mount is None:
        return "unknown"
    if mount.fstype.startswith("fuse."):
        return mount.fstype.split(".", 1)[1]
    if mount.fstype in ("fuse", "fuseblk"):
        # The fsname is often the backing path (plain bindfs): not a driver.
        source = mount.source
        return source if source and not source.startswith("/") else mount.fstype
    return mount.fstype


def statfs_type(path: str) -> int | None:
    """f_type via libc statfs(2); None when it cannot be called."""
    try:
        # CDLL(None) is the running process, libc included; find_library would
        # spawn ldconfig and cost tens of milliseconds on the warm path.
        libc = ctypes.CDLL(None, use_errno=True)
        statfs = libc.statfs
    except (OSError, AttributeError):
        return None
    # struct statfs starts with `__fsword_t f_type` (a C long) on Linux; a
    # generous buffer covers the rest of the struct on every architecture.
    buf = ctypes.create_string_buffer(512)
    if statfs(os.fsencode(path), buf) != 0:
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def existing_ancestor(path: str) -> str:
    """A cold cache may not exist yet: probe the nearest existing parent."""
    current = os.path.abspath(path)
    while not os.path.exists(current) and current != "/":
        current = os.path.dirname(current)
    return current


def probe_fs(path: str) -> FsInfo:
    """The full probe: statfs magic, statvfs, and the mount table (psutil)."""
    target = os.path.realpath(existing_ancestor(path))
    read_only, free = _statvfs(target)
    return classify(target, statfs_type(target), mount_for(target, mount_table()), read_only, free)


def probe_fs_quick(path: str) -> FsInfo:
    """What `stage` decides by, without the mount table (and without
    importing psutil) unless statfs cannot be called."""
    target = os.path.realpath(existing_ancestor(path))
    f_type = statfs_type(target)
    if f_type is None:
        return probe_fs(path)
    read_only, free = _statvfs(target)
    name = MAGIC_FSTYPES.get(f_type, "unknown")
    return FsInfo(
        path=target,
        fstype=name,
        driver=name,
        is_fuse=f_type == FUSE_SUPER_MAGIC,
        read_only=read_only,
        free_bytes=free,
        direct_io_ok=f_type in _DIRECT_IO_MAGICS,
    )


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged writer may still use (the free-space preflight)."""
    import psutil

    try:
        return int(psutil.disk_usage(path).free)
    except OSError:
        return None


def _statvfs(path: str) -> tuple[bool, int | None]:
    try:
        st = os.statvfs(path)
    except OSError:
        return False, None
    return bool(st.f_flag & os.ST_RDONLY), st.f_bavail * st.f_frsize


def turned_read_only(path: str) -> bool:
    """The filesystem of `path` is mounted read-write, yet its superblock
    is read-only now: it turned itself read-only under us (#29 item 7: ext4
    mounted `errors=remount-ro` after an I/O error or corruption; Linux 6.x
    shows `emergency_ro`, older kernels `ro`, among the superblock's
    options). A mount made read-only (a Pod's `readOnly`, `mount -o ro`)
    says `ro` in its own options: that is the access mode, not a failure."""
    mount = _mountinfo_for(os.path.realpath(existing_ancestor(path)))
    if mount is None:
        return False
    return turned(*mount)


def turned(mount_options: frozenset[str], super_options: frozenset[str]) -> bool:
    """Pure: a read-write mount of a superblock that is read-only now."""
    return "rw" in mount_options and not super_options.isdisjoint({"ro", "emergency_ro"})


def _mountinfo_for(path: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """(mount options, superblock options) of the mount `path` lives on,
    from /proc/self/mountinfo (proc(5))."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
            return mount_options_of(path, handle.read())
    except OSError:
        return None


def mount_options_of(path: str, mountinfo: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """Pure: (mount options, superblock options) of the last longest mount
    point of `mountinfo` (proc(5) format) that holds the resolved `path`."""
    best: tuple[int, frozenset[str], frozenset[str]] | None = None
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) < 10 or "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        if len(fields) < dash + 4:
            continue
        point = _unescape(fields[4]).rstrip("/") or "/"
        inside = path == point or path.startswith(point + "/") or point == "/"
        if inside and (best is None or len(point) >= best[0]):
            best = (
                len(point),
                frozenset(fields[5].split(",")),
                frozenset(fields[dash + 3].split(",")),
            )
    return None if best is None else (best[1], best[2])


def _unescape(field: str) -> str:
    r"""mountinfo escapes space, tab, newline and backslash as \ooo."""
    if "\\" not in field:
        return field
    import re

    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)
