"""Fan-out figure of the in-cluster mirror (docs/mirror.md): N caches on one
machine (N "nodes") stage one Hugging Face model of 4 LFS files from the
fake hub, whose CDN is capped per connection, first each from the hub, then
through a SeaweedFS mirror that one seeder fills. Prints, per way, the
bytes the hub's CDN served, the hub's API calls, and the time until the
last node is ready (with the mirror: the seeder's time included).

Not yet a case of `make bench` (a standalone script, like hf_storm.py).
Environment: FANOUT_NODES (default 8), FANOUT_FILE_MIB (default 16),
FANOUT_RATE_MIB_S (the CDN's cap per connection, default 8).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness.hub import FakeHub, fake_hub  # noqa: E402
from tests.harness.origin import Fault  # noqa: E402
from tests.harness.seaweed import READER, WRITER, SeaweedS3  # noqa: E402

NODES = int(os.environ.get("FANOUT_NODES", "8"))
FILE_MIB = int(os.environ.get("FANOUT_FILE_MIB", "16"))
RATE = int(os.environ.get("FANOUT_RATE_MIB_S", "8")) * 1024 * 1024
REPO = "org/fanout"
FILES = [f"model-{i:05d}-of-00004.safetensors" for i in range(1, 5)]


def _env(base: Path, hub: FakeHub, **extra: str) -> dict[str, str]:
    (base / "home").mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(base / "home"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(ROOT),
        "MODEL_SOURCE": f"hf://{REPO}@main",
        "MODEL_FILES": "\n".join(FILES),
        "CACHE_DIR": str(base / "models" / "k"),
        "HF_ENDPOINT": hub.url,
        "LLMKUBE_CA_DIR": str(base / "no-certs"),
        "LLMKUBE_HOST_MODEL": str(base / "no-host-model" / "m.gguf"),
        "LLMKUBE_TERMINATION_LOG": str(base / "term"),
        **extra,
    }


def _nodes(envs: list[dict[str, str]]) -> float:
    """Start every node at once; seconds until the last is ready."""
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "llmkube_stager", "stage"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for env in envs
    ]
    codes = [p.wait(timeout=3600) for p in procs]
    assert codes == [0] * len(procs), codes
    return time.monotonic() - started


def _mirror(s3: SeaweedS3, bucket: str, keys: tuple[str, str], **extra: str) -> dict[str, str]:
    return {
        "LLMKUBE_MIRROR": f"s3://{bucket}/mirror",
        "LLMKUBE_MIRROR_ENDPOINT": s3.endpoint_url,
        "LLMKUBE_MIRROR_ACCESS_KEY_ID": keys[0],
        "LLMKUBE_MIRROR_SECRET_ACCESS_KEY": keys[1],
        "AWS_EC2_METADATA_DISABLED": "true",
        **extra,
    }


def _served(hub: FakeHub) -> dict[str, int]:
    return {
        "cdn_bytes": sum(r.body_bytes for r in hub.cdn.requests(method="GET")),
        "api_calls": len(hub.requests("api")),
    }


def main() -> None:
    files = {rel: os.urandom(FILE_MIB * 1024 * 1024) for rel in FILES}
    with (
        tempfile.TemporaryDirectory() as tmp,
        fake_hub() as hub,
        SeaweedS3().start() as s3,
    ):
        hub.add_repo(REPO, files)
        for rel in FILES:
            hub.cdn.set_fault(hub.cdn_path_of(REPO, rel), Fault(rate_bytes_per_s=RATE))
        rows = []
        hub.clear_log()
        hub.cdn.clear_log()
        seconds = _nodes([_env(Path(tmp) / "origin" / f"n{i}", hub) for i in range(NODES)])
        rows.append({"way": "each node from the hub", "nodes": NODES, "seconds": seconds})
        rows[-1].update(_served(hub))

        bucket = s3.create_bucket("fanout-mirror")
        hub.clear_log()
        hub.cdn.clear_log()
        seeder = _env(Path(tmp) / "mirror" / "seeder", hub, **_mirror(s3, bucket, WRITER))
        seeder["LLMKUBE_MIRROR_PUBLISH"] = "true"
        seeded_s = _nodes([seeder])
        readers = [
            _env(Path(tmp) / "mirror" / f"n{i}", hub, **_mirror(s3, bucket, READER))
            for i in range(NODES)
        ]
        read_s = _nodes(readers)
        rows.append(
            {
                "way": "one seeder, then the nodes from the mirror",
                "nodes": NODES,
                "seconds": seeded_s + read_s,
                "seed_seconds": seeded_s,
            }
        )
        rows[-1].update(_served(hub))
        model = sum(len(v) for v in files.values())
        for row in rows:
            row["copies_from_origin"] = round(int(row["cdn_bytes"]) / model, 2)
            row["seconds"] = round(float(row["seconds"]), 1)
            print(json.dumps(row))


if __name__ == "__main__":
    main()
