"""#10 defects 11-13: one manifest, one commit, and an OnChange set
that is never served half-published. Each test failed before its fix.

Hugging Face through the fake hub (the real `huggingface_hub` client on
loopback); the publish loop is interrupted in-process at a chosen moment
through the run's log stream (an injected effect): a SIGTERM the process
sends itself, or an exception standing for a SIGKILL (the disk is left as
a kill would leave it). A reader is a serving pod on FUSE: the filesystem
probe is an injected effect too.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from types import FrameType

import pytest

from llmkube_stager.errors import Cancelled
from tests.harness.hub import FakeHub
from tests.harness.modelsets import (
    REPO,
    SHARDS,
    SimulatedKill,
    commit_files,
    hf_env,
    interrupt_after_first_publish,
    warm_set_changed_upstream,
)
from tests.harness.origin import Fault, Origin
from tests.harness.pod import Pod, as_fuse

RECORD = ".llmkube-size"


def on_disk(tmp_path: Path) -> dict[str, bytes]:
    return {rel: (tmp_path / "cache" / rel).read_bytes() for rel in SHARDS}


# -- #10 defect 11: an interrupted run is finished from its own commit -----------------


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
def test_d11_an_interrupted_run_is_not_finished_from_another_commit(
    pod: Pod, tmp_path: Path, hub: FakeHub, policy: str
) -> None:
    x, y = commit_files(1), commit_files(2)
    hub.add_repo(REPO, x)
    broken = hub.cdn_path_of(REPO, SHARDS[2])
    hub.cdn.set_fault(broken, Fault(status=500))
    run = pod.stage(hf_env(tmp_path, hub))
    assert run.error is not None, run.stderr
    assert (tmp_path / "cache" / SHARDS[1]).read_bytes() == x[SHARDS[1]]
    hub.cdn.set_fault(broken, None)
    hub.move_branch(REPO, "main", y)

    run = pod.stage(hf_env(tmp_path, hub, LLMKUBE_REFRESH_POLICY=policy))

    assert run.error is None, run.stderr
    got = on_disk(tmp_path)
    assert got in (x, y), "one manifest, two commits: " + ", ".join(
        f"{rel}={'X' if got[rel] == x[rel] else 'Y'}" for rel in SHARDS
    )
    if policy == "OnChange":
        assert got == y


# -- #10 defect 12: OnChange records only validators it verified -----------------------


def test_d12_a_copy_without_validators_is_verified_not_judged_by_size(
    pod: Pod, tmp_path: Path, hub: FakeHub
) -> None:
    x, y = commit_files(1), commit_files(2)
    assert all(len(x[rel]) == len(y[rel]) for rel in SHARDS)
    hub.add_repo(REPO, y)
    cache = tmp_path / "cache"
    cache.mkdir()
    for rel, data in x.items():  # staged by the scripts at X: records, no validators
        (cache / rel).write_bytes(data)
        (cache / (rel + RECORD)).write_text(str(len(data)))

    run = pod.stage(hf_env(tmp_path, hub, LLMKUBE_REFRESH_POLICY="OnChange"))
    assert run.error is None, run.stderr
    assert on_disk(tmp_path) == y, "the stale copy was judged unchanged by its size"

    run = pod.stage(hf_env(tmp_path, hub, LLMKUBE_REFRESH_POLICY="OnChange"))
    assert run.error is None, run.stderr
    assert "downloaded" not in run.stderr, run.stderr
    validators = json.loads((cache / ".llmkube-validators").read_text())
    for rel in SHARDS:
        assert validators[rel].strip('"') in (
            hub.file(REPO, rel).sha256,
            hub.file(REPO, rel).blob_id,
        )


# -- #10 defect 13: the OnChange publish loop -------------------------------------------


def _warm_set(tmp_path: Path, origin: Origin, n: int) -> tuple[list[str], dict[str, bytes]]:
    files = [f"shard-{i:02d}.bin" for i in range(n)]
    cache = tmp_path / "cache"
    return files, warm_set_changed_upstream(cache, origin, files, (4096, 8192), new_seed=100)


def _http_env(tmp_path: Path, origin: Origin, files: list[str], **extra: str) -> dict[str, str]:
    return {
        "MODEL_SOURCE": origin.url + "/repo/",
        "CACHE_DIR": str(tmp_path / "cache"),
        "MODEL_FILES": "\n".join(files),
        "LLMKUBE_RETRIES": "0",
        "LLMKUBE_REFRESH_POLICY": "OnChange",
        **extra,
    }


def test_d13_sigterm_during_the_publish_loop_never_leaves_a_mixed_set(
    pod: Pod, tmp_path: Path
) -> None:
    def on_sigterm(_n: int, _f: FrameType | None) -> None:
        raise Cancelled("received SIGTERM during staging")

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with Origin() as origin:
            files, new = _warm_set(tmp_path, origin, 12)
            hook = interrupt_after_first_publish(lambda: os.kill(os.getpid(), signal.SIGTERM))
            run = pod.stage(_http_env(tmp_path, origin, files), on_line=hook)
    finally:
        signal.signal(signal.SIGTERM, previous)
    cache = tmp_path / "cache"
    got = {rel: (cache / rel).read_bytes() for rel in files}
    renamed = [rel for rel in files if got[rel] == new[rel]]
    assert renamed in ([], files), f"SIGTERM left {len(renamed)} of {len(files)} new files"
    for rel in files:
        assert (cache / (rel + RECORD)).read_text() == str(len(got[rel]))
    assert run.error is None or run.error.reason.value == "ModelTransferCancelled", run.stderr


def test_d13_a_publish_killed_halfway_is_refused_by_readers_and_rolled_forward(
    pod: Pod,
    tmp_path: Path,
) -> None:
    def kill() -> None:
        raise SimulatedKill

    with Origin() as origin:
        files, new = _warm_set(tmp_path, origin, 6)
        env = _http_env(tmp_path, origin, files)
        with pytest.raises(SimulatedKill):
            pod.stage(env, on_line=interrupt_after_first_publish(kill))
        cache = tmp_path / "cache"
        assert (cache / files[0]).read_bytes() == new[files[0]]
        assert (cache / files[-1]).read_bytes() != new[files[-1]]

        reader_env = {**env, "LLMKUBE_REFRESH_POLICY": "IfNotPresent"}
        run = pod.stage(reader_env, fs=as_fuse)
        assert run.error is not None, (
            "a reader served a half-published set as whole:\n" + run.stderr
        )
        assert run.error.reason.value == "ModelCacheIncomplete", run.stderr

        origin.clear_log()
        run = pod.stage(reader_env)
        assert run.error is None, run.stderr
    assert {rel: (cache / rel).read_bytes() for rel in files} == new
    for rel in files:
        assert (cache / (rel + RECORD)).read_text() == str(len(new[rel]))
    assert origin.requests(method="GET") == [], "rolled forward without fetching again"
