"""#14 items 5-6: values the scripts tolerated keep their old meaning
(with a warning in the log, not exit 2); the one value that is unsafe to read
liberally (LLMKUBE_PREFETCH_STAGER) is read as the scripts read it; a local
source without a model cache fails as the scripts did."""

from __future__ import annotations

import json

import pytest

from tests.harness.origin import Origin
from tests.harness.pod import Pod

pytestmark = pytest.mark.e2e

MODEL = "/m/model.gguf"
DATA = b"GGUF" + bytes(range(256)) * 64


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("WARNING: ")]


def test_blank_line_inside_model_files_is_skipped(pod: Pod, origin: Origin) -> None:
    origin.put("/r/a.bin", b"a")
    origin.put("/r/b.bin", b"bb")
    cache = pod.multi(origin.url + "/r/", ["a.bin", "", "b.bin"])
    run = pod.run("stage")
    run.ok(files=2, fetched=2, reused=0)
    assert (cache / "a.bin").read_bytes() == b"a" and (cache / "b.bin").read_bytes() == b"bb"
    assert any("MODEL_FILES" in w and "blank" in w for w in warnings(run.stderr)), run.stderr


def test_a_duplicate_entry_stays_invalid(pod: Pod, origin: Origin) -> None:
    pod.multi(origin.url + "/r/", ["a.bin", "", "a.bin"])
    run = pod.run("stage")
    run.failed("InvalidFileSet", exit_code=2, retryable=False)
    assert not pod.models.exists()
    assert origin.requests() == []


@pytest.mark.parametrize("value", ["0", "abc", "-1", "10s", "nan"])
def test_progress_interval_the_scripts_tolerated_is_the_default(
    pod: Pod, origin: Origin, value: str
) -> None:
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    run = pod.run("stage", env={"PROGRESS_INTERVAL": value})
    run.ok(files=1, fetched=1, reused=0)
    assert any(w.startswith("WARNING: PROGRESS_INTERVAL=") for w in warnings(run.stderr)), run


@pytest.mark.parametrize("value", ["Always", "Never", "OnChangeX"])
def test_unknown_refresh_policy_is_if_not_present(pod: Pod, origin: Origin, value: str) -> None:
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    assert pod.run("stage").returncode == 0
    origin.clear_log()
    run = pod.run("stage", env={"LLMKUBE_REFRESH_POLICY": value})
    run.ok(files=1, fetched=0, reused=1)
    assert origin.requests() == []  # IfNotPresent: a warm start asks nothing
    assert "Model already cached, skipping download" in run.stderr.splitlines()
    assert any("LLMKUBE_REFRESH_POLICY" in w for w in warnings(run.stderr)), run.stderr


@pytest.mark.parametrize(
    ("value", "role", "warned"),
    [
        ("true", "stager", False),
        ("false", "serving", False),
        ("", "serving", False),
        ("True", "serving", True),
        ("TRUE", "serving", True),
        ("1", "serving", True),
        ("yes", "serving", True),
        (" true", "serving", True),
        ("maybe", "serving", True),
    ],
)
def test_prefetch_stager_only_for_exactly_true(
    pod: Pod, origin: Origin, value: str, role: str, warned: bool
) -> None:
    """spec §9.3: a serving pod must never write on FUSE; the scripts made a
    stager only of exactly `true`."""
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    run = pod.run("plan", "--json", env={"LLMKUBE_PREFETCH_STAGER": value})
    assert run.returncode == 0, str(run)
    assert json.loads(run.stdout)["role"] == role
    said = any("LLMKUBE_PREFETCH_STAGER" in w for w in warnings(run.stderr))
    assert said is warned, run.stderr


def test_local_source_without_a_model_cache_fails_as_the_scripts_did(
    pod: Pod, tmp_path: object
) -> None:
    from pathlib import Path

    host = Path(str(tmp_path)) / "host" / "model.gguf"
    host.parent.mkdir()
    host.write_bytes(DATA)
    dest = pod.models / "ns-model.gguf"
    pod.env.update(MODEL_SOURCE=str(host), CACHE_DIR="", MODEL_PATH=str(dest))
    run = pod.run("stage")
    doc = run.failed("InvalidConfiguration", exit_code=2, retryable=False).term
    assert "Local model source requires model cache to be configured" in doc["message"]
    assert not dest.exists() and not pod.models.exists()
