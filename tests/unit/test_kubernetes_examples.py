"""docs/kubernetes/*.yaml cannot drift from the agent (#13 item 5): every
environment variable is one the agent reads, every value it accepts, every
command is a CLI command, the Job's podFailurePolicy covers the agent's exit
codes with the right action, and the containers are locked down."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmkube_stager.cli import cli
from llmkube_stager.config import VARS, load_config
from llmkube_stager.errors import (
    EXIT_INTERNAL,
    EXIT_PERMANENT,
    EXIT_RETRYABLE,
    EXIT_USAGE,
    Reason,
    exit_code_for,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "kubernetes"
# The agent's own reads: the contract variables, and the proxy variables'
# lowercase spellings (curl's, which win: config.curl_style).
ACCEPTED = {v.env for v in VARS} | {"https_proxy", "http_proxy", "no_proxy"}
PEAK_RSS_MIB = 64  # docs/performance.md: "peak RSS <= 64 MiB"
_QUANTITY = re.compile(r"(\d+)(Ki|Mi|Gi)?")


def _docs() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append((path.name, doc))
    return found


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]
    return spec["template"]["spec"] if doc["kind"] == "Job" else spec


def _agent_containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(file, pod spec, container) for every container running the agent."""
    found = []
    for name, doc in _docs():
        spec = _pod_spec(doc)
        for container in spec.get("initContainers", []) + spec.get("containers", []):
            if "llmkube-stager" in container["image"]:
                found.append((name, spec, container))
    return found


AGENTS = _agent_containers()
IDS = [f"{name}:{c['name']}" for name, _, c in AGENTS]


def test_the_examples_exist() -> None:
    names = {name for name, _ in _docs()}
    assert {"serving-pod.yaml", "prefetch-job.yaml", "reader-verify-pod.yaml"} <= names
    commands = {c["args"][0] for _, _, c in AGENTS}
    assert commands == {"stage", "verify"}


@pytest.mark.parametrize(("name", "spec", "container"), AGENTS, ids=IDS)
def test_commands_are_cli_commands(name: str, spec: Any, container: dict[str, Any]) -> None:
    assert "command" not in container, "the image's entrypoint is the CLI"
    assert container["args"][0] in cli.commands


@pytest.mark.parametrize(("name", "spec", "container"), AGENTS, ids=IDS)
def test_every_variable_is_read_by_the_agent_and_every_value_accepted(
    name: str, spec: Any, container: dict[str, Any]
) -> None:
    names = [e["name"] for e in container.get("env", [])]
    assert set(names) <= ACCEPTED, f"{name}: not read by the agent: {set(names) - ACCEPTED}"
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    if "LLMKUBE_SHARDS" in env:
        env["JOB_COMPLETION_INDEX"] = "0"  # Kubernetes sets it in an Indexed Job
    config = load_config(env, {}, require_source=container["args"][0] == "stage")
    assert config.cache_dir.startswith("/models/")


@pytest.mark.parametrize(("name", "spec", "container"), AGENTS, ids=IDS)
def test_containers_are_locked_down(name: str, spec: Any, container: dict[str, Any]) -> None:
    ctx = container["securityContext"]
    assert ctx["runAsNonRoot"] is True
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"]["drop"] == ["ALL"]
    assert ctx["seccompProfile"]["type"] == "RuntimeDefault"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert "terminationMessagePath" not in container  # the agent's default path


def _mib(quantity: str) -> float:
    match = _QUANTITY.fullmatch(str(quantity))
    assert match, quantity
    scale = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, None: 1 / (1 << 20)}[match.group(2)]
    return int(match.group(1)) * scale


@pytest.mark.parametrize(("name", "spec", "container"), AGENTS, ids=IDS)
def test_memory_is_sized_from_the_measured_peak(
    name: str, spec: Any, container: dict[str, Any]
) -> None:
    resources = container["resources"]
    request = _mib(resources["requests"]["memory"])
    limit = _mib(resources["limits"]["memory"])
    assert request <= limit
    if container["args"][0] == "stage":
        assert request >= PEAK_RSS_MIB
        assert limit >= 2 * PEAK_RSS_MIB  # headroom over the measured peak
    assert "cpu" not in resources["limits"], "a CPU limit caps the transfer rate"


READERS = [(n, s, c) for n, s, c in AGENTS if c["args"][0] == "verify"]


@pytest.mark.parametrize(("name", "spec", "container"), READERS)
def test_verify_mounts_the_cache_read_only(name: str, spec: Any, container: dict[str, Any]) -> None:
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    for mount in mounts.values():
        assert mount.get("readOnly") is True, mount
        claim = volumes[mount["name"]].get("persistentVolumeClaim")
        if claim is not None:
            assert claim.get("readOnly") is True


JOBS = [(name, doc) for name, doc in _docs() if doc["kind"] == "Job"]


@pytest.mark.parametrize(("name", "doc"), JOBS, ids=[name for name, _ in JOBS])
def test_the_job_fails_fast_on_what_retrying_cannot_fix_and_counts_the_rest(
    name: str, doc: dict[str, Any]
) -> None:
    job = doc["spec"]
    spec = job["template"]["spec"]
    assert spec["restartPolicy"] == "Never"
    assert job["podReplacementPolicy"] == "Failed"
    assert isinstance(job["backoffLimit"], int) and job["backoffLimit"] > 0
    names = {c["name"] for c in spec.get("initContainers", []) + spec["containers"]}
    by_action: dict[str, set[int]] = {}
    for rule in job["podFailurePolicy"]["rules"]:
        on = rule.get("onExitCodes")
        if on is None:
            continue
        assert on["containerName"] in names
        assert on["operator"] == "In"
        by_action.setdefault(rule["action"], set()).update(on["values"])
    assert by_action["FailJob"] == {EXIT_USAGE, EXIT_INTERNAL, EXIT_PERMANENT}
    assert by_action["Count"] == {EXIT_RETRYABLE}
    produced = {exit_code_for(r) for r in Reason} - {0}
    assert produced == by_action["FailJob"] | by_action["Count"]
    conditions = [r for r in job["podFailurePolicy"]["rules"] if "onPodConditions" in r]
    assert conditions and conditions[0]["action"] == "Ignore"
    assert conditions[0]["onPodConditions"][0]["type"] == "DisruptionTarget"


def test_the_readme_names_every_example() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    for path in EXAMPLES.glob("*.yaml"):
        assert path.name in readme
