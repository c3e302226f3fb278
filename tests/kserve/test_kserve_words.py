"""#31 item 5: in KServe mode a failure names what an InferenceService has
(its storageUri, the ClusterStorageContainer, the service account's secret,
the emptyDir /mnt/models), never LLMKube's spec.* fields or the `stage`
command's help. Each failure is a real one: the suite's origin, SeaweedFS,
a tmpfs too small for the model."""

from __future__ import annotations

import json

import pytest

from tests.harness.mounts import tmpfs
from tests.harness.origin import Origin
from tests.harness.pod import Pod, Run
from tests.harness.sample import payload
from tests.harness.seaweed import SeaweedS3, s3_env

pytestmark = pytest.mark.e2e


def assert_kserve_words(run: Run, reason: str, words: str) -> None:
    assert run.returncode != 0, str(run)
    doc = run.compact_term()
    assert doc["reason"] == reason, doc
    said = json.dumps(doc) + run.stderr
    assert "spec." not in said, said
    assert "stage --help" not in said, said
    assert words in doc["remedy"], doc


def test_a_missing_file_names_the_storage_uri(pod: Pod, origin: Origin) -> None:
    run = pod.run(f"{origin.url}/nowhere/model.onnx", str(pod.tmp / "mnt" / "models"))
    assert_kserve_words(run, "ModelSourceNotFound", "InferenceService's storageUri")


def test_a_scheme_not_served_names_the_cluster_storage_container(pod: Pod) -> None:
    run = pod.run("hdfs://namenode/model", str(pod.tmp / "mnt" / "models"))
    assert_kserve_words(run, "InvalidConfiguration", "ClusterStorageContainer")


def test_refused_credentials_name_the_service_accounts_secret(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    s3.put(bucket, "m/model.bin", b"x" * 10)
    env = {**s3_env(s3), "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    run = pod.run(f"s3://{bucket}/m", str(pod.tmp / "mnt" / "models"), env=env)
    assert_kserve_words(run, "ModelSourceUnauthorized", "service account")


def test_a_listing_the_agent_cannot_stage_names_the_objects(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    s3.put(bucket, "m/model.bin", b"x" * 10)
    s3.put(bucket, "m/model.bin.llmkube-size", b"10")
    run = pod.run(f"s3://{bucket}/m", str(pod.tmp / "mnt" / "models"), env=s3_env(s3))
    assert_kserve_words(run, "InvalidFileSet", "objects under the storageUri")


def test_a_volume_too_small_names_the_empty_dir(pod: Pod, origin: Origin) -> None:
    origin.put("/big/model.bin", payload(12 << 20, seed=5))
    volume = pod.tmp / "mnt"
    volume.mkdir()
    with tmpfs(volume, "size=4m"):
        run = pod.run(f"{origin.url}/big/model.bin", str(volume / "models"))
    assert_kserve_words(run, "ModelTransferOutOfSpace", "emptyDir")
