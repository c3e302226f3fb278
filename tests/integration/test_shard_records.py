"""The publish intent of a share (#10 defect 13 with #16 item 4): a share
killed in the middle of publishing its refreshed files leaves its intent in
its own record. Another share never touches it; a reader that may not write
refuses the half-published set; the share's retried pod finishes it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from llmkube_stager.cache.fs import probe_fs
from llmkube_stager.cache.runrecord import (
    PublishEntry,
    Update,
    read_run_record,
    write_run,
    write_shard_count,
)
from llmkube_stager.layout import private_partial_path, validator_of
from llmkube_stager.model import FsInfo
from llmkube_stager.share import assign
from tests.harness.disk import record_of
from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload

REPO = "/org/repo/resolve/main"
SHARDS = 2


def read_only(path: str) -> FsInfo:
    return replace(probe_fs(path), read_only=True)


def test_a_shares_interrupted_publish_is_its_own_to_finish(origin: Origin, pod: Pod) -> None:
    files = {"a.bin": payload(40_000, seed=1), "b.bin": payload(50_000, seed=2)}
    for rel, data in files.items():
        origin.put(f"{REPO}/{rel}", data)
    source = origin.url + REPO + "/"
    pod.stage(pod.multi_env(source, files)).ok()
    owner = assign({rel: len(d) for rel, d in files.items()}, SHARDS)
    other = 1 - owner["b.bin"]
    # Share owner["b.bin"] was killed after recording its intent, before the
    # rename of b.bin's complete, verified partial.
    new = payload(50_000, seed=3)
    partial = Path(
        private_partial_path(str(pod.dest("b.bin")), validator_of(50_000, '"n"'), "0a1b2c3d")
    )
    partial.write_bytes(new)
    root = str(pod.cache_dir)
    mine = f"{owner['b.bin']}-of-{SHARDS}"  # the share's writer id, as its pod records it
    write_shard_count(root, SHARDS)
    intent = (PublishEntry("b.bin", partial.name, len(new), ""),)
    write_run(root, mine, Update(intent=intent))

    def share(index: int) -> dict[str, str]:
        return pod.multi_env(
            source,
            files,
            LLMKUBE_SHARDS=str(SHARDS),
            JOB_COMPLETION_INDEX=str(index),
            LLMKUBE_PREFETCH_STAGER="true",
        )

    pod.stage(share(other)).ok()
    assert partial.read_bytes() == new, "another share touched the partial"
    assert read_run_record(root).run(mine).intent, "another share cleared the intent"
    assert pod.dest("b.bin").read_bytes() == files["b.bin"]

    refused = pod.stage(pod.multi_env(source, files), fs=read_only)
    assert refused.error is not None, "a reader served a half-published set\n" + refused.stderr
    assert refused.reason == "ModelCacheIncomplete"

    origin.clear_log()
    pod.stage(share(owner["b.bin"])).ok()
    assert pod.dest("b.bin").read_bytes() == new
    assert record_of(pod.dest("b.bin")) == str(len(new))
    assert not partial.exists()
    assert read_run_record(root).run(mine).intent == ()
    assert origin.requests(method="GET") == [], "rolled forward without fetching again"
