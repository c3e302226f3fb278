"""#44 item 1: an LLMInferenceService's storage-initializer, overridden with
the agent's image (spec.template.initContainers, merged by KServe's
controller): the CLI entry point run with exactly the args and env the
controller gives it (tests/harness/kserve_pods.py), for hf:// and s3://,
the LoRA form (several pairs, the emptyDir at /mnt) and the scheduler's
tokenizer container (STORAGE_ALLOW_PATTERNS as a JSON list)."""

from __future__ import annotations

import json

import pytest

from tests.harness.canary import HF_TOKEN, leaks
from tests.harness.hub import FakeHub
from tests.harness.kserve_pods import (
    TOKENIZER_FILES,
    llmisvc_args,
    llmisvc_env,
    visible,
)
from tests.harness.pod import Pod
from tests.harness.sample import payload
from tests.harness.seaweed import SeaweedS3, kserve_s3_env

pytestmark = pytest.mark.e2e

BASE = "org/tiny-llm"


def llm_repo(seed: int) -> dict[str, bytes]:
    """A model with every file the tokenizer container asks for, and more."""
    files = {name: json.dumps({"f": name, "seed": seed}).encode() for name in TOKENIZER_FILES}
    files["merges.txt"] = b"#version: 0.2\na b\n"
    files["model.safetensors"] = payload(200 << 10, seed)
    files["README.md"] = b"# card\n"
    files["chat_template.jinja"] = b"{{ messages }}"
    return files


def adapter_repo(seed: int) -> dict[str, bytes]:
    return {
        "adapter_config.json": json.dumps({"r": 8, "seed": seed}).encode(),
        "adapter_model.safetensors": payload(40 << 10, seed),
    }


def hub_env(hub: FakeHub) -> dict[str, str]:
    return {"HF_ENDPOINT": hub.url, "HF_TOKEN": HF_TOKEN}


def test_an_hf_model_with_the_controllers_args_and_env(pod: Pod, hub: FakeHub) -> None:
    """args [hf://..., /mnt/models], KServe's HF_HUB_ENABLE_HF_TRANSFER and
    Xet variables beside the service account's HF_TOKEN."""
    files = llm_repo(1)
    hub.add_repo(BASE, files)
    uri = f"hf://{BASE}"

    run = pod.run(*llmisvc_args(pod.tmp, uri), env={**hub_env(hub), **llmisvc_env(uri)})

    run.ok(files=len(files), fetched=len(files))
    assert visible(pod.tmp / "mnt" / "models") == files
    assert leaks(HF_TOKEN, run.outputs) == []


def test_an_s3_model_with_the_controllers_args(pod: Pod, s3: SeaweedS3, bucket: str) -> None:
    files = {"config.json": b"{}", "model.safetensors": payload(150 << 10, 7)}
    for rel, data in files.items():
        s3.put(bucket, f"llm/qwen/{rel}", data)
    uri = f"s3://{bucket}/llm/qwen"

    run = pod.run(*llmisvc_args(pod.tmp, uri), env={**kserve_s3_env(s3), **llmisvc_env(uri)})

    run.ok(files=2, fetched=2)
    assert visible(pod.tmp / "mnt" / "models") == files


def test_lora_adapters_are_pairs_in_one_container(
    pod: Pod, hub: FakeHub, s3: SeaweedS3, bucket: str
) -> None:
    """The base at /mnt/models, each adapter at /mnt/lora/<name>, one
    emptyDir at /mnt: every pair lands in its own path, nothing else in /mnt."""
    base, sql = llm_repo(2), adapter_repo(3)
    hub.add_repo(BASE, base)
    hub.add_repo("org/sql-lora", sql)
    chat = adapter_repo(4)
    for rel, data in chat.items():
        s3.put(bucket, f"adapters/chat/{rel}", data)
    uri = f"hf://{BASE}"
    adapters = {"sql": "hf://org/sql-lora", "chat": f"s3://{bucket}/adapters/chat"}
    env = {**hub_env(hub), **kserve_s3_env(s3), **llmisvc_env(uri)}

    run = pod.run(*llmisvc_args(pod.tmp, uri, adapters), env=env)

    total = len(base) + len(sql) + len(chat)
    run.ok(files=total, fetched=total)
    mnt = pod.tmp / "mnt"
    assert visible(mnt / "models") == base
    assert visible(mnt / "lora" / "sql") == sql
    assert visible(mnt / "lora" / "chat") == chat
    assert sorted(p.name for p in mnt.iterdir()) == ["lora", "models"]

    warm = pod.run(*llmisvc_args(pod.tmp, uri, adapters), env=env)
    warm.ok(files=total, fetched=0, reused=total)


def test_the_tokenizer_container_stages_only_tokenizer_files(pod: Pod, hub: FakeHub) -> None:
    """The scheduler's tokenizer: STORAGE_ALLOW_PATTERNS as the controller
    writes it (a JSON list of names); the weights are never requested."""
    files = llm_repo(5)
    hub.add_repo(BASE, files)
    uri = f"hf://{BASE}"
    env = {**hub_env(hub), **llmisvc_env(uri, tokenizer=True)}

    run = pod.run(*llmisvc_args(pod.tmp, uri), env=env)

    wanted = {rel: data for rel, data in files.items() if rel in TOKENIZER_FILES}
    run.ok(files=len(wanted), fetched=len(wanted))
    assert visible(pod.tmp / "mnt" / "models") == wanted
    asked = [r.path for r in hub.requests("resolve")] + [r.path for r in hub.cdn.requests()]
    assert not [p for p in asked if "model.safetensors" in p], asked


def test_the_tokenizer_container_of_an_s3_model(pod: Pod, s3: SeaweedS3, bucket: str) -> None:
    files = {"tokenizer.json": b'{"t": 1}', "config.json": b"{}", "model.bin": payload(64 << 10, 9)}
    for rel, data in files.items():
        s3.put(bucket, f"tok/{rel}", data)
    uri = f"s3://{bucket}/tok"
    env = {**kserve_s3_env(s3), **llmisvc_env(uri, tokenizer=True)}

    run = pod.run(*llmisvc_args(pod.tmp, uri), env=env)

    run.ok(files=2, fetched=2)
    assert visible(pod.tmp / "mnt" / "models") == {
        "tokenizer.json": files["tokenizer.json"],
        "config.json": files["config.json"],
    }
    assert not [r for r in s3.requests("GET") if r.path.endswith("/model.bin")]
