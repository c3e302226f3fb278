"""docs/kubernetes/indexed-prefetch-job.yaml cannot drift from the agent
(#16 item 4): an Indexed Job whose completions equal LLMKUBE_SHARDS, every
variable one the agent reads, and a configuration every index accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from llmkube_stager.config import VARS, load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "kubernetes" / "indexed-prefetch-job.yaml"


def _job() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return doc


def _env(job: dict[str, Any]) -> dict[str, str]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    names = {e["name"] for e in container["env"]}
    assert names <= {v.env for v in VARS}, names - {v.env for v in VARS}
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_the_indexed_job_has_one_share_per_completion() -> None:
    job = _job()
    spec = job["spec"]
    env = _env(job)
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == int(env["LLMKUBE_SHARDS"])
    assert spec["podReplacementPolicy"] == "Failed"  # two pods of one index never overlap
    assert spec["backoffLimitPerIndex"] > 0
    assert "JOB_COMPLETION_INDEX" not in env  # Kubernetes sets it


def test_every_index_gets_a_valid_configuration() -> None:
    job = _job()
    env = _env(job)
    shares = []
    for index in range(job["spec"]["completions"]):
        config = load_config({**env, "JOB_COMPLETION_INDEX": str(index)}, {})
        assert config.prefetch_stager and config.cache_dir.startswith("/models/")
        shares.append(config.shard_index)
    assert shares == list(range(job["spec"]["completions"]))


def test_the_job_gives_its_pods_its_identity_through_the_downward_api() -> None:
    """#29 item 6: a sharded Job's commit claim names the Job, from the
    pod's controller-uid label (a retried pod keeps the claim, the next Job
    resolves anew)."""
    container = _job()["spec"]["template"]["spec"]["containers"][0]
    by_name = {e["name"]: e for e in container["env"]}
    field = by_name["LLMKUBE_JOB_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert field == "metadata.labels['batch.kubernetes.io/controller-uid']"
