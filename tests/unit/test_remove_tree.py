"""The suite removes deep trees without recursion (#21 item 11): Python
3.11's shutil.rmtree recurses, and a 1,100-deep tree left in pytest's
basetemp crashed a later session's cleanup (`make floors`)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.harness.disk import depth_of, remove_tree

DEPTH = 1100


def _chain(root: Path, depth: int) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(depth):
            os.mkdir("d", dir_fd=fd)
            if i % 100 == 0:
                os.close(os.open(f"f{i}", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        os.symlink("/", "escape", dir_fd=fd)
    finally:
        os.close(fd)


def test_a_1100_deep_tree_is_removed_bottom_up(tmp_path: Path) -> None:
    root = tmp_path / "deep"
    root.mkdir()
    _chain(root, DEPTH)
    assert depth_of(root) == DEPTH

    remove_tree(root)

    assert not root.exists()
