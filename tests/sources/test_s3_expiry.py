"""Long transfers outlive their credentials (#12 item 2): every GET is presigned
just before it is sent, and a GET refused with 403 (its signature or the
temporary credentials behind it expired on the way) is presigned again at
once, outside the retry budget. Against SeaweedFS, which enforces both the
presign lifetime (`X-Amz-Expires`) and the expiry of the sessions its STS
issues: this module's server issues them for SESSION_S seconds (sts.py).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest

from llmkube_stager.errors import Reason, SourceError
from tests.harness.s3fetcher import fetcher_for
from tests.harness.s3front import S3Fault
from tests.harness.sample import KIB, payload
from tests.harness.seaweed import SeaweedS3, irsa_env, s3_env, sts_calls
from tests.harness.sts import OidcIssuer

SESSION_S = 3  # how long this module's STS sessions last
# Held long enough for SeaweedFS to refuse the request; under the stall timeout.
SLOW = {"LLMKUBE_STALL_TIMEOUT": "15"}
_BUCKETS = itertools.count(1)


@pytest.fixture(scope="module")
def short_sessions(seaweed: SeaweedS3, oidc_issuer: OidcIssuer) -> Iterator[SeaweedS3]:
    """A second SeaweedFS whose STS sessions last SESSION_S seconds."""
    with SeaweedS3(issuer=oidc_issuer, session_s=SESSION_S) as server:
        yield server


@pytest.fixture
def sts3(short_sessions: SeaweedS3) -> Iterator[SeaweedS3]:
    short_sessions.clear()
    yield short_sessions
    short_sessions.clear()


@pytest.fixture
def short_bucket(sts3: SeaweedS3) -> str:
    return sts3.create_bucket(f"expiry-{next(_BUCKETS)}")


def gets(s3, bucket: str) -> list[tuple[int, str]]:
    """(status, access key id it was signed with) of every GET."""
    return [
        (r.status, r.params["X-Amz-Credential"][0].split("/")[0])
        for r in s3.object_requests(bucket, "GET")
    ]


def test_a_presigned_url_that_expires_in_flight_is_signed_again_without_a_retry(
    pod, s3, bucket
) -> None:
    """Before: one URL per file, presigned at probe time; its expiry was a
    ModelSourceUnauthorized failure."""
    data = payload(32 * KIB)
    s3.put(bucket, "m.gguf", data)
    s3.set_fault(f"/{bucket}/m.gguf", S3Fault(methods=("GET",), times=1, delay_s=2.2))
    fetcher, file = fetcher_for(
        pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3, **SLOW)), presign_expiry_s=1
    )
    try:
        body = fetcher.open(file, fetcher.probe(file), 0)
        received = bytearray()
        buffer = memoryview(bytearray(64 * KIB))
        while n := body.readinto(buffer):
            received += buffer[:n]
        body.close()
    finally:
        fetcher.close()

    assert bytes(received) == data
    first, second = s3.object_requests(bucket, "GET")
    assert (first.status, second.status) == (403, 200)  # SeaweedFS: "Request has expired"
    assert first.params["X-Amz-Signature"] != second.params["X-Amz-Signature"]


def test_a_get_refused_twice_is_unauthorized_after_exactly_two_requests(pod, s3, bucket) -> None:
    s3.put(bucket, "m.gguf", payload(4 * KIB))
    s3.set_fault(f"/{bucket}/m.gguf", S3Fault(methods=("GET",), status=403, code="AccessDenied"))

    run = pod.stage(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3))).failed(
        "ModelSourceUnauthorized"
    )

    assert [r.status for r in s3.object_requests(bucket, "GET")] == [403, 403]
    assert run.sleeps == []
    assert not pod.dest().exists()


def test_irsa_credentials_that_expire_during_the_transfer(
    pod, sts3, short_bucket, oidc_issuer, tmp_path
) -> None:
    """The first GET is held until its session has expired (403 from
    SeaweedFS); the agent signs again with refreshed credentials (a second
    AssumeRoleWithWebIdentity) at once, with no retry left to spend."""
    data = payload(64 * KIB)
    sts3.put(short_bucket, "m.gguf", data)
    sts3.set_fault(
        f"/{short_bucket}/m.gguf", S3Fault(methods=("GET",), times=1, delay_s=SESSION_S + 1.5)
    )
    token_file = tmp_path / "token"

    oidc_issuer.write_token(token_file)

    run = pod.stage(
        pod.single_env(
            f"s3://{short_bucket}/m.gguf",
            **irsa_env(sts3, token_file, LLMKUBE_RETRIES="0", **SLOW),
        )
    ).ok()

    assert pod.dest().read_bytes() == data
    (expired, first_key), (ok, second_key) = gets(sts3, short_bucket)
    assert (expired, ok) == (403, 200)
    assert first_key != second_key  # a new session: refreshed, not re-used
    assert len(sts_calls(sts3)) >= 2
    assert run.sleeps == []
    assert run.has_line("signing it again")


def test_a_resume_after_the_session_expired_is_signed_with_fresh_credentials(
    pod, sts3, short_bucket, oidc_issuer, tmp_path
) -> None:
    """A slow first GET outlives the session and is cut short; the resume is
    presigned when it is sent, so the server never sees a stale signature.
    Before: the resume reused the probe's URL and got 403."""
    data = payload(256 * KIB)
    sts3.put(short_bucket, "m.gguf", data)
    sts3.set_fault(
        f"/{short_bucket}/m.gguf",
        S3Fault(methods=("GET",), times=1, truncate_after=120 * KIB, rate_bytes_per_s=30 * KIB),
    )
    token_file = tmp_path / "token"
    oidc_issuer.write_token(token_file)

    pod.stage(pod.single_env(f"s3://{short_bucket}/m.gguf", **irsa_env(sts3, token_file))).ok()

    assert pod.dest().read_bytes() == data
    (cut, first_key), (resumed, second_key) = gets(sts3, short_bucket)
    assert (cut, resumed) == (200, 206)
    assert first_key != second_key


def test_on_change_presigns_each_file_when_it_is_fetched_not_at_revalidation(
    pod, sts3, short_bucket, oidc_issuer, tmp_path
) -> None:
    """OnChange probes every file first, then transfers them one by one.
    Before: each file's URL was presigned by its probe, so the second file's
    URL had expired by the time its turn came; the refresh failed and the
    stale copies were kept."""
    old = {"a.bin": payload(96 * KIB, 1), "b.bin": payload(8 * KIB, 2)}
    # New sizes: OnChange tells a plain S3 object's change by its size.
    new = {"a.bin": payload(120 * KIB, 3), "b.bin": payload(9 * KIB, 4)}
    for rel, data in old.items():
        sts3.put(short_bucket, f"p/{rel}", data)
    pod.stage(pod.multi_env(f"s3://{short_bucket}/p", old, **s3_env(sts3))).ok()
    for rel, data in new.items():
        sts3.put(short_bucket, f"p/{rel}", data)
    sts3.clear()
    # The first file takes longer than a session lasts.
    sts3.set_fault(f"/{short_bucket}/p/a.bin", S3Fault(methods=("GET",), rate_bytes_per_s=24 * KIB))
    token_file = tmp_path / "token"
    oidc_issuer.write_token(token_file)

    run = pod.stage(
        pod.multi_env(
            f"s3://{short_bucket}/p",
            new,
            **irsa_env(sts3, token_file, LLMKUBE_REFRESH_POLICY="OnChange"),
        )
    ).ok()

    assert {rel: pod.dest(rel).read_bytes() for rel in new} == new
    assert not run.has_line("kept cached copy")
    assert [r.status for r in sts3.object_requests(short_bucket, "GET")] == [200, 200]


def test_a_refused_credential_refresh_is_unauthorized(
    pod, sts3, short_bucket, oidc_issuer, tmp_path
) -> None:
    """The token file stops being rotated (an unbound service account):
    STS refuses the expired token, and that is not retried forever."""
    sts3.put(short_bucket, "m.gguf", payload(4 * KIB))
    token_file = tmp_path / "token"
    oidc_issuer.write_token(token_file, ttl_s=1)
    time.sleep(1.5)

    env = pod.single_env(f"s3://{short_bucket}/m.gguf", **irsa_env(sts3, token_file))

    run = pod.stage(env).failed("ModelSourceUnauthorized")

    assert sts_calls(sts3) and all(status >= 400 for status in sts_calls(sts3))
    assert sts3.object_requests(short_bucket) == []
    assert not run.error.retryable


def test_a_credential_failure_while_presigning_is_a_source_error(
    pod, sts3, short_bucket, oidc_issuer, tmp_path
) -> None:
    """Presigning refreshes expired credentials; when STS refuses, the GET
    fails with a reason, never with a botocore exception in the engine."""
    sts3.put(short_bucket, "m.gguf", payload(4 * KIB))
    token_file = tmp_path / "token"
    oidc_issuer.write_token(token_file, ttl_s=SESSION_S)
    env = pod.single_env(f"s3://{short_bucket}/m.gguf", **irsa_env(sts3, token_file))
    fetcher, file = fetcher_for(env)
    try:
        meta = fetcher.probe(file)
        time.sleep(SESSION_S + 1)  # the session and the token both expired

        with pytest.raises(SourceError) as info:
            fetcher.open(file, meta, 0)
    finally:
        fetcher.close()

    assert info.value.reason is Reason.SOURCE_UNAUTHORIZED
    assert sts3.object_requests(short_bucket, "GET") == []


def test_a_failed_refresh_is_one_json_error_line_cli(
    pod, sts3, short_bucket, oidc_issuer, tmp_path
) -> None:
    """A refresh that STS refuses is reported once, as the step that failed
    (before: only "AccessDenied"), and stderr holds JSON lines only (botocore
    logs the failure with its traceback, to a handler that drops it)."""
    import json

    sts3.put(short_bucket, "m.gguf", payload(4 * KIB))
    sts3.set_fault(
        f"/{short_bucket}/m.gguf", S3Fault(methods=("GET",), times=1, delay_s=SESSION_S + 1.5)
    )
    token_file = tmp_path / "token"
    oidc_issuer.write_token(token_file, ttl_s=SESSION_S)  # not rotated: refresh fails
    env = pod.single_env(
        f"s3://{short_bucket}/m.gguf",
        **irsa_env(sts3, token_file, LLMKUBE_LOG_FORMAT="json", **SLOW),
    )

    run = pod.run(env=env)

    run.failed("ModelSourceUnauthorized", log_line=False)
    assert "STS AssumeRoleWithWebIdentity" in run.term["message"]
    lines = run.stderr.splitlines()
    assert lines and all(json.loads(line) for line in lines), run.stderr
