"""#34 "through every source the agent has": a model signed by model-signing's
own API (tests/harness/signing.py) under a gs:// prefix (the real
gcp-storage-emulator behind the suite's front, tests/harness/gcs.py) and an
Azure Blob prefix (Azurite, tests/harness/azurite.py), its `model.sig`
beside it (the default bundle location, staging/bundle.py), staged by the
real CLI with the listing as the staged set; then tampered with at the
source: a changed byte, an added object, a removed object, a bundle of
another key. None is ever published (no model file on disk, no record,
exit 4, ModelSignatureInvalid), the untampered one is.

The emulators are the session's (tests/conftest.py: `gcs_emulator` behind
a `gcs` front of the test's own, `azurite` cleared as `az`), each test in
a bucket or container of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.azurite import LOOPBACK_ONLY, Azurite, container_sas
from tests.harness.azurite import put as put_blob
from tests.harness.gcs import GceMetadata, GcsFront, gcs_env
from tests.harness.pod import Pod
from tests.harness.sample import KIB, payload
from tests.harness.signing import (
    FILES,
    RECORD,
    Signer,
    changed_byte,
    refused,
)

PREFIX = "org/signed"


@dataclass
class Cloud:
    """One object store with one model prefix: how the test writes an
    object there, and the pod's MODEL_SOURCE and credentials for it."""

    source: str
    env: dict[str, str]
    put: Callable[[str, bytes], None]


def _gcs_cloud(gcs: GcsFront, no_metadata: GceMetadata, bucket: str) -> Cloud:
    def put(rel: str, data: bytes) -> None:
        gcs.emulator.put(bucket, f"{PREFIX}/{rel}", data)

    return Cloud(f"gs://{bucket}/{PREFIX}", gcs_env(gcs, no_metadata), put)


def _azure_cloud(az: Azurite, container: str) -> Cloud:
    def put(rel: str, data: bytes) -> None:
        put_blob(az, container, f"{PREFIX}/{rel}", data)

    env = {"AZURE_STORAGE_CONNECTION_STRING": az.connection_string(), **LOOPBACK_ONLY}
    return Cloud(Azurite.source(container, PREFIX), env, put)


@pytest.fixture(params=["gcs", "azure"])
def cloud(request: pytest.FixtureRequest) -> Cloud:
    if request.param == "gcs":
        gcs, bucket = request.getfixturevalue("gcs"), request.getfixturevalue("gcs_bucket")
        return _gcs_cloud(gcs, request.getfixturevalue("no_metadata"), bucket)
    az, container = request.getfixturevalue("az"), request.getfixturevalue("container")
    return _azure_cloud(az, container)


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    return Signer(tmp_path / "publisher")


def _listed_env(pod: Pod, cloud: Cloud, signer: Signer) -> dict[str, str]:
    """No MODEL_FILES: the listing under the prefix is the staged set."""
    return {
        **pod.env,
        **cloud.env,
        **signer.anchor_env,
        "MODEL_SOURCE": cloud.source,
        "CACHE_DIR": str(pod.cache_dir),
    }


def _upload(cloud: Cloud, files: dict[str, bytes], bundle: bytes) -> None:
    for rel, data in files.items():
        cloud.put(rel, data)
    cloud.put("model.sig", bundle)


def test_a_signed_cloud_prefix_is_published_with_its_record(
    pod: Pod, cloud: Cloud, signer: Signer
) -> None:
    _upload(cloud, FILES, signer.sign(FILES))
    env = _listed_env(pod, cloud, signer)

    # The listing holds the bundle too: it is staged as the source has it
    # (as under an S3 prefix), outside the signed set (model-signing's rule).
    pod.run(env=env).ok(files=len(FILES) + 1, fetched=len(FILES) + 1)

    for rel, data in FILES.items():
        assert pod.dest(rel).read_bytes() == data, rel
    record = json.loads((pod.cache_dir / RECORD).read_text())
    assert sorted(record["files"]) == sorted(FILES)
    assert record["signature"].endswith(f"{PREFIX}/model.sig"), record["signature"]
    # An IfNotPresent warm start checks the record offline.
    pod.run(env=env).ok(files=len(FILES) + 1, fetched=0, reused=len(FILES) + 1)


TAMPERS: dict[str, tuple[Callable[[dict[str, bytes]], dict[str, bytes]], str]] = {
    # (the objects under the prefix, what the refusal says)
    "changed_byte": (changed_byte, "does not have the sha256 its signature gives it"),
    "added_object": (
        lambda f: {**f, "backdoor.py": b"import os"},
        "'backdoor.py' is staged but not signed",
    ),
    "removed_object": (
        lambda f: {k: v for k, v in f.items() if k != "config.json"},
        "'config.json' is signed but not staged",
    ),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_a_tampered_cloud_prefix_is_never_published(
    pod: Pod, cloud: Cloud, signer: Signer, tamper: str
) -> None:
    change, words = TAMPERS[tamper]
    served = change(FILES)
    _upload(cloud, served, signer.sign(FILES))

    run = pod.run(env=_listed_env(pod, cloud, signer))

    refused(run, pod.cache_dir, sorted(set(FILES) | set(served)), words)


def test_a_cloud_bundle_of_another_key_is_never_published(
    pod: Pod, cloud: Cloud, signer: Signer, tmp_path: Path
) -> None:
    _upload(cloud, FILES, Signer(tmp_path / "impostor").sign(FILES))

    run = pod.run(env=_listed_env(pod, cloud, signer))

    refused(run, pod.cache_dir, sorted(FILES), "does not verify against the key")


def test_a_cloud_prefix_without_a_bundle_is_never_published(
    pod: Pod, cloud: Cloud, signer: Signer
) -> None:
    for rel, data in FILES.items():
        cloud.put(rel, data)

    run = pod.run(env=_listed_env(pod, cloud, signer))

    refused(run, pod.cache_dir, sorted(FILES), "no signature bundle at")


def test_a_single_cloud_object_finds_model_sig_beside_it(
    pod: Pod, cloud: Cloud, signer: Signer
) -> None:
    data = payload(40 * KIB, 8)
    cloud.put("llama.gguf", data)
    cloud.put("model.sig", signer.sign({"llama.gguf": payload(40 * KIB, 9)}))
    env = pod.single_env(f"{cloud.source}/llama.gguf", **cloud.env, **signer.anchor_env)

    run = pod.run(env=env)

    # The bundle beside it signs other bytes: refused, nothing published.
    refused(run, pod.cache_dir, ["model.gguf"], "does not have the sha256")
    cloud.put("model.sig", signer.sign({"llama.gguf": data}))
    pod.run(env=env).ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data


def test_a_single_azure_blob_with_a_sas_in_its_url_reads_its_bundle_with_it(
    pod: Pod, az: Azurite, container: str, signer: Signer
) -> None:
    """A private container, the container SAS in MODEL_SOURCE's query as
    the only credential: the bundle beside the blob is read with that SAS
    (a request without it is refused by the emulator), and the SAS is
    never shown nor recorded."""
    from urllib.parse import parse_qs

    cloud = _azure_cloud(az, container)
    data = payload(40 * KIB, 10)
    cloud.put("llama.gguf", data)
    cloud.put("model.sig", signer.sign({"llama.gguf": data}))
    sas = container_sas(container, read=True, list=True)
    env = pod.single_env(
        f"{cloud.source}/llama.gguf?{sas}",
        **{**cloud.env, "AZURE_STORAGE_CONNECTION_STRING": az.connection_string(key=False)},
        **signer.anchor_env,
    )

    run = pod.run(env=env)

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    signature = parse_qs(sas)["sig"][0]
    record = next(pod.cache_dir.glob(RECORD + "*")).read_text()
    assert json.loads(record)["signature"].endswith(f"{PREFIX}/model.sig")
    assert signature not in run.outputs and signature not in record
