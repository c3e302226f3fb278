"""STS trusts LLMKUBE_CA_DIR like every other TLS client (#22 item 3): an
in-cluster STS with a private CA works, and when it is not trusted the
error names the STS endpoint, not the s3:// object.

SeaweedFS is S3 and STS at once; a second front (tests/harness/s3front.py)
terminates TLS with this test's CA in front of the same server, so STS is
https with a private CA while S3 stays the plain-http recording front.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.canary import leaks
from tests.harness.proxy import ForwardProxy
from tests.harness.s3front import S3Front
from tests.harness.sample import KIB, payload
from tests.harness.seaweed import irsa_env, s3_env, without_keys
from tests.harness.sts import ROLE_ARN
from tests.harness.tlsca import LocalCA, make_ca

pytestmark = pytest.mark.floors


@pytest.fixture
def ca(tmp_path: Path) -> LocalCA:
    return make_ca(tmp_path / "pki")


@pytest.fixture
def tls_sts(s3, ca: LocalCA) -> Iterator[S3Front]:
    with S3Front(s3.s3_port, tls=ca.server_context()) as front:
        yield front


def test_an_sts_with_a_private_ca_in_the_ca_dir_issues_the_credentials(
    pod, s3, bucket, oidc_issuer, tls_sts, ca, tmp_path
) -> None:
    """Failed before: the STS client made by botocore's web identity
    provider got botocore's default trust: ModelSourceUntrusted, exit 4."""
    data = payload(24 * KIB)
    s3.put(bucket, "m.gguf", data)
    token_file = tmp_path / "token"
    oidc_issuer.write_token(token_file)
    env = irsa_env(s3, token_file, sts_url=tls_sts.url, LLMKUBE_CA_DIR=str(ca.ca_dir))

    run = pod.run(env=pod.single_env(f"s3://{bucket}/m.gguf", **env))

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    assert [r.status for r in tls_sts.requests("POST")] == [200]
    head = s3.object_requests(bucket, "HEAD")[0]
    assert head.headers["x-amz-security-token"], "the HEAD was not signed with STS's session"


def test_an_untrusted_sts_is_named_in_the_error(
    pod, s3, bucket, oidc_issuer, tls_sts, tmp_path
) -> None:
    """Failed before: "TLS certificate verify failed for s3://<bucket>/m.gguf"."""
    s3.put(bucket, "m.gguf", payload(4 * KIB))
    token_file = tmp_path / "token"
    token = oidc_issuer.write_token(token_file)

    run = pod.run(
        env=pod.single_env(f"s3://{bucket}/m.gguf", **irsa_env(s3, token_file, sts_url=tls_sts.url))
    )

    run.failed("ModelSourceUntrusted", retryable=False)
    message = run.term["message"]
    assert f"the STS endpoint {tls_sts.url}" in message, message
    assert "s3://" not in message.split(";")[0], message
    assert tls_sts.requests() == [] and s3.requests() == []
    assert leaks(token, run.outputs) == []


def test_sts_through_a_tls_intercepting_path_trusts_the_ca_dir_through_the_proxy(
    pod, s3, bucket, oidc_issuer, tls_sts, ca, tmp_path
) -> None:
    """STS over a CONNECT tunnel, its certificate from the CA directory."""
    data = payload(8 * KIB)
    s3.put(bucket, "m.gguf", data)
    token_file = tmp_path / "token"
    oidc_issuer.write_token(token_file)
    with ForwardProxy() as proxy:
        env = irsa_env(
            s3,
            token_file,
            sts_url=tls_sts.url,
            LLMKUBE_CA_DIR=str(ca.ca_dir),
            HTTPS_PROXY=proxy.url,
            NO_PROXY=s3.endpoint_url.removeprefix("http://"),
        )
        run = pod.run(env=pod.single_env(f"s3://{bucket}/m.gguf", **env))
        asked = [(r.method, r.target) for r in proxy.requests()]

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    assert asked == [("CONNECT", tls_sts.url.removeprefix("https://"))]


def test_a_silent_sts_ends_within_the_bound_naming_it(pod, s3, bucket, oidc_issuer, tmp_path):
    """STS accepts TCP, then says nothing. Failed before: botocore's own
    retries (legacy mode: 5 attempts) under the agent's 3, each a 2 s stall
    (over 30 s), and the message blamed "the S3 endpoint for s3://..."."""
    from tests.harness.origin import Blackhole

    s3.put(bucket, "m.gguf", payload(4 * KIB))
    token_file = tmp_path / "token"
    oidc_issuer.write_token(token_file)
    with Blackhole("accept") as hole:
        env = {
            **without_keys(s3_env(s3)),
            "AWS_ROLE_ARN": ROLE_ARN,
            "AWS_WEB_IDENTITY_TOKEN_FILE": str(token_file),
            "AWS_ENDPOINT_URL_STS": hole.url,
        }
        run = pod.run(env=pod.single_env(f"s3://{bucket}/m.gguf", **env), timeout=90)
        attempts, where = hole.connections, f"the STS endpoint {hole.url}"

    run.failed("ModelSourceUnreachable", retryable=True)
    message = run.term["message"]
    assert where in message and "timed out" in message, message
    assert attempts == 3, attempts  # one request per attempt of the agent's budget
    assert run.seconds < 20, run.seconds
    assert s3.requests() == []
