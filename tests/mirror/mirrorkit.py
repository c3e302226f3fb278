"""What the mirror tests share: the pods' variables, the models, and a
look at what the mirror holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmkube_stager.mirror.layout import Place, hf_identity, origin_key
from tests.harness.canary import HF_TOKEN
from tests.harness.hub import FakeHub
from tests.harness.pod import SOURCE_BUDGET, Pod
from tests.harness.sample import payload
from tests.harness.seaweed import READER, WRITER, SeaweedS3

REPO = "org/mirrored"
KIB = 1024
FILES = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "config.json"]
PREFIX = "mirror"


def repo_files(seed: int = 1, big_bytes: int = 192 * KIB) -> dict[str, bytes]:
    return {
        FILES[0]: payload(big_bytes, seed),
        FILES[1]: payload(96 * KIB, seed + 1),
        FILES[2]: json.dumps({"model_type": "llama", "seed": seed}).encode(),
    }


def mirror_env(
    s3: SeaweedS3, bucket: str, *, keys: tuple[str, str] = READER, **extra: str
) -> dict[str, str]:
    return {
        "LLMKUBE_MIRROR": f"s3://{bucket}/{PREFIX}",
        "LLMKUBE_MIRROR_ENDPOINT": s3.endpoint_url,
        "LLMKUBE_MIRROR_REGION": "us-east-1",
        "LLMKUBE_MIRROR_ACCESS_KEY_ID": keys[0],
        "LLMKUBE_MIRROR_SECRET_ACCESS_KEY": keys[1],
        "AWS_EC2_METADATA_DISABLED": "true",
        **extra,
    }


def seeder_env(s3: SeaweedS3, bucket: str, **extra: str) -> dict[str, str]:
    return mirror_env(s3, bucket, keys=WRITER, LLMKUBE_MIRROR_PUBLISH="true", **extra)


def hf_pod_env(pod: Pod, hub: FakeHub, **extra: str) -> dict[str, str]:
    return pod.multi_env(
        f"hf://{REPO}@main", FILES, HF_ENDPOINT=hub.url, HF_TOKEN=HF_TOKEN, **extra
    )


def new_pod(tmp_path: Path, name: str, budget: Any) -> Pod:
    return Pod(tmp_path / name, budget=budget)


def hf_place() -> Place:
    return Place(origin_key(hf_identity(REPO, "")))


def mirror_keys(s3: SeaweedS3, bucket: str) -> list[str]:
    answer = s3.admin().list_objects_v2(Bucket=bucket, Prefix=f"{PREFIX}/")
    return sorted(o["Key"] for o in answer.get("Contents") or ())


def mirror_object(s3: SeaweedS3, bucket: str, key: str) -> bytes:
    data: bytes = s3.admin().get_object(Bucket=bucket, Key=f"{PREFIX}/{key}")["Body"].read()
    return data


def origin_hits(hub: FakeHub) -> tuple[int, int, int]:
    """API calls, resolve GETs/HEADs at the hub, requests at its CDN."""
    return len(hub.requests("api")), len(hub.requests("resolve")), len(hub.cdn.requests())


def seed_hf(
    tmp_path: Path, hub: FakeHub, s3: SeaweedS3, bucket: str, files: dict[str, bytes]
) -> str:
    """The repo on the hub and seeded into the mirror; the hub's logs
    cleared. Returns the commit."""
    commit = hub.add_repo(REPO, files)
    seeder = new_pod(tmp_path, "seeder", SOURCE_BUDGET)
    seeder.run(env=hf_pod_env(seeder, hub, **seeder_env(s3, bucket))).ok(
        files=len(FILES), fetched=len(FILES)
    )
    hub.clear_log()
    hub.cdn.clear_log()
    return commit
