"""No S3 secret in any output (#12, CONTRACT §5), for the inputs the whole
credential chain added: a web identity token (file), a container
authorization token (variable and file), a shared credentials file's
secret, and what only exists at run time: the temporary credentials STS
issued and every presigned URL's signature. Files are not known to the
redactor, so a leak of their content would show as it is.

Against SeaweedFS and its STS (tests/harness/seaweed.py, sts.py).
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.harness.canary import Secrets, assert_no_leak, outputs_of, runtime_canaries
from tests.harness.contract import exit_code_of
from tests.harness.pod import Pod
from tests.harness.s3front import S3Fault
from tests.harness.sample import gguf_like
from tests.harness.seaweed import READER, SeaweedS3
from tests.harness.sts import ROLE_ARN, ContainerCredentials, OidcIssuer

pytestmark = pytest.mark.e2e

SECRETS = Secrets.new("CANARY")
ENV_SECRETS = SECRETS.env
CANARIES = SECRETS.named
DATA = gguf_like(200_000, seed=7)


def _canary(prefix: str, n: int = 32) -> str:
    return prefix + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(n))


@dataclass
class S3Case:
    env: dict[str, str | None]
    reason: str
    exit_code: int = 1
    canaries: dict[str, str] = field(default_factory=dict)


@dataclass
class World:
    s3: SeaweedS3
    bucket: str
    issuer: OidcIssuer
    inputs: Path  # files the pod reads, outside the pod's own tree
    closing: list[Callable[[], None]] = field(default_factory=list)


def _base(world: World) -> dict[str, str | None]:
    return {
        "AWS_ENDPOINT_URL": world.s3.endpoint_url,
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        # The module-wide canary keys would win over every other source.
        "AWS_ACCESS_KEY_ID": None,
        "AWS_SECRET_ACCESS_KEY": None,
        "AWS_SESSION_TOKEN": None,
    }


def _irsa(world: World, token: str) -> dict[str, str | None]:
    token_file = world.inputs / "token"
    token_file.write_text(token)
    return {
        **_base(world),
        "AWS_ROLE_ARN": ROLE_ARN,
        "AWS_WEB_IDENTITY_TOKEN_FILE": str(token_file),
        "AWS_ENDPOINT_URL_STS": world.s3.endpoint_url,
    }


def irsa_success(world: World) -> S3Case:
    token = world.issuer.mint()
    return S3Case(_irsa(world, token), "ModelTransferSucceeded", 0, {"web-identity": token})


def irsa_refused(world: World) -> S3Case:
    token = _canary("wiCANARY")  # not a JWT: STS refuses it
    return S3Case(_irsa(world, token), "ModelSourceUnauthorized", canaries={"web-identity": token})


def irsa_presigned_get_refused_then_signed_again(world: World) -> S3Case:
    world.s3.set_fault(
        f"/{world.bucket}/m.gguf",
        S3Fault(methods=("GET",), status=403, code="AccessDenied", times=1),
    )
    token = world.issuer.mint()
    return S3Case(_irsa(world, token), "ModelTransferSucceeded", 0, {"web-identity": token})


def _container(world: World, token: str, answer_token: str, *, as_file: bool) -> S3Case:
    creds = world.s3.assume_role(world.issuer.mint(), ROLE_ARN)
    agent = ContainerCredentials(creds, answer_token).start()
    world.closing.append(agent.close)
    env = {**_base(world), "AWS_CONTAINER_CREDENTIALS_FULL_URI": f"{agent.url}/v1/credentials"}
    if as_file:
        (world.inputs / "pod-identity").write_text(token)
        env["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] = str(world.inputs / "pod-identity")
    else:
        env["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = token
    ok = token == answer_token
    reason = "ModelTransferSucceeded" if ok else "ModelSourceUnauthorized"
    return S3Case(
        env,
        reason,
        0 if ok else 1,
        {"container-token": token, "sts-secret": creds.secret_access_key},
    )


def container_success_file(world: World) -> S3Case:
    token = _canary("ctCANARY")
    return _container(world, token, token, as_file=True)


def container_refused_variable(world: World) -> S3Case:
    return _container(world, _canary("ctCANARY"), "the-agent-wants-another", as_file=False)


def container_refused_file(world: World) -> S3Case:
    return _container(world, _canary("ctCANARY"), "the-agent-wants-another", as_file=True)


def _profile(world: World, secret: str) -> dict[str, str | None]:
    """A shared credentials file whose profile `models` has the reader's key
    id and `secret`, chosen by AWS_PROFILE."""
    credentials = world.inputs / "credentials"
    credentials.write_text(
        f"[models]\naws_access_key_id = {READER[0]}\naws_secret_access_key = {secret}\n"
    )
    return {
        **_base(world),
        "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
        "AWS_PROFILE": "models",
    }


def profile_with_a_wrong_secret(world: World) -> S3Case:
    secret = _canary("pfCANARY", 40)
    env = _profile(world, secret)
    return S3Case(env, "ModelSourceUnauthorized", canaries={"profile-secret": secret})


def profile_success(world: World) -> S3Case:
    env = _profile(world, READER[1])
    return S3Case(env, "ModelTransferSucceeded", 0, {"profile-secret": READER[1]})


CASES: dict[str, Callable[[World], S3Case]] = {
    "irsa-success": irsa_success,
    "irsa-token-refused": irsa_refused,
    "irsa-get-403-signed-again": irsa_presigned_get_refused_then_signed_again,
    "container-success-token-file": container_success_file,
    "container-refused-token-variable": container_refused_variable,
    "container-refused-token-file": container_refused_file,
    "profile-wrong-secret": profile_with_a_wrong_secret,
    "profile-success": profile_success,
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_no_s3_secret_in_any_output(
    pod: Pod, s3: SeaweedS3, bucket: str, oidc_issuer: OidcIssuer, tmp_path_factory, case
) -> None:
    s3.put(bucket, "m.gguf", DATA)
    world = World(s3, bucket, oidc_issuer, tmp_path_factory.mktemp("inputs"))
    # At the debug level (#46 item 5): each request's line holds none either.
    pod.env.update({**ENV_SECRETS, "LLMKUBE_LOG_LEVEL": "debug"})
    pod.single(f"s3://{bucket}/m.gguf")
    try:
        scenario = case(world)
        run = pod.run("stage", env=scenario.env, timeout=60)
    finally:
        for close in world.closing:
            close()

    expected = 0 if scenario.exit_code == 0 else exit_code_of(scenario.reason)
    assert run.returncode == expected, str(run)
    assert run.term["reason"] == scenario.reason, str(run)
    canaries = {**CANARIES, **scenario.canaries, **runtime_canaries(s3)}
    if scenario.exit_code == 0:
        assert any(k.startswith("X-Amz-Signature") for k in canaries), "no presigned GET seen"
        gets = [x for x in run.lines if x.startswith("> GET ")]
        assert gets and all("X-Amz-Signature=***" in x for x in gets), run.stderr
    assert_no_leak(outputs_of(run, pod.tmp), canaries)
