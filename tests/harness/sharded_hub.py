"""A Hugging Face model on the fake hub staged by the shares of a sharded
prefetch Job (#16 item 4, #21 item 4): its files at commit 1 and at the next
commit of main (every file changed, same names), the variables of the
whole model and of one of two shares, and which commit the files on disk
are of."""

from __future__ import annotations

from pathlib import Path

from tests.harness.canary import HF_TOKEN
from tests.harness.hub import FakeHub
from tests.harness.pod import multi_env
from tests.harness.sample import KIB, payload

REPO = "org/diffusion"


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


def moved_files() -> dict[str, bytes]:
    """The next commit of main: every file changed (same names)."""
    files = {f"tokenizer/vocab-{i:02d}.json": b'{"i": %d, "v": 2}' % i for i in range(12)}
    files.update(
        {f"unet/shard-{k}.safetensors": payload(64 * KIB + k, seed=50 + k) for k in range(6)}
    )
    return files


def share_env(hub: FakeHub, cache: Path, rels: list[str], index: int, **extra: str) -> dict:
    return env(
        hub,
        cache,
        rels,
        LLMKUBE_SHARDS="2",
        JOB_COMPLETION_INDEX=str(index),
        LLMKUBE_PREFETCH_STAGER="true",
        **extra,
    )


def on_disk_commit(cache: Path, one: dict[str, bytes], two: dict[str, bytes]) -> set[str]:
    """Which commit each file on disk is of: {"1"}, {"2"} or both."""
    seen = set()
    for rel in one:
        data = (cache / rel).read_bytes()
        seen.add("1" if data == one[rel] else "2" if data == two[rel] else "?")
    return seen
