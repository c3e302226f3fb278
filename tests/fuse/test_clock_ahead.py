"""A dead writer's publish from a node whose clock is ahead (#29 item 5).

On FUSE (a bindfs mount: flock does not exclude across nodes, so liveness
is read from the partials' heartbeats) a prefetch stager is killed in the
middle of an OnChange publish, and the partials it leaves carry an mtime
an hour in the future (its node's clock was ahead; s3fs stamps the
client's clock). Before: such a partial counted as touched "less than
IDLE_S ago" for ever, so every writer waited out LLMKUBE_LOCK_TIMEOUT and
readers refused the model. Now a future mtime proves nothing, as on the
adoption path: the partials are watched over the wait, and unchanged for
more than two heartbeats their writer is gone.

The stage runs in-process (`Pod.stage`): its sleeps return at once and are
counted, so the watch costs no wall-clock time and a heartbeat can be
placed between two of them (`on_sleep`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from llmkube_stager.cache.partials import FUTURE_OBSERVE_S
from tests.harness.features import missing_feature
from tests.harness.hub import FakeHub
from tests.harness.modelsets import (
    REPO,
    SHARDS,
    SimulatedKill,
    commit_files,
    hf_env,
    interrupt_after_first_publish,
)
from tests.harness.mounts import FuseCache
from tests.harness.objmounts import object_nodes, objstore_missing
from tests.harness.pod import Pod
from tests.harness.seaweed import SeaweedS3

AHEAD_S = 3600.0
POLL_S = 0.5  # staging/interrupted.py's poll while it waits for a publish
# Sleeps of the wait before an unchanged partial is judged dead.
WATCH_SLEEPS = int(FUTURE_OBSERVE_S / POLL_S)


def _killed_publish_from_the_future(
    pod: Pod, tmp_path: Path, hub: FakeHub, cache: Path, *, reader_cache: Path | None = None
) -> dict[str, str]:
    """A warm model whose `main` moved, an OnChange publish of it killed
    after its first rename, its partials dated AHEAD_S in the future; the
    environment then points at `reader_cache` (another node's view), when
    given."""

    def kill() -> None:
        raise SimulatedKill

    hub.add_repo(REPO, commit_files(1))
    env = {
        **hf_env(tmp_path, hub, LLMKUBE_REFRESH_POLICY="OnChange"),
        "CACHE_DIR": str(cache),
        "LLMKUBE_PREFETCH_STAGER": "true",
        "LLMKUBE_LOCK_TIMEOUT": "600",
    }
    first = pod.stage(env)
    assert first.error is None, first.stderr
    hub.move_branch(REPO, "main", commit_files(2))
    with pytest.raises(SimulatedKill):
        pod.stage(env, on_line=interrupt_after_first_publish(kill))
    left = _partials(cache)
    assert left, "no partial left by the killed publish"
    when = time.time() + AHEAD_S
    for partial in left:
        os.utime(partial, (when, when))
    if reader_cache is None:
        return env
    for partial in left:
        await_visible(reader_cache / partial.name)
    return {**env, "CACHE_DIR": str(reader_cache)}


def await_visible(path: Path, timeout_s: float = 15.0) -> None:
    """The other node sees a name once its directory cache expires."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never showed up on this node"
        time.sleep(0.2)


def _partials(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if p.name.endswith(".llmkube-part.tmp"))


def test_a_dead_writers_publish_dated_in_the_future_is_rolled_forward(
    pod: Pod, tmp_path: Path, hub: FakeHub, fuse_cache: FuseCache
) -> None:
    cache = fuse_cache.mnt / "k"
    env = _killed_publish_from_the_future(pod, tmp_path, hub, cache)

    run = pod.stage(env)

    assert run.error is None, run.stderr
    new = commit_files(2)
    assert {r: (cache / r).read_bytes() for r in SHARDS} == new
    assert not _partials(cache)
    assert WATCH_SLEEPS <= len(run.sleeps) <= WATCH_SLEEPS + 2, run.sleeps
    reader = pod.stage(env, LLMKUBE_PREFETCH_STAGER="false", LLMKUBE_REFRESH_POLICY="IfNotPresent")
    assert reader.error is None, reader.stderr


def test_a_live_writer_dated_in_the_future_is_still_waited_for(
    pod: Pod, tmp_path: Path, hub: FakeHub, fuse_cache: FuseCache
) -> None:
    """The same partials heartbeated (their mtime moves, still ahead)
    between the waits: their writer lives, and is waited for until its
    heartbeats stop, then watched for more than two heartbeats."""
    cache = fuse_cache.mnt / "k"
    env = _killed_publish_from_the_future(pod, tmp_path, hub, cache)
    beats = WATCH_SLEEPS + 10

    def heartbeat(n: int) -> None:
        if n <= beats:
            when = time.time() + AHEAD_S + n
            for partial in _partials(cache):
                os.utime(partial, (when, when))

    run = pod.stage(env, on_sleep=heartbeat, max_sleeps=beats + WATCH_SLEEPS + 5)

    assert run.error is None, run.stderr
    assert len(run.sleeps) >= beats + WATCH_SLEEPS, (len(run.sleeps), run.stderr)
    assert {r: (cache / r).read_bytes() for r in SHARDS} == commit_files(2)


def test_on_s3fs_a_dead_writers_publish_dated_in_the_future_is_rolled_forward(
    pod: Pod, tmp_path: Path, hub: FakeHub, seaweed: SeaweedS3
) -> None:
    """s3fs stamps the mtime with the client's clock: the killed writer on
    node 1, the next writer on node 2 of one bucket."""
    missing = objstore_missing("s3fs")
    if missing:
        missing_feature(missing)
    with object_nodes("s3fs", seaweed, tmp_path, f"ahead-{os.getpid()}") as nodes:
        env = _killed_publish_from_the_future(
            pod, tmp_path, hub, nodes.node1 / "k", reader_cache=nodes.node2 / "k"
        )
        cache = nodes.node2 / "k"

        run = pod.stage(env)

        assert run.error is None, run.stderr
        assert {r: (cache / r).read_bytes() for r in SHARDS} == commit_files(2)
        assert len(run.sleeps) >= WATCH_SLEEPS, run.sleeps
