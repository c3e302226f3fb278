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
from fuse_support import (
    FuseCache,
    ReadOnlyCache,
    TwoNodes,
    mount_bindfs,
    mount_ro_bind,
    unmount,
)


def _fuse_missing() -> str | None:
    if shutil.which("bindfs") is None:
        return "bindfs not installed"
    if shutil.which("fusermount3") is None and shutil.which("fusermount") is None:
        return "fuse3 (fusermount3) not installed"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if os.geteuid() != 0:
        return "needs root for mount"
    return None


def _bind_missing() -> str | None:
    if shutil.which("mount") is None:
        return "mount(8) not installed"
    if os.geteuid() != 0:
        return "needs root for mount"
    return None


_FUSE_FIXTURES = frozenset({"fuse_cache", "plain_bindfs", "two_nodes", "caching_nodes"})
_BIND_FIXTURES = frozenset({"ro_cache"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark, at collection, the tests whose mounts cannot be made here, with
    the missing feature as the reason (the suite's CI hook fails them)."""
    fuse, bind = _fuse_missing(), _bind_missing()
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        missing = (fuse if names & _FUSE_FIXTURES else None) or (
            bind if names & _BIND_FIXTURES else None
        )
        if missing:
            item.add_marker(pytest.mark.skipif(True, reason=missing))


@contextlib.contextmanager
def _bindfs(tmp_path: Path, name: str, *, subtype: bool = True) -> Iterator[FuseCache]:
    backing = tmp_path / f"{name}-backing"
    backing.mkdir()
    mnt = tmp_path / name
    mount_bindfs(backing, mnt, subtype=subtype)
    try:
        yield FuseCache(backing, mnt)
    finally:
        unmount(mnt)


@contextlib.contextmanager
def _two_mounts(tmp_path: Path, options: str = "") -> Iterator[TwoNodes]:
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
def two_nodes(tmp_path: Path) -> Iterator[TwoNodes]:
    with _two_mounts(tmp_path) as nodes:
        yield nodes


@pytest.fixture
def caching_nodes(tmp_path: Path) -> Iterator[TwoNodes]:
    """Two mounts whose kernel keeps directory entries and attributes for
    30 s, as real drivers do (blobfuse2 caches them for 120 s by default):
    a rename made through one node is not seen at once by the other."""
    with _two_mounts(tmp_path, "entry_timeout=30,attr_timeout=30") as nodes:
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
