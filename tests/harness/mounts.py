"""Small real filesystems for tests: a tmpfs of a given size, or read-only,
for a real ENOSPC, a real statvfs, a real EROFS. Needs root; without it (or
when mount is refused) the test is skipped, naming the missing feature."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(mount_point: Path, options: str = "size=1m") -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount tmpfs")
    mount_point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
