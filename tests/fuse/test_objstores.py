"""The real FUSE object stores (#21 item 10): s3fs and rclone (VFS cache
modes off, writes and full) mounts of ONE SeaweedFS bucket as two nodes.

What the bindfs scenarios hold must hold on them too: a prefetch stager on
one node, a serving pod on the other reading what it published; a restarted
stager on another node adopting an idle partial (#21 item 8: rclone's inode
numbers follow the path, so an inode-only ownership check threw the
adopted bytes away); and the stamp race of two writers with different pins
(#21 item 2, tests/harness/stamp_race.py).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmkube_stager.layout import private_partial_path, validator_of
from tests.harness.disk import debris, names, record_of
from tests.harness.features import missing_feature
from tests.harness.objmounts import RCLONE_MODES, ObjectNodes, object_nodes, objstore_missing
from tests.harness.origin import Origin, gets
from tests.harness.pod import Pod, single_env
from tests.harness.sample import payload
from tests.harness.seaweed import SeaweedS3
from tests.harness.stamp_race import assert_never_served_y, run_stamp_race

KINDS = ("s3fs", *(f"rclone-{mode}" for mode in RCLONE_MODES))
SIZE = 1024 * 1024
SEEDED_PREFIX = 512 * 1024
ONE_CONNECTION = {"LLMKUBE_CONNECTIONS": "1"}
_BUCKETS = itertools.count()


@pytest.fixture(params=KINDS)
def obj_nodes(
    request: pytest.FixtureRequest, seaweed: SeaweedS3, tmp_path: Path
) -> Iterator[ObjectNodes]:
    kind: str = request.param
    missing = objstore_missing(kind.split("-")[0])
    if missing:
        missing_feature(missing)
    bucket = f"nodes-{os.getpid()}-{next(_BUCKETS)}"
    with object_nodes(kind, seaweed, tmp_path, bucket) as nodes:
        yield nodes


def await_visible(path: Path, timeout_s: float = 15.0) -> None:
    """The other node sees a name once its directory cache expires."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never showed up on this node"
        time.sleep(0.2)


def test_prefetch_on_one_node_serves_a_pod_on_the_other(
    tmp_path: Path, origin: Origin, obj_nodes: ObjectNodes
) -> None:
    data = payload(SIZE, 2101)
    origin.put("/m.gguf", data, etag='"v1"')
    stager = Pod(tmp_path, single_env(origin.url + "/m.gguf", obj_nodes.node1 / "k"), stager=True)
    stager.env.update(ONE_CONNECTION)
    stager.run("stage").ok()
    dest2 = obj_nodes.node2 / "k" / "model.gguf"
    await_visible(Path(f"{dest2}.llmkube-size"))
    # The same source (a cache directory knows its source, #46 item 2).
    origin.clear_log()
    serving = Pod(tmp_path, single_env(origin.url + "/m.gguf", dest2.parent))
    served = serving.run("stage")
    served.ok()
    assert "Model already cached, skipping download" in served.stderr
    assert origin.requests() == [], "the serving pod fetched nothing"
    assert dest2.read_bytes() == data
    assert record_of(dest2) == str(SIZE)
    assert _debris(obj_nodes, dest2.parent) == [], names(dest2.parent)


def test_a_restarted_stager_on_another_node_resumes_an_idle_partial(
    tmp_path: Path, origin: Origin, obj_nodes: ObjectNodes
) -> None:
    """#21 item 8: a stager on node 1 died at half the file; its successor on
    node 2 adopts the idle partial by rename and resumes it. Where inode
    numbers follow the path (rclone), the adopted file's descriptor and its
    new name disagree on the inode: that is not another writer. Exactly one
    ranged GET for the rest, the exact file, and no partial left behind."""
    data = payload(SIZE, 2102)
    etag = '"v1"'
    origin.put("/m.gguf", data, etag=etag)
    dest1 = obj_nodes.node1 / "k" / "model.gguf"
    dest1.parent.mkdir()
    partial = Path(private_partial_path(str(dest1), validator_of(SIZE, etag), "deadbeef"))
    partial.write_bytes(data[:SEEDED_PREFIX])
    old = time.time() - 120
    os.utime(partial, (old, old))
    dest2 = obj_nodes.node2 / "k" / "model.gguf"
    await_visible(dest2.parent / partial.name)

    successor = Pod(tmp_path, single_env(origin.url + "/m.gguf", dest2.parent), stager=True)
    successor.env.update(ONE_CONNECTION)
    run = successor.run("stage")
    run.ok()

    assert "another writer adopted" not in run.stderr, str(run)
    got = [r.headers.get("range") for r in gets(origin, "/m.gguf")]
    if obj_nodes.kind == "rclone-off":
        # Writes only front to back from a fresh open: nothing can be
        # resumed there; one whole GET into a fresh file of ours.
        assert got == [None], got
    else:
        assert got == [f"bytes={SEEDED_PREFIX}-"], got
    assert dest2.read_bytes() == data
    assert record_of(dest2) == str(SIZE)
    assert _debris(obj_nodes, dest2.parent) == [], names(dest2.parent)


def test_a_stamp_never_vouches_for_another_writers_bytes(
    tmp_path: Path, obj_nodes: ObjectNodes
) -> None:
    """#21 item 2 on the object stores: whatever each node's caches say, a
    pod pinned to X on A's node is never served anything but X. (rclone
    --vfs-cache-mode writes serves A's node its own cached copy, X, while
    the bucket may end up with either: each node sees its own view.)"""
    verdicts = run_stamp_race(tmp_path, obj_nodes.node1, obj_nodes.node2)
    assert_never_served_y(verdicts)


def _debris(nodes: ObjectNodes, directory: Path) -> list[str]:
    """Leftovers; on rclone --vfs-cache-mode off without the filesystem-clock
    scratch files: FUSE releases a closed file after close(2) returns and
    rclone uploads the empty file after our unlink (a known limit: named as
    atomic temps, the sweep removes them after 10 minutes)."""
    found = debris(directory)
    if nodes.kind == "rclone-off":
        found = [n for n in found if not n.startswith(".llmkube-clock.llmkube-tmp.")]
    return found
