"""Real filesystems for tests: a tmpfs of a given size, or read-only, for a
real ENOSPC, a real statvfs, a real EROFS; bindfs (FUSE) mounts, two of one
directory standing for two nodes of a FUSE volume (flock excludes within a
mount, not across them); read-only bind mounts. Needs root; without it (or
when mount is refused) the test is skipped, naming the missing feature."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.harness.features import missing_feature


@contextlib.contextmanager
def tmpfs(mount_point: Path, options: str = "size=1m") -> Iterator[Path]:
    if os.geteuid() != 0:
        missing_feature("root, to mount tmpfs")
    mount_point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        missing_feature(f"mount -t tmpfs ({done.stderr.strip()})")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


# -- FUSE -------------------------------------------------------------------------------


def fuse_missing() -> str | None:
    """What this machine lacks for bindfs mounts, or None."""
    if shutil.which("bindfs") is None:
        return "bindfs not installed"
    if shutil.which("fusermount3") is None and shutil.which("fusermount") is None:
        return "fuse3 (fusermount3) not installed"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if os.geteuid() != 0:
        return "needs root for mount"
    return None


# FUSE's statfs magic (FUSE_SUPER_MAGIC) as `stat -f -c %t` prints it: what
# the shell scripts test.
FUSE_MAGIC_HEX = "65735546"


@dataclass
class FuseCache:
    """A backing directory and a bindfs mount of it: the backing side is what
    the "storage" holds, the mount is what the pod sees."""

    backing: Path
    mnt: Path


@dataclass
class ReadOnlyCache:
    """A directory and a read-only bind mount of it."""

    backing: Path
    mnt: Path


@dataclass
class TwoNodes:
    """One backing directory seen through two independent bindfs mounts:
    like two nodes mounting one BlobFuse container."""

    backing: Path
    node1: Path
    node2: Path


@contextlib.contextmanager
def two_mounts(tmp_path: Path, options: str = "") -> Iterator[TwoNodes]:
    """Two bindfs mounts of one backing directory: two "nodes"."""
    backing = tmp_path / "shared"
    backing.mkdir()
    node1, node2 = tmp_path / "node1", tmp_path / "node2"
    mount_bindfs(backing, node1, options=options)
    try:
        mount_bindfs(backing, node2, options=options)
        try:
            yield TwoNodes(backing, node1, node2)
        finally:
            unmount(node2)
    finally:
        unmount(node1)


def _run_quiet(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)


def is_mounted(path: Path) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split(" - ", 1)[0].split()
            if len(fields) >= 5 and fields[4].encode().decode("unicode_escape") == target:
                return True
    return False


def mountinfo_line(path: Path) -> str:
    target = os.path.realpath(path)
    found = ""
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split(" - ", 1)[0].split()
            if len(fields) >= 5 and fields[4] == target:
                found = line.strip()
    return found


def mount_bindfs(src: Path, mnt: Path, *, subtype: bool = True, options: str = "") -> None:
    """`bindfs --no-allow-other SRC MNT`. bindfs 1.14 labels its mount plain
    `fuse` with the source directory as fsname; `-o subtype=bindfs` makes the
    mount table say `fuse.bindfs`, the way libfuse drivers such as blobfuse2
    name themselves (the issue's "driver name (e.g. `fuse.bindfs`)")."""
    mnt.mkdir(parents=True, exist_ok=True)
    cmd = ["bindfs", "--no-allow-other"]
    opts = ",".join(o for o in ("subtype=bindfs" if subtype else "", options) if o)
    if opts:
        cmd += ["-o", opts]
    proc = _run_quiet([*cmd, str(src), str(mnt)])
    if proc.returncode != 0:
        raise RuntimeError(f"bindfs {src} {mnt} failed: {proc.stderr.strip()}")
    deadline = time.monotonic() + 5
    while not is_mounted(mnt):
        if time.monotonic() > deadline:
            raise RuntimeError(f"bindfs did not show up in the mount table at {mnt}")
        time.sleep(0.02)


def mount_ro_bind(src: Path, mnt: Path) -> None:
    """A real read-only bind mount: `mount --bind` then remount ro."""
    mnt.mkdir(parents=True, exist_ok=True)
    proc = _run_quiet(["mount", "--bind", str(src), str(mnt)])
    if proc.returncode != 0:
        raise RuntimeError(f"mount --bind failed: {proc.stderr.strip()}")
    proc = _run_quiet(["mount", "-o", "remount,bind,ro", str(mnt)])
    if proc.returncode != 0:
        unmount(mnt)
        raise RuntimeError(f"remount,bind,ro failed: {proc.stderr.strip()}")


def unmount(mnt: Path) -> None:
    """Robust teardown: fusermount3 -u, umount, then lazy variants, retried
    while a just-exited child still holds the mount busy."""
    if not is_mounted(mnt):
        return
    attempts = (
        ["fusermount3", "-u", str(mnt)],
        ["umount", str(mnt)],
        ["fusermount3", "-uz", str(mnt)],
        ["umount", "-l", str(mnt)],
    )
    deadline = time.monotonic() + 10
    while True:
        for cmd in attempts:
            if shutil.which(cmd[0]) is None:
                continue
            _run_quiet(cmd)
            if not is_mounted(mnt):
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"could not unmount {mnt}: {mountinfo_line(mnt)}")
        time.sleep(0.1)
