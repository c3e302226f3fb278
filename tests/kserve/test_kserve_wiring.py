"""#31 items 9, 11: how KServe's webhook wires the container, run against
the CLI. Item 9: the `[uri, path, uri, path...]` form of an
InferenceService's storageUris (a ClusterStorageContainer with
supportsMultiModelDownload), the container chosen by the first URI only.
Item 11: an InferenceService for confidential serving (the webhook sets
CONFIDENTIAL_ENABLED) is refused before any request instead of handing the
server still-encrypted bytes; Azure's DNS-zone endpoints are named in the
refusal of the schemes this image does not serve."""

from __future__ import annotations

import pytest

from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload
from tests.harness.seaweed import SeaweedS3, s3_env
from tests.kserve.test_archives import visible

pytestmark = pytest.mark.e2e

WEIGHTS = payload(64 << 10, seed=91)


def test_the_multi_uri_form_stages_each_pair(
    pod: Pod, origin: Origin, s3: SeaweedS3, bucket: str
) -> None:
    """KServe's webhook passes `uri1 /mnt/models/a uri2 /mnt/models/b` to a
    container with supportsMultiModelDownload: true."""
    origin.put("/m/model.onnx", WEIGHTS)
    s3.put(bucket, "tok/tokenizer.json", b"{}")
    first, second = pod.tmp / "mnt" / "models" / "base", pod.tmp / "mnt" / "models" / "adapter"

    run = pod.run(
        f"{origin.url}/m/model.onnx", str(first), f"s3://{bucket}/tok", str(second), env=s3_env(s3)
    )

    assert run.returncode == 0, str(run)
    assert visible(first) == {"model.onnx": WEIGHTS}
    assert visible(second) == {"tokenizer.json": b"{}"}
    assert run.compact_term()["stats"]["files"] == 2


def test_a_second_uri_of_a_scheme_not_served_names_the_first_uri_rule(
    pod: Pod, origin: Origin
) -> None:
    """The webhook picked this container by the first URI (s3://); the
    second (hdfs://) cannot be served here: refused before any request,
    naming storageContainerName."""
    run = pod.run(
        f"{origin.url}/m/model.onnx",
        str(pod.tmp / "a"),
        "hdfs://namenode/adapter",
        str(pod.tmp / "b"),
    )

    assert run.returncode == 2, str(run)
    message = run.compact_term()["message"]
    assert "first storageUri" in message and "storageContainerName" in message, message
    assert origin.requests() == []


def test_confidential_serving_is_refused_before_any_request(pod: Pod, origin: Origin) -> None:
    origin.put("/m/model.onnx.enc", WEIGHTS)
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(
        f"{origin.url}/m/model.onnx.enc",
        str(dest),
        env={"CONFIDENTIAL_ENABLED": "true", "CONFIDENTIAL_RESOURCE_ID": "kbs:///default/key/1"},
    )

    assert run.returncode == 2, str(run)
    doc = run.compact_term()
    assert doc["reason"] == "InvalidConfiguration", doc
    assert "CONFIDENTIAL_ENABLED" in doc["message"] and "encrypted" in doc["message"], doc
    assert origin.requests() == []
    assert visible(dest) == {}


@pytest.mark.parametrize(
    ("uri", "named"),
    [
        ("https://acct-x.z20.blob.storage.azure.net/models/m", "z<N>.blob.storage.azure.net"),
        ("https://acct.z2.file.storage.azure.net/share/m", "z<N>.file.storage.azure.net"),
    ],
)
def test_azures_zone_endpoints_are_refused_naming_them(pod: Pod, uri: str, named: str) -> None:
    run = pod.run(uri, str(pod.tmp / "mnt" / "models"))

    assert run.returncode == 2, str(run)
    assert named in run.compact_term()["message"]
