"""#13 item 1: a missing or too-old source library is InvalidConfiguration naming
the package, exit 2, nothing on disk; never ModelStagerInternalError.

Each case runs the CLI of this checkout under a real scratch venv
(tests/harness/venvs.py, `pod.run(python=...)`) that lacks the library or
holds a release older than the floor, against the fake hub or the S3
endpoint on loopback. A warm start needs neither library.
"""

from __future__ import annotations

import json

import pytest

from llmkube_stager.sources.deps import BOTO3, HF_HUB
from tests.harness.canary import HF_TOKEN
from tests.harness.hub import FakeHub
from tests.harness.origin import closed_port_url
from tests.harness.pod import Pod, Run
from tests.harness.venvs import CORE, scratch_venv

REPO = "org/repo"
FILE = "model.safetensors"
TOO_OLD_HUB = "0.36.0"  # the last 0.x: requests, no client factory


@pytest.fixture(scope="module")
def bare_python() -> str:
    return str(scratch_venv("bare", CORE))


@pytest.fixture(scope="module")
def old_hub_python() -> str:
    return str(scratch_venv("old-hub", [*CORE, f"huggingface_hub=={TOO_OLD_HUB}"]))


@pytest.fixture
def hub(hub: FakeHub) -> FakeHub:
    """The suite's fake hub, holding the repo."""
    hub.add_repo(REPO, {FILE: b"\x01" * 4096})
    return hub


def hf_env(pod: Pod, hub: FakeHub, **extra: str) -> dict[str, str]:
    return pod.single_env(
        f"hf://{REPO}@main/{FILE}", name=FILE, HF_ENDPOINT=hub.url, HF_TOKEN=HF_TOKEN, **extra
    )


def assert_refused(run: Run, text: str) -> None:
    doc = run.failed("InvalidConfiguration", exit_code=2, retryable=False).term
    assert text in doc["message"], doc


def test_hf_without_huggingface_hub(pod, hub, bare_python) -> None:
    run = pod.run(env=hf_env(pod, hub), python=bare_python)

    assert_refused(run, f"huggingface_hub >= {HF_HUB.floor} is required for hf:// sources")
    assert "not installed" in run.term["message"]
    assert not pod.cache_dir.exists()
    assert hub.requests() == []


def test_hf_with_a_huggingface_hub_older_than_the_floor(pod, hub, old_hub_python) -> None:
    run = pod.run(env=hf_env(pod, hub), python=old_hub_python)

    assert_refused(
        run,
        f"huggingface_hub >= {HF_HUB.floor} is required for hf:// sources; found {TOO_OLD_HUB}",
    )
    assert not pod.cache_dir.exists()
    assert hub.requests() == []


def test_plan_probe_without_huggingface_hub_names_it(pod, hub, bare_python) -> None:
    """`plan --probe` asks the hub through the fetcher directly: the missing
    library is the probe's answer, and closing the fetcher must not import it."""
    run = pod.run("plan", "--json", "--probe", env=hf_env(pod, hub), python=bare_python)

    # The whole plan, then the failed probe's reason and exit code (#46 item 6).
    assert run.returncode == 2, str(run)
    assert "huggingface_hub >= " in run.line_with("ERROR: InvalidConfiguration")
    assert "Traceback" not in run.stderr
    doc = json.loads(run.stdout)
    (row,) = doc["files"]
    assert row["remote"]["error"] == "InvalidConfiguration", row
    assert "huggingface_hub >= " in row["remote"]["detail"]
    assert hub.requests() == []


def test_on_change_without_huggingface_hub_is_refused_before_any_request(
    pod, hub, bare_python
) -> None:
    pod.run(env=hf_env(pod, hub))  # staged by the full install
    hub.clear_log()

    run = pod.run(env=hf_env(pod, hub, LLMKUBE_REFRESH_POLICY="OnChange"), python=bare_python)

    assert_refused(run, "huggingface_hub")
    assert hub.requests() == []


def test_a_warm_start_needs_no_huggingface_hub(pod, hub, bare_python) -> None:
    """The library is imported only to ask the hub; a complete cache under
    IfNotPresent never asks."""
    first = pod.run(env=hf_env(pod, hub))
    assert first.returncode == 0, str(first)
    hub.clear_log()

    run = pod.run(env=hf_env(pod, hub), python=bare_python)

    assert run.returncode == 0, str(run)
    assert run.term["stats"]["reused"] == 1
    assert hub.requests() == []


def test_s3_without_boto3(pod, bare_python) -> None:
    env = pod.single_env(
        "s3://models/llama/model.gguf",
        AWS_ENDPOINT_URL=closed_port_url(),
        AWS_ACCESS_KEY_ID="AKIAFLOORTEST0000000",
        AWS_SECRET_ACCESS_KEY="floor-test-secret",
    )

    run = pod.run(env=env, python=bare_python)

    assert_refused(run, f"boto3 >= {BOTO3.floor} is required for s3:// sources")
    assert not pod.cache_dir.exists()
