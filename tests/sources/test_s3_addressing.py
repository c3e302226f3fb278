"""Where S3 requests go (#12 item 6): virtual-host style where the endpoint needs
it, path style where it must, a bucket in another region followed with the
presign signed for the bucket's region, and an origin that ignores Range
never fanned out into parallel requests that each carry the whole file.
"""

from __future__ import annotations

import pytest

from llmkube_stager.config import load_config
from llmkube_stager.sources.s3.clients import S3Clients
from llmkube_stager.sources.s3.settings import addressing_style
from llmkube_stager.sources.s3.source import S3Source
from tests.harness.proxy import ForwardProxy
from tests.harness.s3front import S3Fault
from tests.harness.sample import KIB, MIB, payload
from tests.harness.seaweed import READER, s3_env

# -- the rule (pure) --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("chosen", "endpoint", "bucket", "style"),
    [
        (None, None, "models", "virtual"),  # AWS without an endpoint: the regional host
        (None, None, "my.dotted.bucket", "path"),
        (None, "https://s3.eu-west-1.amazonaws.com", "models", "virtual"),
        (None, "https://s3.cn-north-1.amazonaws.com.cn", "models", "virtual"),
        (None, "https://s3.eu-west-1.amazonaws.com", "my.dotted.bucket", "path"),
        (None, "https://s3.eu-west-1.amazonaws.com", "Upper_Case", "path"),
        (None, "http://minio.minio.svc:9000", "models", "path"),
        (None, "https://storage.example.com", "models", "path"),
        (None, "https://notamazonaws.com", "models", "path"),
        ("path", "https://s3.eu-west-1.amazonaws.com", "models", "path"),
        ("virtual", "http://minio.minio.svc:9000", "models", "virtual"),
        ("auto", "http://minio.minio.svc:9000", "models", "auto"),
    ],
)
def test_addressing_style_rule(chosen, endpoint, bucket, style) -> None:
    assert addressing_style(chosen, endpoint, bucket) == style


# -- what botocore makes of it (presigning is local: no request) -----------------------------------


def presigned_url(pod, source: str, **env: str) -> str:
    config = load_config(
        pod.single_env(
            source,
            AWS_ACCESS_KEY_ID=READER[0],
            AWS_SECRET_ACCESS_KEY=READER[1],
            AWS_EC2_METADATA_DISABLED="true",
            **env,
        ),
        {},
    )
    source_ = S3Source(config)
    clients = S3Clients(config, source_.settings, source_.ref.bucket)
    try:
        return clients.presign(source_.ref.key, source, 60)
    finally:
        clients.close()


@pytest.mark.parametrize(
    ("env", "prefix"),
    [
        (
            {"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "https://s3.eu-west-1.amazonaws.com"},
            "https://models.s3.eu-west-1.amazonaws.com/m/x.gguf?",
        ),
        (
            {
                "AWS_REGION": "eu-west-1",
                "AWS_ENDPOINT_URL": "https://s3.eu-west-1.amazonaws.com",
                "AWS_S3_ADDRESSING_STYLE": "path",
            },
            "https://s3.eu-west-1.amazonaws.com/models/m/x.gguf?",
        ),
        (
            {"AWS_ENDPOINT_URL": "http://minio.minio.svc:9000"},
            "http://minio.minio.svc:9000/models/m/x.gguf?",
        ),
        (
            {
                "AWS_ENDPOINT_URL": "http://minio.minio.svc:9000",
                "AWS_S3_ADDRESSING_STYLE": "virtual",
            },
            "http://models.minio.minio.svc:9000/m/x.gguf?",
        ),
    ],
)
def test_presigned_urls_use_the_chosen_addressing(pod, env, prefix) -> None:
    url = presigned_url(pod, "s3://models/m/x.gguf", **env)

    assert url.startswith(prefix), url


def test_aws_without_an_endpoint_is_virtual_host_style_signed_for_the_region(pod) -> None:
    """botocore >= 1.34 names the regional host, older ones the global one
    (`models.s3.amazonaws.com`), which S3 also serves; either way the bucket
    is in the host and the signature is for the bucket's region."""
    url = presigned_url(pod, "s3://models/m/x.gguf", AWS_REGION="eu-west-1")

    host = url.split("/")[2]
    assert host in ("models.s3.eu-west-1.amazonaws.com", "models.s3.amazonaws.com"), url
    assert url.split("?")[0].endswith("amazonaws.com/m/x.gguf"), url
    assert "%2Feu-west-1%2Fs3%2Faws4_request" in url


def test_the_profile_addressing_style_is_honoured(pod, tmp_path) -> None:
    config_file = tmp_path / "config"
    config_file.write_text(
        "[profile models]\nregion = eu-west-1\ns3 =\n  addressing_style = path\n"
    )

    url = presigned_url(
        pod,
        "s3://models/m/x.gguf",
        AWS_CONFIG_FILE=str(config_file),
        AWS_PROFILE="models",
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
    )

    assert url.startswith("https://s3.eu-west-1.amazonaws.com/models/m/x.gguf?"), url


# -- on the wire ---------------------------------------------------------------------------------


def test_virtual_host_style_when_asked_names_the_bucket_in_the_host(pod, s3, bucket) -> None:
    """<bucket>.localhost through a proxy (the system resolver does not know
    .localhost names); SeaweedFS checks the signature over that Host."""
    data = payload(16 * KIB)
    s3.put(bucket, "m.gguf", data)
    endpoint = f"http://localhost:{s3.front.port}"

    with ForwardProxy() as proxy:
        pod.stage(
            pod.single_env(
                f"s3://{bucket}/m.gguf",
                **s3_env(
                    s3,
                    AWS_ENDPOINT_URL=endpoint,
                    AWS_S3_ADDRESSING_STYLE="virtual",
                    HTTP_PROXY=proxy.url,
                ),
            )
        ).ok()

    assert pod.dest().read_bytes() == data
    asked = [(r.method, r.path, r.headers["host"], r.status) for r in s3.requests()]
    host = f"{bucket}.localhost:{s3.front.port}"
    assert asked == [("HEAD", "/m.gguf", host, 200), ("GET", "/m.gguf", host, 200)]


def test_a_bucket_in_another_region_is_followed_and_presigned_for_its_region(
    pod, s3, bucket
) -> None:
    """The front answers like AWS for a bucket in eu-west-1: a request signed
    for us-east-1 gets `301 PermanentRedirect` with x-amz-bucket-region.
    Before: the HEAD was redirected by botocore, but the GET stayed presigned
    for us-east-1 and failed (a 301 without Location: ModelSourceRejected)."""
    data = payload(16 * KIB)
    s3.put(bucket, "m.gguf", data)
    s3.front.set_bucket_region(bucket, "eu-west-1")

    run = pod.stage(
        pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3, AWS_REGION="us-east-1"))
    ).ok()

    assert pod.dest().read_bytes() == data
    wrong, head, get = s3.object_requests(bucket)
    assert (wrong.method, wrong.status, wrong.headers.get("x-amz-bucket-region")) == (
        "HEAD",
        301,
        None,
    )
    assert "/us-east-1/s3/" in wrong.headers["authorization"]
    assert (head.method, head.status) == ("HEAD", 200)
    assert "/eu-west-1/s3/" in head.headers["authorization"]
    assert (get.method, get.status) == ("GET", 200)
    assert "/eu-west-1/s3/" in get.params["X-Amz-Credential"][0]
    assert run.has_line("is in eu-west-1")


# -- an origin that ignores Range -----------------------------------------------------------------


def test_an_origin_that_ignores_range_is_never_fanned_out(pod, s3, bucket) -> None:
    """A slow first stream makes the engine widen to ranged connections; the
    origin (an Artifactory-style mirror in front of S3) answers each range
    with the whole object (200). Each ranged request is abandoned at its
    status line and the file is fetched once more over one stream: the
    bytes received stay under two copies, never one per connection."""
    size = 40 * MIB
    data = payload(size)
    s3.put(bucket, "big.bin", data)
    s3.set_fault("*", S3Fault(methods=("GET",), ignore_range=True))
    s3.set_fault(
        f"/{bucket}/big.bin",
        S3Fault(methods=("GET",), times=1, ignore_range=True, rate_bytes_per_s=6 * MIB),
    )

    run = pod.stage(
        pod.single_env(f"s3://{bucket}/big.bin", **s3_env(s3, LLMKUBE_CONNECTIONS="8"))
    ).ok()

    assert pod.dest().read_bytes() == data
    assert run.has_line("ranged connections")  # it did widen
    gets = s3.object_requests(bucket, "GET")
    assert all(r.status == 200 for r in gets)
    first, *ranged, last = gets
    assert "range" not in first.headers and "range" not in last.headers
    assert ranged and all("range" in r.headers for r in ranged)
    assert len(ranged) <= 8
    # Each ranged request was dropped at its status line (what a socket
    # buffer held is all it cost), never read to the end.
    assert all(r.body_bytes < size // 4 for r in ranged)
    assert last.body_bytes == size
    assert sum(r.body_bytes for r in gets) < 2 * size
