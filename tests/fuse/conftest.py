"""Fixtures of the real-mount tests: bindfs (FUSE) mounts, two bindfs mounts
of one backing directory (two "nodes"), a real read-only bind mount, and the
loopback origin.

A test skips only when the feature is truly missing here, with a reason
naming it; CI has bindfs, fuse3, /dev/fuse and root, so nothing skips there.
Every mount is unmounted in teardown, also when the test failed.
"""

from __future__ import annotations

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

from llmkube_stager.testing.origin import Origin


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


@pytest.fixture
def fuse_cache(tmp_path: Path) -> Iterator[FuseCache]:
    missing = _fuse_missing()
    if missing:
        pytest.skip(missing)
    backing = tmp_path / "backing"
    backing.mkdir()
    mnt = tmp_path / "fuse"
    mount_bindfs(backing, mnt)
    try:
        yield FuseCache(backing, mnt)
    finally:
        unmount(mnt)


@pytest.fixture
def plain_bindfs(tmp_path: Path) -> Iterator[FuseCache]:
    """bindfs exactly as `bindfs --no-allow-other SRC MNT`, without a subtype."""
    missing = _fuse_missing()
    if missing:
        pytest.skip(missing)
    backing = tmp_path / "plain-backing"
    backing.mkdir()
    mnt = tmp_path / "plain-fuse"
    mount_bindfs(backing, mnt, subtype=False)
    try:
        yield FuseCache(backing, mnt)
    finally:
        unmount(mnt)


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[TwoNodes]:
    missing = _fuse_missing()
    if missing:
        pytest.skip(missing)
    backing = tmp_path / "shared"
    backing.mkdir()
    node1, node2 = tmp_path / "node1", tmp_path / "node2"
    mount_bindfs(backing, node1)
    try:
        mount_bindfs(backing, node2)
        try:
            yield TwoNodes(backing, node1, node2)
        finally:
            unmount(node2)
    finally:
        unmount(node1)


@pytest.fixture
def caching_nodes(tmp_path: Path) -> Iterator[TwoNodes]:
    """Two mounts whose kernel keeps directory entries and attributes for
    30 s, as real drivers do (blobfuse2 caches them for 120 s by default):
    a rename made through one node is not seen at once by the other."""
    missing = _fuse_missing()
    if missing:
        pytest.skip(missing)
    backing = tmp_path / "shared"
    backing.mkdir()
    node1, node2 = tmp_path / "node1", tmp_path / "node2"
    options = "entry_timeout=30,attr_timeout=30"
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
def ro_cache(tmp_path: Path) -> Iterator[ReadOnlyCache]:
    missing = _bind_missing()
    if missing:
        pytest.skip(missing)
    backing = tmp_path / "rw"
    backing.mkdir()
    mnt = tmp_path / "ro"
    mount_ro_bind(backing, mnt)
    try:
        yield ReadOnlyCache(backing, mnt)
    finally:
        unmount(mnt)


@pytest.fixture
def origin() -> Iterator[Origin]:
    with Origin() as srv:
        yield srv
