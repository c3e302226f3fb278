"""oci:// references and manifests, read (pure, #43 item 1)."""

from __future__ import annotations

import json

import pytest

from llmkube_stager.errors import ConfigError, SourceError
from llmkube_stager.sources.oci.auth import parse_challenge
from llmkube_stager.sources.oci.manifest import (
    DOCKER_LIST,
    OCI_MANIFEST,
    choose_platform,
    layer_files,
    parse_manifest,
)
from llmkube_stager.sources.oci.ref import parse_oci_source

D = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("source", "registry", "repo", "reference", "base"),
    [
        ("oci://ai/smollm2", "docker.io", "ai/smollm2", "latest", "https://registry-1.docker.io"),
        (
            "oci://ubuntu:24.04",
            "docker.io",
            "library/ubuntu",
            "24.04",
            "https://registry-1.docker.io",
        ),
        (
            "oci://docker.io/ubuntu",
            "docker.io",
            "library/ubuntu",
            "latest",
            "https://registry-1.docker.io",
        ),
        ("oci://ghcr.io/org/m:v1", "ghcr.io", "org/m", "v1", "https://ghcr.io"),
        (f"oci://ghcr.io/org/m:v1@{D}", "ghcr.io", "org/m", D, "https://ghcr.io"),
        ("oci://localhost:5000/m", "localhost:5000", "m", "latest", "http://localhost:5000"),
        ("oci://127.0.0.1:5000/a/b", "127.0.0.1:5000", "a/b", "latest", "http://127.0.0.1:5000"),
        ("oci+fetch://quay.io/o/m:1", "quay.io", "o/m", "1", "https://quay.io"),
    ],
)
def test_references_map_as_docker_maps_them(
    source: str, registry: str, repo: str, reference: str, base: str
) -> None:
    ref = parse_oci_source(source)
    assert (ref.registry, ref.repo, ref.reference, ref.base_url) == (
        registry,
        repo,
        reference,
        base,
    )


@pytest.mark.parametrize(
    "source",
    [
        "oci://",
        "oci://ghcr.io/Org/M",
        "oci://ghcr.io/m@sha256:12",
        "oci://h.io/m:bad tag",
        "oci://h.io/",
    ],
)
def test_bad_references_are_configuration_errors(source: str) -> None:
    with pytest.raises(ConfigError):
        parse_oci_source(source)


def _layer(media: str, **annotations: str) -> dict[str, object]:
    return {"mediaType": media, "digest": D, "size": 3, "annotations": annotations}


def test_layers_are_named_by_their_annotation_newest_first() -> None:
    doc = {
        "mediaType": OCI_MANIFEST,
        "layers": [
            _layer(
                "application/vnd.cncf.model.weight.v1.raw", **{"org.cncf.model.filepath": "w/a.bin"}
            ),
            _layer(
                "application/vnd.cnai.model.weight.v1.raw", **{"org.cnai.model.filepath": "b.bin"}
            ),
            _layer("application/vnd.docker.ai.gguf.v3"),
        ],
    }
    parsed = parse_manifest(json.dumps(doc).encode(), "", "here")
    assert [name for name, _ in layer_files(parsed, "here")] == ["w/a.bin", "b.bin", "model.gguf"]


def test_an_archive_layer_refuses_the_manifest() -> None:
    doc = {"mediaType": OCI_MANIFEST, "layers": [_layer("application/vnd.oci.image.layer.v1.tar")]}
    with pytest.raises(SourceError, match="archive"):
        layer_files(parse_manifest(json.dumps(doc).encode(), "", "here"), "here")


def test_an_index_resolves_to_the_platform_or_names_what_it_has() -> None:
    entry = {"mediaType": OCI_MANIFEST, "digest": D, "size": 9}
    doc = {
        "mediaType": DOCKER_LIST,
        "manifests": [
            {**entry, "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
        ],
    }
    index = parse_manifest(json.dumps(doc).encode(), "", "here")
    assert choose_platform(index, "linux/arm64", "here").platform == "linux/arm64/v8"
    with pytest.raises(SourceError, match="linux/arm64/v8"):
        choose_platform(index, "linux/amd64", "here")


def test_a_bearer_challenge_is_read() -> None:
    scheme, params = parse_challenge(
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
        'scope="repository:ai/smollm2:pull"'
    )
    assert scheme == "bearer"
    assert params == {
        "realm": "https://auth.docker.io/token",
        "service": "registry.docker.io",
        "scope": "repository:ai/smollm2:pull",
    }
