"""Fixtures of the real-mount tests: bindfs (FUSE) mounts, two bindfs mounts
of one backing directory (two "nodes") and a real read-only bind mount.

A test is marked skipped at collection only when the feature is truly
missing here, with a reason naming it; CI has bindfs, fuse3, /dev/fuse and
root, so nothing skips there (and tests/conftest.py fails a skip in CI).
Every mount is unmounted in teardown, also when the test failed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.mounts import (
    FuseCache,
    ReadOnlyCache,
    TwoNodes,
    fuse_missing,
    mount_bindfs,
    mount_ro_bind,
    two_mounts,
    unmount,
)


def _bind_missing() -> str | None:
    if shutil.which("mount") is None:
        return "mount(8) not installed"
    if os.geteuid() != 0:
        return "needs root for mount"
    return None


_FUSE_FIXTURES = frozenset(
    {"fuse_cache", "plain_bindfs", "two_nodes", "caching_nodes", "direct_io_fuse"}
)
_BIND_FIXTURES = frozenset({"ro_cache"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark, at collection, the tests whose mounts cannot be made here, with
    the missing feature as the reason (the suite's CI hook fails them)."""
    fuse, bind = fuse_missing(), _bind_missing()
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        missing = (fuse if names & _FUSE_FIXTURES else None) or (
            bind if names & _BIND_FIXTURES else None
        )
        if missing:
            item.add_marker(pytest.mark.skipif(True, reason=missing))


@contextlib.contextmanager
def _bindfs(
    tmp_path: Path, name: str, *, subtype: bool = True, options: str = ""
) -> Iterator[FuseCache]:
    backing = tmp_path / f"{name}-backing"
    backing.mkdir()
    mnt = tmp_path / name
    mount_bindfs(backing, mnt, subtype=subtype, options=options)
    try:
        yield FuseCache(backing, mnt)
    finally:
        unmount(mnt)


@pytest.fixture
def fuse_cache(tmp_path: Path) -> Iterator[FuseCache]:
    with _bindfs(tmp_path, "fuse") as cache:
        yield cache


@pytest.fixture
def plain_bindfs(tmp_path: Path) -> Iterator[FuseCache]:
    """bindfs exactly as `bindfs --no-allow-other SRC MNT`, without a subtype."""
    with _bindfs(tmp_path, "plain-fuse", subtype=False) as cache:
        yield cache


@pytest.fixture
def direct_io_fuse(tmp_path: Path) -> Iterator[FuseCache]:
    """bindfs in direct_io mode, as blobfuse2 (`direct-io`), s3fs and rclone
    (`--direct-io`) can run, and as virtiofs with cache=none behaves: no page
    cache, and a shared mmap of a file fails (ENODEV)."""
    with _bindfs(tmp_path, "direct-io-fuse", options="direct_io") as cache:
        yield cache


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[TwoNodes]:
    with two_mounts(tmp_path) as nodes:
        yield nodes


@pytest.fixture
def caching_nodes(tmp_path: Path) -> Iterator[TwoNodes]:
    """Two mounts whose kernel keeps directory entries and attributes for
    30 s, as real drivers do (blobfuse2 caches them for 120 s by default):
    a rename made through one node is not seen at once by the other."""
    with two_mounts(tmp_path, "entry_timeout=30,attr_timeout=30") as nodes:
        yield nodes


@pytest.fixture
def ro_cache(tmp_path: Path) -> Iterator[ReadOnlyCache]:
    backing = tmp_path / "rw"
    backing.mkdir()
    mnt = tmp_path / "ro"
    mount_ro_bind(backing, mnt)
    try:
        yield ReadOnlyCache(backing, mnt)
    finally:
        unmount(mnt)
