"""#24 item 6: docs/kubernetes/kserve/ cannot drift from the agent: the
ClusterStorageContainers name the init container as KServe requires, pass
no args of their own (the webhook's are the storageUri and /mnt/models),
set only variables the agent reads, are locked down, and claim no URI form
the agent refuses or KServe's remaining default still serves; every
InferenceService's storageUri is taken by exactly one of them and parses."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmkube_stager.config import KSERVE_VARS, VARS
from llmkube_stager.kserve.uris import parse_pairs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "kubernetes" / "kserve"
# Read by the agent, or by the Python runtime for the agent (tempfile).
ACCEPTED = {v.env for v in VARS} | set(KSERVE_VARS) | {"TMPDIR"}


def docs(kind: str) -> list[dict[str, Any]]:
    found = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == kind]
    return found


def of_type(workload: str) -> list[dict[str, Any]]:
    """KServe filters ClusterStorageContainers by workloadType first: an
    InferenceService's webhook takes initContainer ones (the default), the
    local model cache's node agent localModelDownloadJob ones."""
    return [
        c
        for c in docs("ClusterStorageContainer")
        if c["spec"].get("workloadType", "initContainer") == workload
    ]


def ours(workload: str = "initContainer") -> list[dict[str, Any]]:
    return [c for c in of_type(workload) if "llmkube-stager" in c["spec"]["container"]["image"]]


def matches(csc: dict[str, Any], uri: str) -> bool:
    for fmt in csc["spec"]["supportedUriFormats"]:
        if "prefix" in fmt and uri.startswith(fmt["prefix"]):
            return True
        if "regex" in fmt and re.search(fmt["regex"], uri):
            return True
    return False


def test_hf_s3_and_https_are_taken() -> None:
    for uri in (
        "hf://o/m",
        "s3://b/p/",
        "https://models.example.com/iris/model.joblib",
        # #33 item 2: Azure Blob's two forms.
        "https://acct.blob.core.windows.net/c/m",
        "https://acct.z20.blob.storage.azure.net/c/m",
    ):
        assert sum(matches(c, uri) for c in ours()) == 1, uri


def locked_down(container: dict[str, Any]) -> None:
    """No args or command of its own (KServe's controllers set them), only
    variables the agent reads, a non-root read-only container."""
    assert "args" not in container and "command" not in container
    for env in container.get("env", []):
        assert env["name"] in ACCEPTED, env["name"]
    ctx = container["securityContext"]
    assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] != 0
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"]["drop"] == ["ALL"]


@pytest.mark.parametrize("csc", ours(), ids=lambda c: c["metadata"]["name"])
def test_the_container_is_kserves_storage_initializer(csc: dict[str, Any]) -> None:
    container = csc["spec"]["container"]
    assert container["name"] == "storage-initializer"
    locked_down(container)


@pytest.mark.parametrize(
    "uri",
    [
        "hdfs://n/m",
        "https://acct.file.core.windows.net/s/m",
        "https://acct.z3.file.storage.azure.net/s/m",
        "modelscope://org/model",
    ],
)
def test_what_the_agent_refuses_stays_with_kserves_default(uri: str) -> None:
    assert not any(matches(c, uri) for c in ours()), uri
    (default,) = [c for c in of_type("initContainer") if c["metadata"]["name"] == "default"]
    assert matches(default, uri)
    for taken in ("s3://b/p", "hf://o/m", "https://models.example.com/x"):
        assert not matches(default, taken), taken


@pytest.mark.parametrize("isvc", docs("InferenceService"), ids=lambda d: d["metadata"]["name"])
def test_every_storage_uri_is_taken_once_and_parses(isvc: dict[str, Any]) -> None:
    """The container KServe picks: by name (storageContainerName, which must
    support the URI), else the one matching the FIRST URI (#31 items 9, 10);
    the args it passes (`uri path ...`) parse."""
    predictor = isvc["spec"]["predictor"]
    if "storageUris" in predictor:
        pairs = [(u["uri"], u["mountPath"]) for u in predictor["storageUris"]]
    else:
        pairs = [(predictor["model"]["storageUri"], "/mnt/models")]
    first = pairs[0][0]
    every = of_type("initContainer")
    if "storageContainerName" in predictor:
        (named,) = [c for c in every if c["metadata"]["name"] == predictor["storageContainerName"]]
        assert named in ours() and matches(named, first)
    else:
        assert [c["metadata"]["name"] for c in every if matches(c, first)] in (
            [c["metadata"]["name"]] for c in ours()
        )
    parsed = parse_pairs([part for pair in pairs for part in pair], "/")
    assert [p.dest for p in parsed] == [path for _, path in pairs]


# -- #31 items 9, 10: as KServe's webhook matches and wires them ----------------------


def every_csc() -> list[dict[str, Any]]:
    return docs("ClusterStorageContainer")


@pytest.mark.parametrize("csc", every_csc(), ids=lambda c: c["metadata"]["name"])
def test_every_regex_is_anchored(csc: dict[str, Any]) -> None:
    """KServe matches a regex anywhere in the URI (regexp.MatchString in
    storage_container_types.go): unanchored, a host named in another URL's
    path or query would pick the container."""
    for fmt in csc["spec"]["supportedUriFormats"]:
        if "regex" in fmt:
            assert fmt["regex"].startswith("^"), fmt


@pytest.mark.parametrize(
    "uri",
    [
        "https://mirror.example.net/fetch?u=https://models.example.com/iris/model.joblib",
        "http://proxy.example.net/https://acct.blob.core.windows.net/c/m",
    ],
)
def test_a_host_named_inside_another_url_picks_no_container(uri: str) -> None:
    assert [c["metadata"]["name"] for c in of_type("initContainer") if matches(c, uri)] == []


@pytest.mark.parametrize("csc", of_type("initContainer"), ids=lambda c: c["metadata"]["name"])
def test_every_container_takes_several_uris_as_an_init_container(csc: dict[str, Any]) -> None:
    """An InferenceService's storageUris need supportsMultiModelDownload
    (the webhook refuses the pod otherwise); the agent takes the form
    (test_kserve_wiring.py), and KServe's own default keeps its flag."""
    assert csc["spec"]["supportsMultiModelDownload"] is True
    assert csc["spec"]["workloadType"] == "initContainer"


def test_the_default_names_todays_kserve_image() -> None:
    from tests.kserve.test_kserve_differential import KSERVE_STORAGE

    (default,) = [c for c in every_csc() if c["metadata"]["name"] == "default"]
    version = KSERVE_STORAGE.split("==")[1]
    assert default["spec"]["container"]["image"] == f"kserve/storage-initializer:v{version}"


# -- #44: the local model cache's download Job and LLMInferenceService -----------------


@pytest.mark.parametrize("uri", ["hf://o/m", "s3://b/p/", "gs://b/p"])
def test_the_local_model_cache_forms_are_taken_once(uri: str) -> None:
    """The node agent takes the first matching container of its type:
    each form is claimed once, and the Job's args parse."""
    assert sum(matches(c, uri) for c in ours("localModelDownloadJob")) == 1, uri
    (pair,) = parse_pairs([uri, "/mnt/models"], "/")
    assert pair.dest == "/mnt/models"


@pytest.mark.parametrize("csc", ours("localModelDownloadJob"), ids=lambda c: c["metadata"]["name"])
def test_a_download_job_container_is_locked_down(csc: dict[str, Any]) -> None:
    locked_down(csc["spec"]["container"])


@pytest.mark.parametrize("svc", docs("LLMInferenceService"), ids=lambda d: d["metadata"]["name"])
def test_an_llminferenceservice_overrides_its_storage_initializer(svc: dict[str, Any]) -> None:
    """The init container the controller merges by name, and the args it
    builds from the model and its hf:// / s3:// adapters (sorted by name,
    each at /mnt/lora/<name>) parse."""
    (init,) = [
        c for c in svc["spec"]["template"]["initContainers"] if c["name"] == "storage-initializer"
    ]
    assert "llmkube-stager" in init["image"]
    locked_down(init)
    model = svc["spec"]["model"]
    args = [model["uri"], "/mnt/models"]
    for adapter in sorted(model.get("lora", {}).get("adapters", []), key=lambda a: a["name"]):
        args += [adapter["uri"], f"/mnt/lora/{adapter['name']}"]
    assert all(uri.startswith(("hf://", "s3://")) for uri in args[::2])
    parsed = parse_pairs(args, "/")
    assert [p.dest for p in parsed] == args[1::2]
