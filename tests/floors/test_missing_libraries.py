"""#13.1: a missing or too-old source library is InvalidConfiguration naming
the package, exit 2, nothing on disk; never ModelStagerInternalError.

Each case runs the CLI of this checkout under a real scratch venv (venvs.py)
that lacks the library or holds a release older than the floor, against the
fake hub or the S3 endpoint on loopback. A warm start needs neither library.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sources.support import HF_TOKEN, Sandbox

from llmkube_stager.sources.deps import BOTO3, HF_HUB
from tests.floors.venvs import CORE, scratch_venv
from tests.harness.hub import FakeHub
from tests.harness.origin import Origin, closed_port_url

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
def box(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path)


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    with Origin() as cdn, FakeHub(cdn, tokens={HF_TOKEN}) as fake:
        fake.add_repo(REPO, {FILE: b"\x01" * 4096})
        yield fake


def hf_env(box: Sandbox, hub: FakeHub, **extra: str) -> dict[str, str]:
    return box.single(
        f"hf://{REPO}@main/{FILE}", name=FILE, HF_ENDPOINT=hub.url, HF_TOKEN=HF_TOKEN, **extra
    )


def assert_refused(run, text: str) -> None:
    assert run.returncode == 2, str(run)
    doc = run.term
    assert (doc["reason"], doc["retryable"]) == ("InvalidConfiguration", False), doc
    assert text in doc["message"], doc
    assert "Traceback" not in run.stderr, run.stderr


def test_hf_without_huggingface_hub(box, hub, bare_python) -> None:
    run = box.cli(hf_env(box, hub), python=bare_python)

    assert_refused(run, f"huggingface_hub >= {HF_HUB.floor} is required for hf:// sources")
    assert "not installed" in run.term["message"]
    assert not box.cache_dir.exists()
    assert hub.requests() == []


def test_hf_with_a_huggingface_hub_older_than_the_floor(box, hub, old_hub_python) -> None:
    run = box.cli(hf_env(box, hub), python=old_hub_python)

    assert_refused(
        run,
        f"huggingface_hub >= {HF_HUB.floor} is required for hf:// sources; found {TOO_OLD_HUB}",
    )
    assert not box.cache_dir.exists()
    assert hub.requests() == []


def test_on_change_without_huggingface_hub_is_refused_before_any_request(
    box, hub, bare_python
) -> None:
    box.cli(hf_env(box, hub))  # staged by the full install
    hub.clear_log()

    run = box.cli(hf_env(box, hub, LLMKUBE_REFRESH_POLICY="OnChange"), python=bare_python)

    assert_refused(run, "huggingface_hub")
    assert hub.requests() == []


def test_a_warm_start_needs_no_huggingface_hub(box, hub, bare_python) -> None:
    """The library is imported only to ask the hub; a complete cache under
    IfNotPresent never asks."""
    first = box.cli(hf_env(box, hub))
    assert first.returncode == 0, str(first)
    hub.clear_log()

    run = box.cli(hf_env(box, hub), python=bare_python)

    assert run.returncode == 0, str(run)
    assert run.term["stats"]["reused"] == 1
    assert hub.requests() == []


def test_s3_without_boto3(box, bare_python) -> None:
    env = box.single(
        "s3://models/llama/model.gguf",
        AWS_ENDPOINT_URL=closed_port_url(),
        AWS_ACCESS_KEY_ID="AKIAFLOORTEST0000000",
        AWS_SECRET_ACCESS_KEY="floor-test-secret",
    )

    run = box.cli(env, python=bare_python)

    assert_refused(run, f"boto3 >= {BOTO3.floor} is required for s3:// sources")
    assert not box.cache_dir.exists()
