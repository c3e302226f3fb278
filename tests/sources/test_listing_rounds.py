"""#41 item 5: a listing whose pages go round (the same page token again,
or the same objects again under fresh tokens) is ModelSourceRejected at
once, on each cloud's real emulator behind its front: SeaweedFS (s3://),
the GCS emulator (gs://) and Azurite (Azure Blob) share one listing
(llmkube_stager/sources/prefix.py). Before, such a listing was followed
for 100,000 pages, its objects kept all the while."""

from __future__ import annotations

import pytest

from tests.harness.azurite import Azurite, S3Fault, put
from tests.harness.gcs import GceMetadata, GcsFront, gcs_env
from tests.harness.pod import Pod
from tests.harness.seaweed import SeaweedS3, s3_env

# A run still listing after this long is following the round: a hang.
ROUND_TIMEOUT_S = 40


def _nothing_staged(pod: Pod) -> None:
    staged = [p for p in pod.cache_dir.rglob("*") if p.is_file() and ".llmkube" not in p.name]
    assert staged == []


def test_an_s3_listing_that_gives_the_same_continuation_token_again_is_rejected(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    for name in ("m/a.bin", "m/b.bin"):
        s3.put(bucket, name, b"weights")

    def truncated(body: bytes) -> bytes:
        # SeaweedFS's one page made one that says more follows, always
        # with the same token.
        end = b"<IsTruncated>false</IsTruncated>"
        assert end in body, body[:400]
        more = (
            b"<IsTruncated>true</IsTruncated><NextContinuationToken>round</NextContinuationToken>"
        )
        return body.replace(end, more)

    for path in (f"/{bucket}", f"/{bucket}/"):
        s3.set_fault(path, S3Fault(methods=("GET",), replay_first=True, rewrite=truncated))
    env = {**s3_env(s3), "MODEL_SOURCE": f"s3://{bucket}/m", "CACHE_DIR": str(pod.cache_dir)}

    run = pod.run(env=env, timeout=ROUND_TIMEOUT_S)

    run.failed("ModelSourceRejected", exit_code=4, retryable=False)
    assert "the same page token twice" in run.term["message"]
    lists = [r for r in s3.requests("GET") if "list-type=2" in r.query]
    assert len(lists) == 2, len(lists)
    assert "continuation-token=round" in lists[1].query
    _nothing_staged(pod)


def test_a_gs_listing_that_gives_the_same_objects_under_new_tokens_is_rejected(
    pod: Pod, gcs: GcsFront, gcs_bucket: str, no_metadata: GceMetadata
) -> None:
    for name in ("m/a.bin", "m/b.bin", "m/c.bin"):
        gcs.emulator.put(gcs_bucket, name, b"weights")
    with gcs.state.lock:
        gcs.state.page_size = 2
        gcs.state.endless = True
    env = gcs_env(
        gcs, no_metadata, MODEL_SOURCE=f"gs://{gcs_bucket}/m", CACHE_DIR=str(pod.cache_dir)
    )

    run = pod.run(env=env, timeout=ROUND_TIMEOUT_S)

    run.failed("ModelSourceRejected", exit_code=4, retryable=False)
    assert "an object twice" in run.term["message"]
    assert "m/a.bin" in run.term["message"]
    pages = gcs.requests("list")
    assert len(pages) == 2, len(pages)
    assert pages[1].query["pageToken"] == ["2"]
    _nothing_staged(pod)


@pytest.mark.usefixtures("azure_loopback_only")
def test_an_azure_listing_that_gives_the_same_next_marker_again_is_rejected(
    pod: Pod, az: Azurite, container: str
) -> None:
    for name in ("m/a.bin", "m/b.bin", "m/c.bin"):
        put(az, container, name, b"weights")
    assert az.front is not None
    az.front.cap_query("maxresults", 1)  # pages of one blob, each with a NextMarker
    az.set_fault(f"/devstoreaccount1/{container}", S3Fault(methods=("GET",), replay_first=True))
    env = {
        "MODEL_SOURCE": Azurite.source(container, "m"),
        "CACHE_DIR": str(pod.cache_dir),
        "AZURE_STORAGE_CONNECTION_STRING": az.connection_string(),
    }

    run = pod.run(env=pod.env | env, timeout=ROUND_TIMEOUT_S)

    run.failed("ModelSourceRejected", exit_code=4, retryable=False)
    assert "the same page token twice" in run.term["message"]
    lists = [r for r in az.requests("GET") if "comp=list" in r.query]
    assert len(lists) == 2, len(lists)
    assert lists[1].params["marker"][0]
    _nothing_staged(pod)
