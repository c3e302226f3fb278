"""No secret in any output on the proxy and STS paths (#22, CONTRACT §5):
the proxy password (and its Basic token), the web identity token STS gets,
the secret key and the session STS issues, on success and on each way
these paths fail (407 from the proxy, a token STS refuses, a wrong secret
key, an STS over TLS through a CONNECT tunnel). Every run goes through a
real forward proxy that wants credentials (tests/harness/proxy.py), to
SeaweedFS and its STS or the fake hub.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.harness.canary import HF_TOKEN, assert_no_leak, canary, outputs_of, runtime_canaries
from tests.harness.contract import exit_code_of
from tests.harness.hub import FakeHub
from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.proxy import ForwardProxy
from tests.harness.s3front import S3Front
from tests.harness.sample import gguf_like
from tests.harness.seaweed import READER, SeaweedS3
from tests.harness.sts import ROLE_ARN, OidcIssuer
from tests.harness.tlsca import make_ca

pytestmark = pytest.mark.e2e

DATA = gguf_like(120_000, seed=9)
USER = "agent"


@dataclass
class World:
    s3: SeaweedS3
    bucket: str
    issuer: OidcIssuer
    inputs: Path
    proxy_password: str
    proxy_port: int
    closing: list[Callable[[], None]] = field(default_factory=list)

    def proxy_url(self, password: str | None = None) -> str:
        return f"http://{USER}:{password or self.proxy_password}@127.0.0.1:{self.proxy_port}"


@dataclass
class Case:
    env: dict[str, str | None]
    reason: str
    canaries: dict[str, str] = field(default_factory=dict)


def _proxied(url: str) -> dict[str, str | None]:
    return {"HTTP_PROXY": url, "HTTPS_PROXY": url, "NO_PROXY": None}


def _irsa(world: World, token: str, sts_url: str | None = None) -> dict[str, str | None]:
    token_file = world.inputs / "token"
    token_file.write_text(token)
    return {
        "AWS_ENDPOINT_URL": world.s3.endpoint_url,
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ROLE_ARN": ROLE_ARN,
        "AWS_WEB_IDENTITY_TOKEN_FILE": str(token_file),
        "AWS_ENDPOINT_URL_STS": sts_url or world.s3.endpoint_url,
    }


def irsa_through_the_proxy(world: World) -> Case:
    token = world.issuer.mint()
    env = {**_irsa(world, token), **_proxied(world.proxy_url())}
    return Case(env, "ModelTransferSucceeded", {"web-identity": token})


def irsa_proxy_refuses_the_password(world: World) -> Case:
    wrong = canary("pxWRONG")
    token = world.issuer.mint()
    env = {**_irsa(world, token), **_proxied(world.proxy_url(wrong))}
    return Case(env, "ModelSourceUnauthorized", {"web-identity": token, "wrong-proxy": wrong})


def irsa_token_refused_by_sts(world: World) -> Case:
    token = canary("wiCANARY")  # not a JWT: STS refuses it
    env = {**_irsa(world, token), **_proxied(world.proxy_url())}
    return Case(env, "ModelSourceUnauthorized", {"web-identity": token})


def wrong_secret_key_through_the_proxy(world: World) -> Case:
    secret = canary("skCANARY", 40)
    env = {
        "AWS_ENDPOINT_URL": world.s3.endpoint_url,
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ACCESS_KEY_ID": READER[0],
        "AWS_SECRET_ACCESS_KEY": secret,
        **_proxied(world.proxy_url()),
    }
    return Case(env, "ModelSourceUnauthorized", {"secret-key": secret})


def irsa_sts_over_tls_through_a_tunnel(world: World) -> Case:
    ca = make_ca(world.inputs / "pki")
    front = S3Front(world.s3.s3_port, tls=ca.server_context()).start()
    world.closing.append(front.close)
    token = world.issuer.mint()
    env = {
        **_irsa(world, token, sts_url=front.url),
        **_proxied(world.proxy_url()),
        "LLMKUBE_CA_DIR": str(ca.ca_dir),
    }
    return Case(env, "ModelTransferSucceeded", {"web-identity": token})


CASES: dict[str, Callable[[World], Case]] = {
    "irsa-through-the-proxy": irsa_through_the_proxy,
    "irsa-proxy-407": irsa_proxy_refuses_the_password,
    "irsa-token-refused": irsa_token_refused_by_sts,
    "secret-key-wrong": wrong_secret_key_through_the_proxy,
    "irsa-sts-tls-tunnel": irsa_sts_over_tls_through_a_tunnel,
}


def _proxy_canaries(password: str) -> dict[str, str]:
    basic = base64.b64encode(f"{USER}:{password}".encode()).decode()
    return {"proxy-password": password, "proxy-basic": basic}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_no_proxy_or_sts_secret_in_any_output(
    pod: Pod, s3: SeaweedS3, bucket: str, oidc_issuer: OidcIssuer, tmp_path_factory, case
) -> None:
    s3.put(bucket, "m.gguf", DATA)
    password = canary("pxCANARY")
    pod.single(f"s3://{bucket}/m.gguf")
    with ForwardProxy(credentials=(USER, password)) as proxy:
        world = World(
            s3, bucket, oidc_issuer, tmp_path_factory.mktemp("inputs"), password, proxy.port
        )
        try:
            scenario = case(world)
            run = pod.run("stage", env=scenario.env, timeout=60)
        finally:
            for close in world.closing:
                close()
        asked = proxy.requests()

    assert run.returncode == exit_code_of(scenario.reason), str(run)
    assert run.term["reason"] == scenario.reason, str(run)
    assert asked, "nothing went through the proxy"
    canaries = {**_proxy_canaries(password), **scenario.canaries, **runtime_canaries(s3)}
    assert_no_leak(outputs_of(run, pod.tmp), canaries)


def test_no_proxy_secret_or_hf_token_when_the_proxy_refuses_the_hub_api(pod: Pod, tmp_path) -> None:
    password, wrong = canary("pxCANARY"), canary("pxWRONG")
    ca = make_ca(tmp_path / "pki")
    with (
        Origin() as cdn,
        FakeHub(cdn, tls=ca.server_context(), tokens={HF_TOKEN}) as hub,
        ForwardProxy(credentials=(USER, password)) as proxy,
    ):
        hub.add_repo("org/repo", {"config.json": b"{}"})
        url = f"http://{USER}:{wrong}@127.0.0.1:{proxy.port}"
        env = pod.single_env(
            "hf://org/repo/config.json",
            name="config.json",
            HF_ENDPOINT=hub.url,
            HF_TOKEN=HF_TOKEN,
            LLMKUBE_CA_DIR=str(ca.ca_dir),
            HTTPS_PROXY=url,
        )
        run = pod.run("stage", env=env, timeout=60)
        assert [r.status for r in proxy.requests()] == [407]

    assert run.returncode == 4 and run.term["reason"] == "ModelSourceUnauthorized", str(run)
    canaries = {**_proxy_canaries(password), **_proxy_canaries(wrong), "hf-token": HF_TOKEN}
    assert_no_leak(outputs_of(run, pod.tmp), canaries)
