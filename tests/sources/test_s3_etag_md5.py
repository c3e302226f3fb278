"""#41 item 7: a single-part S3 object's ETag is the MD5 of its bytes
unless the object is encrypted with SSE-KMS or SSE-C (the HEAD says
which): it is checked before the file is published, as gs:// checks its
md5Hash and Azure its Content-MD5. A multipart ETag (`<md5 of md5s>-N`)
and an encrypted object's stay unchecked, as before. On the suite's
SeaweedFS, whose ETags are S3's; the front flips a byte in flight."""

from __future__ import annotations

import hashlib

import pytest

from tests.harness.pod import Pod, Run
from tests.harness.sample import KIB, MIB, payload
from tests.harness.seaweed import S3Fault, SeaweedS3, s3_env


def _run(pod: Pod, s3: SeaweedS3, bucket: str, **extra: str) -> Run:
    env = pod.single_env(f"s3://{bucket}/model.gguf", **s3_env(s3, **extra))
    return pod.run(env=env)


@pytest.mark.parametrize("connections", ["1", "4"])
def test_a_byte_flipped_in_flight_misses_the_single_part_etag_and_is_never_published(
    pod: Pod, s3: SeaweedS3, bucket: str, connections: str
) -> None:
    """Failed before: the flipped byte was published (the ETag only pinned
    the object with If-Match). With one connection the whole body is
    hashed as it streams; with four, the ranges as they land."""
    data = payload(3 * MIB, 7)
    etag = s3.put(bucket, "model.gguf", data)
    assert etag.strip('"') == hashlib.md5(data).hexdigest()  # S3's single-part ETag
    s3.set_fault(f"/{bucket}/model.gguf", S3Fault(methods=("GET",), corrupt=True))

    run = _run(pod, s3, bucket, LLMKUBE_CONNECTIONS=connections, LLMKUBE_RETRIES="0")

    run.failed("ModelTransferChecksumMismatch")
    assert not pod.dest().exists()


def test_a_single_part_object_whose_bytes_match_its_etag_is_staged(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    data = payload(256 * KIB, 8)
    s3.put(bucket, "model.gguf", data)

    _run(pod, s3, bucket).ok(files=1, fetched=1)

    assert pod.dest().read_bytes() == data


def test_a_multipart_etag_is_no_md5_and_is_not_checked(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    parts = [payload(5 * MIB, 9), payload(64 * KIB, 10)]
    client = s3.admin()
    upload = client.create_multipart_upload(Bucket=bucket, Key="model.gguf")
    done = [
        {
            "PartNumber": n,
            "ETag": client.upload_part(
                Bucket=bucket, Key="model.gguf", PartNumber=n, UploadId=upload["UploadId"], Body=b
            )["ETag"],
        }
        for n, b in enumerate(parts, 1)
    ]
    answer = client.complete_multipart_upload(
        Bucket=bucket,
        Key="model.gguf",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": done},
    )
    assert answer["ETag"].strip('"').endswith("-2")

    _run(pod, s3, bucket).ok(files=1, fetched=1)

    assert pod.dest().read_bytes() == b"".join(parts)


@pytest.mark.parametrize(
    "encrypted",
    [
        (("x-amz-server-side-encryption", "aws:kms"),),
        (("x-amz-server-side-encryption", "aws:kms:dsse"),),
        (("x-amz-server-side-encryption-customer-algorithm", "AES256"),),
    ],
    ids=["sse-kms", "dsse-kms", "sse-c"],
)
def test_an_encrypted_objects_etag_is_not_taken_for_its_md5(
    pod: Pod, s3: SeaweedS3, bucket: str, encrypted: tuple[tuple[str, str], ...]
) -> None:
    """The HEAD says SSE-KMS or SSE-C: the ETag is not the MD5 of the bytes
    (S3's documentation of ETag), so it is not checked. SeaweedFS's ETag
    here is the MD5, and a byte flipped on the GET shows that no check is
    made of it (the bytes are published unchecked, as every S3 object's
    were before)."""
    data = payload(128 * KIB, 11)
    s3.put(bucket, "model.gguf", data)
    s3.set_fault(f"/{bucket}/model.gguf", S3Fault(methods=("HEAD",), add_headers=encrypted))

    _run(pod, s3, bucket).ok(files=1, fetched=1)

    assert pod.dest().read_bytes() == data
    s3.set_fault(f"/{bucket}/model.gguf", S3Fault(add_headers=encrypted, corrupt=True))
    pod.dest().unlink()

    _run(pod, s3, bucket).ok(files=1, fetched=1)

    assert pod.dest().read_bytes() != data
