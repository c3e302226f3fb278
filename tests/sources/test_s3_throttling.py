"""Throttling is ModelSourceRateLimited, with backoff (#12 item 3), and botocore
never retries behind the agent's back (#12 item 4): one HEAD per attempt of the
RetryBudget, counted at the server. S3 throttles with `503 SlowDown`; a HEAD
answer has no body, so no error code: it is mapped by its status.
"""

from __future__ import annotations

import pytest

from llmkube_stager.errors import REMEDY_RATE_LIMITED_S3
from tests.harness.s3front import S3Fault
from tests.harness.sample import KIB, payload
from tests.harness.seaweed import s3_env

RETRIES = 2  # LLMKUBE_RETRIES: attempts after the first


@pytest.mark.parametrize("status", [503, 429])
def test_a_throttled_head_is_rate_limited_after_one_request_per_attempt(
    pod, s3, bucket, status
) -> None:
    s3.put(bucket, "m.gguf", payload(4 * KIB))
    s3.set_fault(f"/{bucket}/m.gguf", S3Fault(methods=("HEAD",), status=status, code="SlowDown"))

    run = pod.stage(
        pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3, LLMKUBE_RETRIES=str(RETRIES)))
    ).failed("ModelSourceRateLimited")

    # Before: botocore's own retry (max_attempts=1 meant one *retry*) doubled
    # every attempt: 6 HEADs, and a 503 was ModelSourceUnavailable.
    heads = s3.object_requests(bucket, "HEAD")
    assert [r.status for r in heads] == [status] * (1 + RETRIES)
    assert len(run.sleeps) == RETRIES and all(w > 0 for w in run.sleeps)
    assert run.error.retryable
    assert run.error.source_kind == "s3" and run.error.remedy == REMEDY_RATE_LIMITED_S3
    assert not pod.dest().exists()


def test_a_throttled_head_then_success_backs_off_and_stages(pod, s3, bucket) -> None:
    data = payload(16 * KIB)
    s3.put(bucket, "m.gguf", data)
    s3.set_fault(
        f"/{bucket}/m.gguf", S3Fault(methods=("HEAD",), status=503, code="SlowDown", times=2)
    )

    run = pod.stage(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3, LLMKUBE_RETRIES="3"))).ok()

    assert pod.dest().read_bytes() == data
    assert [r.status for r in s3.object_requests(bucket, "HEAD")] == [503, 503, 200]
    assert len(run.sleeps) == 2
    assert run.sleeps[1] > 0


@pytest.mark.parametrize(("status", "code"), [(503, "SlowDown"), (429, "TooManyRequests")])
def test_a_throttled_get_is_retried_with_backoff(pod, s3, bucket, status, code) -> None:
    data = payload(16 * KIB)
    s3.put(bucket, "m.gguf", data)
    s3.set_fault(f"/{bucket}/m.gguf", S3Fault(methods=("GET",), status=status, code=code, times=2))

    run = pod.stage(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3, LLMKUBE_RETRIES="3"))).ok()

    assert pod.dest().read_bytes() == data
    assert [r.status for r in s3.object_requests(bucket, "GET")] == [status, status, 200]
    assert len(run.sleeps) == 2


def test_a_get_throttled_to_the_end_is_rate_limited_cli(pod, s3, bucket) -> None:
    s3.put(bucket, "m.gguf", payload(16 * KIB))
    s3.set_fault(f"/{bucket}/m.gguf", S3Fault(methods=("GET",), status=503, code="SlowDown"))
    env = pod.single_env(
        f"s3://{bucket}/m.gguf", **s3_env(s3, LLMKUBE_RETRIES="1", LLMKUBE_MAX_RETRY_WAIT="1")
    )

    run = pod.run(env=env)

    run.failed("ModelSourceRateLimited", retryable=True)
    assert [r.status for r in s3.object_requests(bucket, "GET")] == [503, 503]
    # S3's remedy, not the hub's (HF_TOKEN means nothing to S3).
    assert run.term["remedy"] == REMEDY_RATE_LIMITED_S3, run.term
    assert "HF_TOKEN" not in run.term["message"]


def test_an_internal_error_is_unavailable_not_rate_limited(pod, s3, bucket) -> None:
    s3.put(bucket, "m.gguf", payload(4 * KIB))
    s3.set_fault(f"/{bucket}/m.gguf", S3Fault(methods=("HEAD",), status=500, code="InternalError"))

    run = pod.stage(
        pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3, LLMKUBE_RETRIES="1"))
    ).failed("ModelSourceUnavailable")

    assert len(s3.object_requests(bucket, "HEAD")) == 2
    assert run.error.retryable
