"""boto3's default credential chain, the way pods get credentials (#12 item 1):
IRSA, a shared credentials file and AWS_PROFILE, container credentials (EKS
Pod Identity), instance metadata; unsigned requests only when nothing is
found. Every source is real on loopback: SeaweedFS's STS verifies the web
identity token against the test issuer and its S3 API accepts the temporary
credentials it issued (sts.py). Only what config/ collected reaches
botocore: the test process's own environment never does.
"""

from __future__ import annotations

import pytest

from tests.harness.canary import leaks
from tests.harness.sample import KIB, payload
from tests.harness.seaweed import (
    PUBLIC_BUCKET,
    READER,
    imds_env,
    irsa_env,
    s3_env,
    sts_calls,
    without_keys,
)
from tests.harness.sts import ROLE_ARN, ContainerCredentials, InstanceMetadata

pytestmark = pytest.mark.floors


def assert_signed_with_session(s3, bucket: str, key: str) -> str:
    """HEAD and GET both carry a session token the server accepted; the
    temporary access key id they were signed with."""
    head, get = s3.object_requests(bucket)
    assert (head.method, head.status, get.method, get.status) == ("HEAD", 200, "GET", 200)
    token = head.headers["x-amz-security-token"]
    assert get.params["X-Amz-Security-Token"] == [token]
    key_id = get.params["X-Amz-Credential"][0].split("/")[0]
    assert key_id.startswith("ASIA") and f"Credential={key_id}/" in head.headers["authorization"]
    return key_id


def test_irsa_web_identity_credentials_sign_the_head_and_the_presigned_get(
    pod, s3, bucket, oidc_issuer, tmp_path
) -> None:
    """Before: the agent signed only with AWS_ACCESS_KEY_ID, so IRSA pods
    sent unsigned requests and got 403 (ModelSourceUnauthorized)."""
    data = payload(64 * KIB)
    s3.put(bucket, "m.gguf", data)
    token_file = tmp_path / "token"
    token = oidc_issuer.write_token(token_file)

    run = pod.run(env=pod.single_env(f"s3://{bucket}/m.gguf", **irsa_env(s3, token_file)))

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    assert sts_calls(s3) == [200]
    assert_signed_with_session(s3, bucket, "m.gguf")
    assert "AWS credentials from assume-role-with-web-identity" in run.stderr
    assert leaks(token, run.outputs) == []


def test_shared_credentials_file_with_aws_profile(pod, s3, bucket, tmp_path) -> None:
    data = payload(16 * KIB)
    s3.put(bucket, "m.gguf", data)
    credentials = tmp_path / "aws" / "credentials"
    credentials.parent.mkdir()
    credentials.write_text(
        "[default]\naws_access_key_id = AKIAWRONGDEFAULT0001\naws_secret_access_key = nope\n\n"
        f"[models]\naws_access_key_id = {READER[0]}\naws_secret_access_key = {READER[1]}\n"
    )
    env = without_keys(s3_env(s3))

    run = pod.stage(
        pod.single_env(
            f"s3://{bucket}/m.gguf",
            **env,
            AWS_SHARED_CREDENTIALS_FILE=str(credentials),
            AWS_PROFILE="models",
        )
    ).ok()

    assert pod.dest().read_bytes() == data
    head, get = s3.object_requests(bucket)
    assert f"Credential={READER[0]}/" in head.headers["authorization"]
    assert get.params["X-Amz-Credential"][0].startswith(f"{READER[0]}/")
    assert run.has_line("AWS credentials from shared-credentials-file")


def test_default_profile_of_the_home_directory_cli(pod, s3, bucket) -> None:
    """No variable but HOME: ~/.aws/credentials of the pod's HOME, as boto3."""
    data = payload(16 * KIB)
    s3.put(bucket, "m.gguf", data)
    aws = pod.tmp / "home" / ".aws"
    aws.mkdir(parents=True)
    (aws / "config").write_text("[default]\nregion = us-east-1\n")
    (aws / "credentials").write_text(
        f"[default]\naws_access_key_id = {READER[0]}\naws_secret_access_key = {READER[1]}\n"
    )
    env = without_keys(s3_env(s3))
    del env["AWS_REGION"]

    run = pod.run(env=pod.single_env(f"s3://{bucket}/m.gguf", **env))

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    assert f"Credential={READER[0]}/" in s3.object_requests(bucket)[0].headers["authorization"]


def test_container_credentials_eks_pod_identity(pod, s3, bucket, oidc_issuer, tmp_path) -> None:
    data = payload(16 * KIB)
    s3.put(bucket, "m.gguf", data)
    creds = s3.assume_role(oidc_issuer.mint(), ROLE_ARN)
    token_file = tmp_path / "eks-pod-identity-token"
    token_file.write_text("pod-identity-token-0001")

    with ContainerCredentials(creds, "pod-identity-token-0001") as agent:
        run = pod.stage(
            pod.single_env(
                f"s3://{bucket}/m.gguf",
                **without_keys(s3_env(s3)),
                AWS_CONTAINER_CREDENTIALS_FULL_URI=f"{agent.url}/v1/credentials",
                AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=str(token_file),
            )
        ).ok()
        asked = agent.requests()

    assert pod.dest().read_bytes() == data
    assert [path for path, _ in asked] == ["GET /v1/credentials"]
    assert asked[0][1]["authorization"] == "pod-identity-token-0001"
    assert assert_signed_with_session(s3, bucket, "m.gguf") == creds.access_key_id
    assert run.has_line("AWS credentials from container-role")


def test_instance_metadata_credentials(pod, s3, bucket, oidc_issuer) -> None:
    data = payload(16 * KIB)
    s3.put(bucket, "m.gguf", data)
    creds = s3.assume_role(oidc_issuer.mint(), ROLE_ARN)
    env = imds_env(s3)

    with InstanceMetadata(creds) as imds:
        run = pod.stage(
            pod.single_env(
                f"s3://{bucket}/m.gguf", **env, AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.url
            )
        ).ok()
        asked = [path for path, _ in imds.requests()]

    assert pod.dest().read_bytes() == data
    assert asked[0] == "PUT /latest/api/token"
    assert f"GET /latest/meta-data/iam/security-credentials/{InstanceMetadata.ROLE}" in asked
    assert assert_signed_with_session(s3, bucket, "m.gguf") == creds.access_key_id
    assert run.has_line("AWS credentials from iam-role")


# -- nothing found --------------------------------------------------------------------------------


def test_no_credentials_anywhere_sends_unsigned_requests_and_says_so(pod, s3) -> None:
    data = payload(8 * KIB)
    s3.put(PUBLIC_BUCKET, "open/m.gguf", data)

    run = pod.stage(
        pod.single_env(f"s3://{PUBLIC_BUCKET}/open/m.gguf", **without_keys(s3_env(s3)))
    ).ok()

    assert pod.dest().read_bytes() == data
    head, get = s3.object_requests(PUBLIC_BUCKET)
    assert "authorization" not in head.headers
    assert not any(p.startswith("X-Amz-") for p in get.params)
    assert run.has_line("no AWS credentials found")
    assert run.has_line("sending unsigned requests")


def test_unsigned_request_to_a_private_bucket_is_unauthorized(pod, s3, bucket) -> None:
    s3.put(bucket, "m.gguf", payload(4 * KIB))

    run = pod.stage(pod.single_env(f"s3://{bucket}/m.gguf", **without_keys(s3_env(s3)))).failed(
        "ModelSourceUnauthorized"
    )

    assert [(r.method, r.status) for r in s3.requests()] == [("HEAD", 403)]
    assert run.has_line("sending unsigned requests")


def test_the_test_process_environment_never_reaches_botocore(
    pod, s3, monkeypatch, tmp_path
) -> None:
    """botocore reads os.environ by default; the agent hands it only what
    config/ collected. Here the process has keys (and a profile) that the
    pod's configuration does not: nothing may be signed with them."""
    data = payload(4 * KIB)
    s3.put(PUBLIC_BUCKET, "env/m.gguf", data)
    stray = tmp_path / "stray-credentials"
    stray.write_text(
        "[default]\naws_access_key_id = AKIASTRAYFILE0000001\naws_secret_access_key = x\n"
    )
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIASTRAYENVIRON0001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "stray-secret")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(stray))
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")

    run = pod.stage(
        pod.single_env(f"s3://{PUBLIC_BUCKET}/env/m.gguf", **without_keys(s3_env(s3)))
    ).ok()

    assert pod.dest().read_bytes() == data
    assert all("authorization" not in r.headers for r in s3.requests())
    assert run.has_line("sending unsigned requests")


def test_static_keys_win_over_a_profile_like_boto3(pod, s3, bucket, tmp_path) -> None:
    """botocore's order: environment keys, then the profile (here the
    profile's keys are wrong, so only the right order succeeds)."""
    s3.put(bucket, "m.gguf", payload(4 * KIB))
    credentials = tmp_path / "credentials"
    credentials.write_text(
        "[models]\naws_access_key_id = AKIAWRONGPROFILE0001\naws_secret_access_key = nope\n"
    )

    pod.stage(
        pod.single_env(
            f"s3://{bucket}/m.gguf",
            **s3_env(s3),
            AWS_SHARED_CREDENTIALS_FILE=str(credentials),
            AWS_PROFILE="models",
        )
    ).ok()

    assert f"Credential={READER[0]}/" in s3.object_requests(bucket)[0].headers["authorization"]


def test_a_warm_start_with_the_whole_chain_configured_imports_and_asks_nothing_cli(
    pod, s3, bucket, oidc_issuer, tmp_path
) -> None:
    """IRSA, a profile and container credentials all configured: a warm
    start still imports no botocore, reads no credential and sends nothing
    (no STS call, no HEAD)."""
    data = payload(8 * KIB)
    s3.put(bucket, "m.gguf", data)
    token_file = tmp_path / "token"
    oidc_issuer.write_token(token_file)
    env = pod.single_env(
        f"s3://{bucket}/m.gguf",
        **irsa_env(s3, token_file),
        AWS_PROFILE="no-such-profile-on-a-warm-start",
        AWS_CONTAINER_CREDENTIALS_FULL_URI="http://127.0.0.1:9/v1/credentials",
        PYTHONPROFILEIMPORTTIME="1",
    )
    cold = pod.run(env={**env, "AWS_PROFILE": ""})
    cold.ok(files=1, fetched=1)
    assert "botocore" in cold.stderr  # the check can fail: a cold start imports it
    s3.clear()

    warm = pod.run(env=env)

    warm.ok(files=1, fetched=0, reused=1)
    assert "import time:" in warm.stderr
    assert not [line for line in warm.stderr.splitlines() if "boto" in line]
    assert s3.requests() == []
