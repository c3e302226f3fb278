"""#24 item 2: `hf://owner/model[:revision]` (KServe's syntax) stages the
whole repository at one commit, through the real huggingface_hub client
against the suite's fake hub, into DEST_DIR."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness.canary import HF_TOKEN, leaks
from tests.harness.hub import FakeHub
from tests.harness.origin import Fault, Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload

pytestmark = pytest.mark.e2e

REPO = "org/tiny-llm"


def repo(seed: int) -> dict[str, bytes]:
    return {
        "model.safetensors": payload(120 << 10, seed),
        "config.json": json.dumps({"seed": seed}).encode(),
        "tokenizer/tokenizer.json": json.dumps({"t": seed}).encode(),
        "README.md": b"# card\n",
    }


def visible(dest: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(dest)): p.read_bytes()
        for p in dest.rglob("*")
        if p.is_file() and not any(x.startswith(".") for x in p.relative_to(dest).parts)
    }


def hub_env(hub: FakeHub) -> dict[str, str]:
    return {"HF_ENDPOINT": hub.url, "HF_TOKEN": HF_TOKEN}


def test_a_whole_repo_at_its_main_commit(pod: Pod, hub: FakeHub, cdn: Origin) -> None:
    files = repo(1)
    commit = hub.add_repo(REPO, files)
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"hf://{REPO}", str(dest), env=hub_env(hub))

    assert run.returncode == 0, str(run)
    assert run.compact_term()["stats"]["files"] == len(files)
    assert visible(dest) == files
    assert len(hub.requests("api")) == 1
    for request in hub.requests("resolve"):
        assert f"/resolve/{commit}/" in request.path, request.path
    assert leaks(HF_TOKEN, run.outputs) == []

    hub.clear_log()
    cdn.clear_log()
    warm = pod.run(f"hf://{REPO}", str(dest), env=hub_env(hub))
    assert warm.returncode == 0, str(warm)
    assert warm.compact_term()["stats"]["fetched"] == 0
    assert hub.requests() == [] and cdn.requests() == []


def test_a_revision_after_a_colon(pod: Pod, hub: FakeHub) -> None:
    hub.add_repo(REPO, repo(1))
    tagged = hub.move_branch(REPO, "v2", repo(2))
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"hf://{REPO}:v2", str(dest), env=hub_env(hub))

    assert run.returncode == 0, str(run)
    assert visible(dest) == repo(2)
    for request in hub.requests("resolve"):
        assert f"/resolve/{tagged}/" in request.path, request.path


def test_an_interrupted_run_finishes_from_its_commit(pod: Pod, hub: FakeHub, cdn: Origin) -> None:
    """main moves between the two runs: the restart finishes the old commit,
    never a mix of two (the listing and the commit are recorded before the
    first publish)."""
    old = repo(1)
    hub.add_repo(REPO, old)
    dest = pod.tmp / "mnt" / "models"
    env = {**hub_env(hub), "LLMKUBE_FILES_IN_FLIGHT": "1"}
    weights = hub.cdn_path_of(REPO, "model.safetensors")
    cdn.set_fault(weights, Fault(status=403))
    first = pod.run(f"hf://{REPO}", str(dest), env=env)
    assert first.returncode == 4, str(first)
    staged = dest / ".llmkube-stager" / "model"
    assert (staged / "config.json").read_bytes() == old["config.json"]
    cdn.set_fault(weights, None)
    hub.move_branch(REPO, "main", repo(3))

    second = pod.run(f"hf://{REPO}", str(dest), env=env)

    assert second.returncode == 0, str(second)
    assert visible(dest) == old


@pytest.mark.parametrize("uri", ["hf://only-owner", "hf://a/b/c", "hf://a/:rev", "hf:///model"])
def test_a_malformed_hf_uri_exits_2(pod: Pod, uri: str) -> None:
    run = pod.run(uri, str(pod.tmp / "mnt" / "models"))
    assert run.returncode == 2, str(run)
    assert run.compact_term()["reason"] == "InvalidConfiguration"


def test_a_repo_without_model_files_in_the_llmkube_path_and_onchange(
    pod: Pod, hub: FakeHub
) -> None:
    """`stage` of hf://org/repo with CACHE_DIR only lists the repo; OnChange
    after the branch moved stages the new commit's set as a whole."""
    hub.add_repo(REPO, repo(1))
    cache = pod.tmp / "models" / "q"
    env = {**hub_env(hub), "MODEL_SOURCE": f"hf://{REPO}", "CACHE_DIR": str(cache)}
    pod.run(env=env).ok(files=4, fetched=4)
    new = {**repo(4), "added.txt": b"added"}
    hub.move_branch(REPO, "main", new)

    run = pod.run(env=env, LLMKUBE_REFRESH_POLICY="OnChange")

    run.ok(files=5, fetched=4, reused=1)  # README.md is the same blob
    for rel, data in new.items():
        assert (cache / rel).read_bytes() == data, rel
    for request in hub.requests("resolve"):
        assert "/resolve/main/" not in request.path, request.path
