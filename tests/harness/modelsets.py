"""Multi-file model sets whose files change upstream (#10 defects 11-13,
#21 items 4-5): a three-file model in commits on the fake hub, a warm set
whose origin now serves newer bytes, and the publish loop interrupted right
after its first rename, at a log line of the run (an injected effect: a
SIGTERM the process sends itself, or `SimulatedKill` standing for a SIGKILL).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

from tests.harness.disk import write_record
from tests.harness.hub import FakeHub
from tests.harness.origin import Origin
from tests.harness.sample import payload

REPO = "org/model"
SHARDS = ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


def commit_files(seed: int) -> dict[str, bytes]:
    config = json.dumps({"seed": seed, "pad": "x" * 40}).encode()
    return {
        SHARDS[0]: config,
        SHARDS[1]: payload(256 * 1024, seed * 10 + 1),
        SHARDS[2]: payload(256 * 1024, seed * 10 + 2),
    }


class SimulatedKill(BaseException):
    """Stands for a SIGKILL at this moment: nothing after it runs that a
    kill would not have run (no publish, no record, no intent cleared)."""


def hf_env(tmp_path: Path, hub: FakeHub, **extra: str) -> dict[str, str]:
    (tmp_path / "no-certs").mkdir(exist_ok=True)  # empty: a missing one is warned about
    return {
        "MODEL_SOURCE": f"hf://{REPO}@main",
        "HF_ENDPOINT": hub.url,
        "CACHE_DIR": str(tmp_path / "cache"),
        "MODEL_FILES": "\n".join(SHARDS),
        "LLMKUBE_CONNECT_TIMEOUT": "2",
        "LLMKUBE_STALL_TIMEOUT": "2",
        "LLMKUBE_RETRIES": "0",
        "LLMKUBE_CA_DIR": str(tmp_path / "no-certs"),
        **extra,
    }


def warm_set_changed_upstream(
    cache: Path, origin: Origin, files: Iterable[str], sizes: tuple[int, int], *, new_seed: int
) -> dict[str, bytes]:
    """A warm cache of `files` (each with its size record) whose origin now
    serves other bytes at /repo/<rel>: the i-th file is `sizes[0] + i` bytes
    of seed i on disk and `sizes[1] + i` bytes of seed `new_seed + i` upstream.
    Returns the new bytes."""
    cache.mkdir(parents=True)
    new = {}
    for i, rel in enumerate(files):
        old = payload(sizes[0] + i, i)
        (cache / rel).write_bytes(old)
        write_record(cache / rel, len(old))
        new[rel] = payload(sizes[1] + i, new_seed + i)
        origin.put(f"/repo/{rel}", new[rel])
    return new


def interrupt_after_first_publish(action: Callable[[], None]) -> Callable[[str], None]:
    fired: list[bool] = []

    def hook(text: str) -> None:
        if "revalidated (downloaded)" in text and not fired:
            fired.append(True)
            action()

    return hook
