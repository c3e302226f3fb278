"""Every client the agent uses takes the agent's proxy decision (#22 items
2, 4 and 6): botocore for S3 and STS, huggingface_hub for the hub API, and
the data path, with the same NO_PROXY rules (proxy.py).

The runs are subprocesses: HTTP_PROXY/HTTPS_PROXY/NO_PROXY are then in the
process environment, where botocore and httpx would read them themselves
(botocore's NO_PROXY has no CIDR blocks). A real forward proxy on loopback
(tests/harness/proxy.py) logs every request it was asked to carry; S3 and
STS are SeaweedFS behind its recording front, the hub is the suite's fake
hub behind the real huggingface_hub client.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.canary import HF_TOKEN, leaks
from tests.harness.hub import FakeHub
from tests.harness.origin import Blackhole, Origin
from tests.harness.proxy import ForwardProxy
from tests.harness.s3front import S3Front
from tests.harness.sample import KIB, payload
from tests.harness.seaweed import imds_env, irsa_env, s3_env, sts_calls
from tests.harness.sts import ROLE_ARN
from tests.harness.tlsca import LocalCA, make_ca

pytestmark = pytest.mark.floors

REPO = "org/repo"
PROXY_PASSWORD = "proxyCANARY-u7Hq2LmZ"
# The whole of loopback, the way clusters list their pod and service ranges.
CIDR = "127.0.0.0/8"


@pytest.fixture
def ca(tmp_path: Path) -> LocalCA:
    return make_ca(tmp_path / "pki")


def proxied(url: str, no_proxy: str | None = None) -> dict[str, str]:
    """Both proxy variables (upper and lower case, as clusters set them)."""
    env = {name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
    if no_proxy is not None:
        env.update(NO_PROXY=no_proxy, no_proxy=no_proxy)
    return env


# -- item 2: one proxy decision for every client --------------------------------------------------


def test_s3_head_and_sts_post_go_direct_when_a_cidr_no_proxy_covers_them(
    pod, s3, bucket, oidc_issuer, proxy, tmp_path
) -> None:
    """Failed before: botocore read HTTP_PROXY from the environment and,
    without CIDR support in its NO_PROXY, sent the STS POST (the web identity
    token) and the signed HEAD through the excluded proxy."""
    data = payload(32 * KIB)
    s3.put(bucket, "m.gguf", data)
    token_file = tmp_path / "token"
    oidc_issuer.write_token(token_file)
    env = {**irsa_env(s3, token_file), **proxied(proxy.url, no_proxy=CIDR)}

    run = pod.run(env=pod.single_env(f"s3://{bucket}/m.gguf", **env))

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    assert proxy.requests() == []
    assert sts_calls(s3) == [200]
    assert [r.method for r in s3.object_requests(bucket)] == ["HEAD", "GET"]


def test_every_s3_and_sts_call_goes_through_a_proxy_that_must_be_used(
    pod, s3, bucket, oidc_issuer, proxy, tmp_path
) -> None:
    data = payload(32 * KIB)
    s3.put(bucket, "m.gguf", data)
    token_file = tmp_path / "token"
    oidc_issuer.write_token(token_file)
    env = {**irsa_env(s3, token_file), **proxied(proxy.url, no_proxy="example.internal")}

    run = pod.run(env=pod.single_env(f"s3://{bucket}/m.gguf", **env))

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    base = s3.endpoint_url
    asked = [(r.method, r.target.split("?")[0]) for r in proxy.requests()]
    assert asked == [
        ("POST", f"{base}/"),
        ("HEAD", f"{base}/{bucket}/m.gguf"),
        ("GET", f"{base}/{bucket}/m.gguf"),
    ]
    assert sts_calls(s3) == [200]


def test_an_https_s3_endpoint_is_tunnelled_or_direct_by_the_same_rules(
    pod, s3, bucket, proxy, ca
) -> None:
    """botocore over TLS: a CONNECT tunnel when the proxy applies, none when
    `host:port` of NO_PROXY names the endpoint."""
    data = payload(16 * KIB)
    s3.put(bucket, "m.gguf", data)
    with S3Front(s3.s3_port, tls=ca.server_context()) as front:
        env = {**s3_env(s3), "AWS_ENDPOINT_URL": front.url, "LLMKUBE_CA_DIR": str(ca.ca_dir)}
        hostport = front.url.removeprefix("https://")
        source = f"s3://{bucket}/m.gguf"

        pod.run(env=pod.single_env(source, **env, **proxied(proxy.url))).ok()
        tunnels = {(r.method, r.target) for r in proxy.requests()}
        assert tunnels == {("CONNECT", hostport)}

        pod.single(source, key="direct")
        before = len(proxy.requests())
        pod.run(env={**env, **proxied(proxy.url, no_proxy=f"other:1,{hostport}")}).ok()
        assert len(proxy.requests()) == before


def test_hub_api_goes_direct_under_a_cidr_no_proxy_and_through_the_proxy_otherwise(
    pod, hub, proxy
) -> None:
    files = {"model.safetensors": payload(16 * KIB), "config.json": b"{}"}
    hub.add_repo(REPO, files)
    env = pod.multi_env(f"hf://{REPO}@main", list(files), HF_ENDPOINT=hub.url, HF_TOKEN=HF_TOKEN)

    pod.run(env={**env, **proxied(proxy.url, no_proxy=CIDR)}).ok()
    assert proxy.requests() == []
    assert len(hub.requests("api")) == 1

    pod.single(f"hf://{REPO}/config.json", name="config.json", key="proxied")
    pod.run(env={"HF_ENDPOINT": hub.url, "HF_TOKEN": HF_TOKEN, **proxied(proxy.url)}).ok()
    api = [r.target for r in proxy.requests() if "/api/models/" in r.target]
    assert len(api) == 1 and api[0].startswith(f"{hub.url}/api/models/{REPO}")


# -- item 6: a 407 fails at once, naming the proxy credentials -----------------------------------


def _assert_refused_at_once(run, proxy: ForwardProxy) -> None:
    run.failed("ModelSourceUnauthorized", retryable=False, exit_code=4)
    assert [r.status for r in proxy.requests()] == [407], "a 407 is never retried"
    detail = run.term["message"]
    assert "407" in detail and "proxy credentials" in detail, detail
    assert f"127.0.0.1:{proxy.port}" in detail, detail
    assert "ProxyError" not in detail and "ProxyConnectionError" not in detail, detail
    assert leaks(PROXY_PASSWORD, run.outputs) == []


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "connect"])
def test_a_407_on_the_hub_api_fails_at_once(pod, ca, tls: bool) -> None:
    """Failed before: huggingface_hub's ProxyError was a transient network
    failure, retried until the budget ran out, exit 1, 'ProxyError'."""
    with (
        Origin() as cdn,
        FakeHub(cdn, tls=ca.server_context() if tls else None, tokens={HF_TOKEN}) as hub,
        ForwardProxy(credentials=("agent", "the-right-one")) as proxy,
    ):
        hub.add_repo(REPO, {"config.json": b"{}"})
        wrong = proxy.url.replace("the-right-one", PROXY_PASSWORD)
        env = pod.single_env(
            f"hf://{REPO}/config.json",
            name="config.json",
            HF_ENDPOINT=hub.url,
            HF_TOKEN=HF_TOKEN,
            LLMKUBE_CA_DIR=str(ca.ca_dir),
            **proxied(wrong),
        )
        run = pod.run(env=env)
        _assert_refused_at_once(run, proxy)
        assert hub.requests() == []


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "connect"])
def test_a_407_on_the_s3_head_fails_at_once(pod, s3, bucket, ca, tls: bool) -> None:
    s3.put(bucket, "m.gguf", payload(4 * KIB))
    with (
        S3Front(s3.s3_port, tls=ca.server_context() if tls else None) as front,
        ForwardProxy(credentials=("agent", "the-right-one")) as proxy,
    ):
        wrong = proxy.url.replace("the-right-one", PROXY_PASSWORD)
        env = {**s3_env(s3), "AWS_ENDPOINT_URL": front.url, "LLMKUBE_CA_DIR": str(ca.ca_dir)}
        run = pod.run(env=pod.single_env(f"s3://{bucket}/m.gguf", **env, **proxied(wrong)))
        _assert_refused_at_once(run, proxy)
        assert front.requests() == []


def test_a_407_on_the_sts_post_fails_at_once(pod, s3, bucket, oidc_issuer, tmp_path) -> None:
    s3.put(bucket, "m.gguf", payload(4 * KIB))
    token_file = tmp_path / "token"
    token = oidc_issuer.write_token(token_file)
    with ForwardProxy(credentials=("agent", "the-right-one")) as proxy:
        wrong = proxy.url.replace("the-right-one", PROXY_PASSWORD)
        env = {**irsa_env(s3, token_file), **proxied(wrong)}
        run = pod.run(env=pod.single_env(f"s3://{bucket}/m.gguf", **env))
        _assert_refused_at_once(run, proxy)
        assert proxy.requests()[0].method == "POST"
    assert "STS" in run.term["message"]
    assert s3.requests() == []
    assert leaks(token, run.outputs) == []


def test_no_proxy_credentials_at_all_say_so(pod, hub) -> None:
    hub.add_repo(REPO, {"config.json": b"{}"})
    with ForwardProxy(credentials=("agent", "needed")) as proxy:
        plain = f"http://127.0.0.1:{proxy.port}"
        env = pod.single_env(
            f"hf://{REPO}/config.json", name="config.json", HF_ENDPOINT=hub.url, **proxied(plain)
        )
        run = pod.run(env=env).failed("ModelSourceUnauthorized", exit_code=4)
        assert [r.status for r in proxy.requests()] == [407]
    assert "no proxy credentials" in run.term["message"]


# -- item 4: the hub API is bounded -------------------------------------------------------------


def test_a_hub_that_accepts_and_goes_silent_ends_within_the_bound(pod) -> None:
    """Failed before: huggingface_hub passed timeout=None to the request,
    which overrode the client's timeouts: the run hung (killed at 40 s)."""
    with Blackhole("accept") as hole:
        env = pod.single_env(
            f"hf://{REPO}/config.json", name="config.json", HF_ENDPOINT=hole.url, HF_TOKEN=""
        )
        run = pod.run(env=env, timeout=40)

    run.failed("ModelSourceUnreachable", retryable=True)
    # 3 attempts (LLMKUBE_RETRIES=2) of a 2 s stall, and the waits between.
    assert run.seconds < 20, run.seconds
    assert "timed out" in run.term["message"]


def test_a_proxy_tunnel_that_goes_silent_after_connect_ends_within_the_bound(pod, ca) -> None:
    with (
        Origin() as cdn,
        FakeHub(cdn, tls=ca.server_context()) as hub,
        ForwardProxy(silent_tunnels=True) as proxy,
    ):
        hub.add_repo(REPO, {"config.json": b"{}"})
        env = pod.single_env(
            f"hf://{REPO}/config.json",
            name="config.json",
            HF_ENDPOINT=hub.url,
            LLMKUBE_CA_DIR=str(ca.ca_dir),
            **proxied(proxy.url),
        )
        run = pod.run(env=env, timeout=40)
        tunnels = [r for r in proxy.requests() if r.method == "CONNECT"]
        where = f"via the proxy 127.0.0.1:{proxy.port}"

    run.failed("ModelSourceUnreachable", retryable=True)
    assert run.seconds < 20, run.seconds
    assert tunnels and hub.requests() == []
    assert where in run.term["message"], run.term["message"]


def test_instance_metadata_takes_the_same_decision(pod, s3, bucket, oidc_issuer, proxy) -> None:
    """Failed before: botocore gave its IMDS fetcher the proxies of the
    process environment, whose NO_PROXY has no CIDR: the token PUT and the
    credential GETs went through the excluded proxy."""
    from tests.harness.sts import InstanceMetadata

    data = payload(8 * KIB)
    s3.put(bucket, "m.gguf", data)
    creds = s3.assume_role(oidc_issuer.mint(), ROLE_ARN)
    env = imds_env(s3)
    with InstanceMetadata(creds) as imds:
        env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = imds.url
        source = f"s3://{bucket}/m.gguf"
        pod.run(env=pod.single_env(source, **env, **proxied(proxy.url, no_proxy=CIDR))).ok()
        assert proxy.requests() == []
        assert imds.requests()[0][0] == "PUT /latest/api/token"

        pod.single(source, key="proxied")
        pod.run(env={**env, **proxied(proxy.url, no_proxy="example.internal")}).ok()
        through = [(r.method, r.target) for r in proxy.requests()]
        assert ("PUT", f"{imds.url}/latest/api/token") in through, through


# -- a proxy that is down or refuses the tunnel: named, retried, no library class name --------


def test_a_proxy_that_is_down_is_named_for_s3_and_the_hub(pod, s3, bucket, hub) -> None:
    """Failed before: 'S3 request failed for s3://...: ProxyConnectionError',
    'hub API request failed ...: ConnectError', neither naming the proxy."""
    s3.put(bucket, "m.gguf", payload(4 * KIB))
    hub.add_repo(REPO, {"config.json": b"{}"})
    with ForwardProxy() as gone:
        dead, where = gone.url, f"via the proxy 127.0.0.1:{gone.port}"
    runs = [
        pod.run(env=pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3), **proxied(dead))),
        pod.run(
            env=pod.single_env(
                f"hf://{REPO}/config.json", name="config.json", HF_ENDPOINT=hub.url,
                **proxied(dead),
            )
        ),
    ]  # fmt: skip
    for run in runs:
        run.failed("ModelSourceUnreachable", retryable=True)
        message = run.term["message"]
        assert where in message, message
        assert "ProxyConnectionError" not in message and "ConnectError" not in message, message
    assert s3.requests() == [] and hub.requests() == []


def test_a_tunnel_the_proxy_refuses_says_what_the_proxy_answered(pod, ca) -> None:
    """CONNECT to a port nobody listens on: the proxy answers 502."""
    from tests.harness.origin import closed_port_url

    closed = closed_port_url().replace("http://", "https://")
    with ForwardProxy() as proxy:
        env = pod.single_env(
            f"hf://{REPO}/config.json",
            name="config.json",
            HF_ENDPOINT=closed,
            LLMKUBE_CA_DIR=str(ca.ca_dir),
            **proxied(proxy.url),
        )
        run = pod.run(env=env)
        statuses = [r.status for r in proxy.requests()]

    run.failed("ModelSourceUnreachable", retryable=True)
    message = run.term["message"]
    assert "the proxy answered 502" in message and "ProxyError" not in message, message
    assert statuses == [502] * 3, statuses  # retried: LLMKUBE_RETRIES=2
