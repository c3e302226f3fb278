"""Filesystem probe, decided once per run (spec §9.2).

`statfs(2)` gives `f_type` (Python's `os.statvfs` has none), the mount table
names the driver (`fuse.bindfs`, `fuse.blobfuse2`, `virtiofs`), `statvfs` gives
free space and the read-only flag. `classify` is pure; `probe_fs` does the I/O.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from llmkube_stager.model import FsInfo

FUSE_SUPER_MAGIC = 0x65735546
_FUSE_FSTYPES = ("fuse", "fuseblk", "virtiofs")
# Filesystems (mountinfo names) where O_DIRECT is a plain block I/O path: on
# NFS each direct write is a synchronous round trip, FUSE drivers differ,
# tmpfs has nothing to bypass (docs/design.md).
DIRECT_IO_FSTYPES = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs"})


@dataclass(frozen=True)
class MountEntry:
    mount_point: str
    fstype: str
    source: str
    options: frozenset[str]


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Parse /proc/self/mountinfo (proc(5)); octal escapes like \\040 decoded."""
    entries = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        tail = right.split()
        if not sep or len(fields) < 6 or len(tail) < 2:
            continue
        entries.append(
            MountEntry(
                mount_point=_unescape(fields[4]),
                fstype=tail[0],
                source=_unescape(tail[1]),
                options=frozenset(fields[5].split(",")),
            )
        )
    return entries


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    raw = text.encode().decode("unicode_escape").encode("latin-1")
    return raw.decode("utf-8", errors="replace")


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


def probe_fs(path: str, mountinfo_path: str = "/proc/self/mountinfo") -> FsInfo:
    target = os.path.realpath(existing_ancestor(path))
    try:
        with open(mountinfo_path, encoding="utf-8", errors="replace") as handle:
            entries = parse_mountinfo(handle.read())
    except OSError:
        entries = []
    read_only, free_bytes = _statvfs(target)
    return classify(target, statfs_type(target), mount_for(target, entries), read_only, free_bytes)


def _statvfs(path: str) -> tuple[bool, int | None]:
    try:
        st = os.statvfs(path)
    except OSError:
        return False, None
    return bool(st.f_flag & os.ST_RDONLY), st.f_bavail * st.f_frsize
