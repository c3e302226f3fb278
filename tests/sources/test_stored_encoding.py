"""Content-Encoding that no hop applied (#29 item 11).

An S3 object's Content-Encoding is metadata the store keeps and returns with
the object's stored bytes: boto3 >= 1.36 and AWS CLI v2 leave
`aws-chunked` on objects they upload to S3-compatible stores, tools leave
junk such as `utf-8`, and a `.tar.gz` is often stored with `gzip`. curl,
boto3 and KServe's initializer save each as stored; so must the agent.
What it must still refuse is a body a hop may have transformed with nothing
to prove the bytes: a compressing hop in front of the store, a plain URL
answered with `gzip` and no sha256 pin.

Objects are uploaded to the suite's SeaweedFS with real boto3
(`put_object(ContentEncoding=...)`, which the store keeps); the agent goes
through the recording front, which can also play the compressing hop.
"""

from __future__ import annotations

import hashlib

import pytest

from tests.harness.archives import tar_of
from tests.harness.pod import Pod
from tests.harness.s3front import S3Fault
from tests.harness.sample import KIB, payload
from tests.harness.seaweed import ADMIN, REGION, SeaweedS3, s3_env

pytestmark = pytest.mark.floors


def _tar_gz() -> bytes:
    """A real .tar.gz (what KServe's initializer unpacks), its stored bytes."""
    return tar_of({"model/weights.bin": payload(64 * KIB)})


def _upload(s3: SeaweedS3, bucket: str, key: str, data: bytes, encoding: str) -> None:
    """Real boto3, the encoding kept by the store as the object's metadata."""
    s3.admin().put_object(Bucket=bucket, Key=key, Body=data, ContentEncoding=encoding)
    assert s3.admin().head_object(Bucket=bucket, Key=key)["ContentEncoding"] == encoding


def _presigned(s3: SeaweedS3, bucket: str, key: str) -> str:
    """A presigned GET through the recording front (as a user pastes one)."""
    import boto3
    from botocore.config import Config as BotoConfig

    client = boto3.session.Session().client(
        "s3",
        endpoint_url=s3.endpoint_url,
        aws_access_key_id=ADMIN[0],
        aws_secret_access_key=ADMIN[1],
        region_name=REGION,
        config=BotoConfig(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    url: str = client.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=600
    )
    return url


STORED = [
    ("aws-chunked", payload(96 * KIB)),
    ("utf-8", payload(96 * KIB)),
    ("gzip", _tar_gz()),
]


@pytest.mark.parametrize(("encoding", "data"), STORED, ids=[e for e, _ in STORED])
def test_an_s3_object_is_saved_as_stored_whatever_its_content_encoding(
    pod: Pod, s3: SeaweedS3, bucket: str, encoding: str, data: bytes
) -> None:
    """Failed before: ModelSourceRejected, exit 4, for each of the three."""
    _upload(s3, bucket, "m.tar.gz", data, encoding)

    env = pod.single_env(f"s3://{bucket}/m.tar.gz", name="m.tar.gz", **s3_env(s3))

    pod.run(env=env).ok(files=1, fetched=1)
    assert pod.dest("m.tar.gz").read_bytes() == data
    env = pod.single_env(f"s3://{bucket}/m.tar.gz", name="m.tar.gz", **s3_env(s3))
    pod.run("verify", env=env).ok()


def test_a_gzip_stored_tar_gz_pinned_by_its_stored_bytes_is_saved(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """Failed before: ModelSourceRejected, exit 4, although the pin matches."""
    data = _tar_gz()
    _upload(s3, bucket, "m.tar.gz", data, "gzip")
    env = pod.single_env(
        f"s3://{bucket}/m.tar.gz",
        name="m.tar.gz",
        MODEL_SHA256=hashlib.sha256(data).hexdigest(),
        **s3_env(s3),
    )

    pod.run(env=env).ok(files=1, fetched=1)
    assert pod.dest("m.tar.gz").read_bytes() == data


def test_a_listed_prefix_of_encoded_objects_is_saved_as_stored(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """Listed objects have no HEAD of their own: the store's metadata is
    asked for when an answer carries a coding. Failed before: exit 4."""
    files = {"model/a.tar.gz": _tar_gz(), "model/b.bin": payload(40 * KIB)}
    _upload(s3, bucket, "model/a.tar.gz", files["model/a.tar.gz"], "gzip")
    _upload(s3, bucket, "model/b.bin", files["model/b.bin"], "aws-chunked")
    env = {
        **pod.env,
        "MODEL_SOURCE": f"s3://{bucket}/model/",
        "CACHE_DIR": str(pod.cache_dir),
        **s3_env(s3),
    }

    pod.run(env=env).ok(files=2, fetched=2)
    assert (pod.cache_dir / "a.tar.gz").read_bytes() == files["model/a.tar.gz"]
    assert (pod.cache_dir / "b.bin").read_bytes() == files["model/b.bin"]


def test_a_hop_that_compresses_an_s3_object_is_refused_and_named_truly(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """The store holds the object without a coding; the front gzips the GET.
    The refusal stays, and names the S3 endpoint that answered. Failed
    before: it spoke of a redirect that never happened and named the
    bucket as a host ("redirected from <bucket>:80")."""
    data = payload(64 * KIB)
    s3.put(bucket, "m.gguf", data)
    s3.set_fault(f"/{bucket}/m.gguf", S3Fault(methods=("GET",), gzip_body=True))

    run = pod.run(env=pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3)))

    run.failed("ModelSourceRejected", exit_code=4)
    message = run.term["message"]
    front = s3.endpoint_url.split("://", 1)[1]
    assert "Content-Encoding: gzip" in message, message
    assert f"the S3 endpoint {front}" in message, message
    assert "redirect" not in message and f"{bucket}:" not in message, message
    assert not pod.dest().exists()


@pytest.mark.parametrize("encoding", ["aws-chunked", "utf-8"])
def test_a_presigned_url_with_a_token_that_names_no_coding_is_saved(
    pod: Pod, s3: SeaweedS3, bucket: str, encoding: str
) -> None:
    """Failed before: ModelSourceRejected, exit 4."""
    data = payload(48 * KIB)
    _upload(s3, bucket, "m.gguf", data, encoding)

    pod.run(env=pod.single_env(_presigned(s3, bucket, "m.gguf"))).ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data


def test_a_presigned_gzip_url_is_saved_when_pinned_and_refused_when_not(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """A plain URL's gzip may be a hop's: without a pin nothing proves the
    bytes (refused, as #22 item 1 has it); a matching pin proves them.
    Failed before: the pinned run was refused too."""
    data = _tar_gz()
    _upload(s3, bucket, "m.tar.gz", data, "gzip")
    url = _presigned(s3, bucket, "m.tar.gz")
    unpinned = pod.single_env(url, name="m.tar.gz")

    pod.run(env=unpinned).failed("ModelSourceRejected", exit_code=4)
    assert not pod.dest("m.tar.gz").exists()

    pinned = {**unpinned, "MODEL_SHA256": hashlib.sha256(data).hexdigest()}
    pod.run(env=pinned).ok(files=1, fetched=1)
    assert pod.dest("m.tar.gz").read_bytes() == data


def test_a_repeated_content_length_still_proves_the_stored_coding(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """The same Content-Length on two lines (read joined: `N, N`) is the
    stored length all the same, as the framing check reads it (#31 C1).
    Failed before: ModelSourceRejected, exit 4 (the proof read the joined
    value as no length)."""
    data = _tar_gz()
    _upload(s3, bucket, "m.tar.gz", data, "gzip")
    s3.set_fault(f"/{bucket}/m.tar.gz", S3Fault(methods=("GET",), length_twice=True))
    env = pod.single_env(f"s3://{bucket}/m.tar.gz", name="m.tar.gz", **s3_env(s3))

    pod.run(env=env).ok(files=1, fetched=1)
    assert pod.dest("m.tar.gz").read_bytes() == data


def test_a_503_on_the_get_after_the_stored_coding_check_is_rate_limited(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """A listed gzip-stored object: the first GET answers with the coding,
    a HEAD asks the store's metadata, the GET asked again meets S3's `503
    SlowDown`: rate limited, as any other S3 503 is (#31 C2). Failed before:
    ModelSourceUnavailable (that GET ran inside the handler of the first
    one's refusal, outside the 503 mapping)."""
    from tests.harness.s3front import S3Request

    _upload(s3, bucket, "model/a.tar.gz", _tar_gz(), "gzip")

    def throttle_after_head(request: S3Request) -> None:
        if request.method == "HEAD" and request.path == f"/{bucket}/model/a.tar.gz":
            s3.set_fault(
                f"/{bucket}/model/a.tar.gz",
                S3Fault(methods=("GET",), status=503, code="SlowDown"),
            )

    s3.on_request(throttle_after_head)
    env = {
        **pod.env,
        "MODEL_SOURCE": f"s3://{bucket}/model/",
        "CACHE_DIR": str(pod.cache_dir),
        **s3_env(s3, LLMKUBE_RETRIES="0"),
    }

    run = pod.run(env=env)

    run.failed("ModelSourceRateLimited", retryable=True)
    statuses = [(r.method, r.status) for r in s3.object_requests(bucket) if r.method != "PUT"]
    assert statuses[-3:] == [("GET", 200), ("HEAD", 200), ("GET", 503)], statuses
    assert not (pod.cache_dir / "a.tar.gz").exists()
