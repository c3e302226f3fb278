"""What only the real-mount tests need beyond tests/harness: bindfs and
read-only bind mounts (made, inspected, torn down), the constants of the FUSE
rules, and the origin's GETs."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.harness.origin import Origin, RequestRecord

FUSE_MAGIC_HEX = "65735546"
TEN_MINUTES_S = 600.0

REMEDY_HTTP = (
    "set spec.modelCache.prefetch: true on every InferenceService using this claim, or use "
    "storage with cross-node flock support"
)


# -- mounts -------------------------------------------------------------------------


@dataclass
class FuseCache:
    """A backing directory and a bindfs mount of it: the backing side is what
    the "storage" holds, the mount is what the pod sees."""

    backing: Path
    mnt: Path


@dataclass
class TwoNodes:
    """One backing directory seen through two independent bindfs mounts:
    like two nodes mounting one BlobFuse container."""

    backing: Path
    node1: Path
    node2: Path


@dataclass
class ReadOnlyCache:
    backing: Path
    mnt: Path


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


def gets(origin: Origin, path: str | None = None) -> list[RequestRecord]:
    return origin.requests(path, "GET")
