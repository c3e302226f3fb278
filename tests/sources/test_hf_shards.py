"""A sharded prefetch of a Hugging Face model (#16 item 4): four pods at
once record the hub's blob ids and the commit without losing each other's
(each share its own validators file), take their sizes from the hub's
listing (one API call each, no HEAD per file), and an OnChange start after
them knows every file for what it is: nothing fetched again."""

from __future__ import annotations

from pathlib import Path

from llmkube_stager.cache.shardrec import read_merged, validators_name
from tests.harness.canary import HF_TOKEN
from tests.harness.hub import FakeHub
from tests.harness.pod import Pod, multi_env
from tests.harness.sample import payload

REPO = "org/diffusion"
SHARDS = 4
KIB = 1024


def repo_files() -> dict[str, bytes]:
    files = {f"tokenizer/vocab-{i:02d}.json": b'{"i": %d}' % i for i in range(12)}
    files.update({f"unet/shard-{k}.safetensors": payload(64 * KIB + k, seed=k) for k in range(6)})
    return files


def env(hub: FakeHub, cache: Path, files: list[str], **extra: str) -> dict[str, str]:
    return {
        **multi_env(f"hf://{REPO}@main", cache, files),
        "HF_ENDPOINT": hub.url,
        "HF_TOKEN": HF_TOKEN,
        **extra,
    }


def test_four_shares_record_every_blob_id_and_one_commit(hub: FakeHub, tmp_path: Path) -> None:
    files = repo_files()
    commit = hub.add_repo(REPO, files)
    cache = tmp_path / "models" / "m"
    rels = sorted(files)
    pods = [Pod(tmp_path, stager=True) for _ in range(SHARDS)]
    procs = [
        pods[i].popen(
            env=env(hub, cache, rels, LLMKUBE_SHARDS=str(SHARDS), JOB_COMPLETION_INDEX=str(i))
        )
        for i in range(SHARDS)
    ]
    for pod, proc in zip(pods, procs, strict=True):
        pod.finish(proc, timeout=120).ok()

    for rel, data in files.items():
        assert (cache / rel).read_bytes() == data, rel
    merged = read_merged(str(cache))
    for rel in rels:
        assert merged.get(rel), f"the blob id of {rel} was lost"
    recorded = {merged[f"/commit/{i}-of-{SHARDS}"] for i in range(SHARDS)}
    assert recorded == {commit}
    for index in range(SHARDS):
        assert (cache / validators_name(index, SHARDS)).is_file()
    # Sizes came from the hub's listing: no HEAD per file, one API call a pod.
    assert len(hub.requests("api")) == SHARDS

    hub.cdn.clear_log()
    after = Pod(tmp_path).run(env=env(hub, cache, rels, LLMKUBE_REFRESH_POLICY="OnChange"))
    after.ok(files=len(rels), fetched=0, reused=len(rels))
    assert hub.cdn.requests(method="GET") == []
