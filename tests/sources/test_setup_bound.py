"""LLMKUBE_CONNECT_TIMEOUT bounds the whole connection set-up (TCP, CONNECT,
TLS) on every client, as `curl --connect-timeout` does (#29 item 4).

A forward proxy that answers CONNECT and then sends its header block one
byte every quarter second (tests/harness/proxy.py `dribble_s`) gives every
read of the client a byte well within its timeout: a timeout per read never
fires, and the run hung. Each client is tried: the data path (http.client,
the https HEAD and GET), botocore (s3://) and the hub API (huggingface_hub
over httpx). The runs are subprocesses with a deadline of their own, so a
hang fails the test instead of holding it: each must end within its bound
(two attempts of a 1 s set-up and the wait between them, plus the
interpreter's start) with the reason and words of a connect timeout.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.origin import closed_port_url
from tests.harness.pod import Pod, Run
from tests.harness.proxy import DribblingTLS, ForwardProxy

pytestmark = pytest.mark.floors

# The bound the CONNECT-and-TLS test divides (its timings are in seconds
# of this budget).
BUDGET = {
    "LLMKUBE_CONNECT_TIMEOUT": "2",
    "LLMKUBE_STALL_TIMEOUT": "2",
    "LLMKUBE_RETRIES": "1",
    "LLMKUBE_MAX_RETRY_WAIT": "1",
}
DRIBBLE_S = 0.5
# The tests that only need a bound to end in: half of it, a byte every
# quarter second (still four bytes per timeout: a timeout per read never
# fires), a wait of at most 0.1 s between the attempts.
QUICK_BUDGET = {
    "LLMKUBE_CONNECT_TIMEOUT": "1",
    "LLMKUBE_STALL_TIMEOUT": "1",
    "LLMKUBE_RETRIES": "1",
    "LLMKUBE_MAX_RETRY_WAIT": "0.1",
}
QUICK_DRIBBLE_S = 0.25
# Two attempts of 1 s, the wait, the start: 15 s is slack enough on a
# loaded machine and a fraction of the hang.
BOUND_S = 15
HANG_S = 45


def proxied(url: str) -> dict[str, str]:
    return {name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}


def _https_nowhere() -> str:
    """An https origin the proxy is asked to tunnel to (it never connects)."""
    return closed_port_url().replace("http://", "https://")


def _bounded(pod: Pod, env: dict[str, str], proxy: ForwardProxy) -> Run:
    run = pod.run(env={**env, **QUICK_BUDGET, **proxied(proxy.url)}, timeout=HANG_S)
    run.failed("ModelSourceUnreachable", retryable=True)
    assert run.seconds < BOUND_S, run.seconds
    tunnels = [r for r in proxy.requests() if r.method == "CONNECT"]
    assert len(tunnels) == 2, tunnels  # one per attempt: LLMKUBE_RETRIES=1
    return run


def test_the_data_path_bounds_a_connect_answer_that_never_ends(pod: Pod) -> None:
    """Failed before: killed after 45 s (http.client read the CONNECT answer
    with the connect timeout per read)."""
    with ForwardProxy(dribble_s=QUICK_DRIBBLE_S) as proxy:
        run = _bounded(pod, pod.single_env(f"{_https_nowhere()}/m.gguf"), proxy)
        where = f"via the proxy 127.0.0.1:{proxy.port}"

    message = run.term["message"]
    assert "connect timed out" in message and where in message, message


def test_botocore_bounds_a_connect_answer_that_never_ends(pod: Pod) -> None:
    """Failed before: killed after 45 s (urllib3's tunnel, the same
    per-read timeout)."""
    env = pod.single_env(
        "s3://models/m.gguf",
        AWS_ENDPOINT_URL=_https_nowhere(),
        AWS_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="AKIAEXAMPLE000000001",
        AWS_SECRET_ACCESS_KEY="example-secret-not-used",
        AWS_EC2_METADATA_DISABLED="true",
    )
    with ForwardProxy(dribble_s=QUICK_DRIBBLE_S) as proxy:
        run = _bounded(pod, env, proxy)
        where = f"via the proxy 127.0.0.1:{proxy.port}"

    message = run.term["message"]
    assert "connect timed out" in message and where in message, message


def test_the_hub_api_bounds_a_connect_answer_that_never_ends(pod: Pod) -> None:
    """Failed before: killed after 45 s (httpcore's tunnel read the CONNECT
    answer with the read timeout per read)."""
    env = pod.single_env(
        "hf://org/repo/config.json", name="config.json", HF_ENDPOINT=_https_nowhere(), HF_TOKEN=""
    )
    with ForwardProxy(dribble_s=QUICK_DRIBBLE_S) as proxy:
        run = _bounded(pod, env, proxy)
        where = f"via the proxy 127.0.0.1:{proxy.port}"

    message = run.term["message"]
    assert "connect timed out" in message and where in message, message


# -- a TLS peer that dribbles its handshake, direct ---------------------------------------------


def _data_path(url: str, pod: Pod) -> dict[str, str]:
    return pod.single_env(f"{url}/m.gguf")


def _botocore(url: str, pod: Pod) -> dict[str, str]:
    return pod.single_env(
        "s3://models/m.gguf",
        AWS_ENDPOINT_URL=url,
        AWS_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="AKIAEXAMPLE000000001",
        AWS_SECRET_ACCESS_KEY="example-secret-not-used",
        AWS_EC2_METADATA_DISABLED="true",
    )


def _hub_api(url: str, pod: Pod) -> dict[str, str]:
    return pod.single_env(
        "hf://org/repo/config.json", name="config.json", HF_ENDPOINT=url, HF_TOKEN=""
    )


CLIENTS = {"data path": _data_path, "botocore": _botocore, "hub API": _hub_api}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_tls_handshake_dribbled_one_byte_at_a_time_is_bounded(pod: Pod, client: str) -> None:
    """A guard more than a repair: Python's ssl gives a handshake one
    deadline of the socket's timeout, which every client sets to the
    connect timeout; the set-up bound (TCP and TLS together) keeps it so."""
    with DribblingTLS(every_s=QUICK_DRIBBLE_S) as peer:
        env = {**CLIENTS[client](peer.url, pod), **QUICK_BUDGET}
        run = pod.run(env=env, timeout=HANG_S)
        accepted = peer.accepted

    run.failed("ModelSourceUnreachable", retryable=True)
    assert run.seconds < BOUND_S, run.seconds
    assert accepted == 2, accepted  # one per attempt: LLMKUBE_RETRIES=1
    assert "timed out" in run.term["message"], run.term["message"]


# -- CONNECT and TLS share one bound ---------------------------------------------------------


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_connect_and_tls_share_one_bound(pod: Pod, client: str) -> None:
    """The proxy's CONNECT answer takes 1.5 s (three bytes, 0.5 s apart:
    each read in time), then the tunnel leads to a TLS peer that dribbles
    its handshake. The 2 s bound leaves TLS what CONNECT did not use, about
    0.5 s: the peer's connection (the proxy opens it before it answers
    CONNECT) lasts about 2 s. Failed before: 3.5 s, the handshake's own
    full 2 s (the socket's timeout, anew after CONNECT) after the 1.5 s.
    Also failed with a deadline that shut the wrapped socket object down:
    TLS detaches it (tests this found; setup.py watches a duplicate)."""
    with (
        DribblingTLS(every_s=DRIBBLE_S) as peer,
        ForwardProxy(dribble_s=DRIBBLE_S, dribble_bytes=3) as proxy,
    ):
        env = {**CLIENTS[client](peer.url, pod), **BUDGET, **proxied(proxy.url)}
        run = pod.run(env=env, timeout=HANG_S)
        handshakes_s = list(peer.handshakes_s)

    run.failed("ModelSourceUnreachable", retryable=True)
    assert len(handshakes_s) == 2, handshakes_s  # one per attempt
    # 1.5 s of CONNECT and 0.5 s of TLS; before, 1.5 s and 2.0 s (never
    # less: ssl's own deadline).
    assert max(handshakes_s) < 2.9, handshakes_s
    assert "connect timed out" in run.term["message"], run.term["message"]


# -- a set-up's deadline ends with its set-up ------------------------------------------------


def test_a_hub_api_redirect_to_another_origin_keeps_its_connection(tmp_path: Path) -> None:
    """The API redirects once to another origin (`localhost` for
    `127.0.0.1`: a new connection), which answers after 1.5 s, longer than
    the 1 s connect timeout but well within the stall timeout: the
    redirected request's deadline ends with its set-up. A guard of the
    adversary's pass: httpx hands the redirect the first request's
    extensions (the first request's trace among them), and a deadline left
    armed there would cut the answer at 1 s."""
    import time

    from tests.harness.hub import FakeHub, HubFault
    from tests.harness.origin import Origin
    from tests.harness.sample import payload

    pod = Pod(tmp_path)
    data = payload(4096)
    with Origin() as cdn, FakeHub(cdn) as hub:
        hub.add_repo("org/repo", {"config.json": data})
        port = hub.url.rsplit(":", 1)[1]
        target = f"http://localhost:{port}/api/models/org/repo/revision/main"
        hub.set_fault("api", HubFault(302, times=1, headers=(("Location", target),)))
        hub.on_api(lambda: time.sleep(1.5))
        env = pod.single_env(
            "hf://org/repo@main/config.json",
            name="config.json",
            HF_ENDPOINT=hub.url,
            HF_TOKEN="",
            LLMKUBE_CONNECT_TIMEOUT="1",
            LLMKUBE_STALL_TIMEOUT="5",
            LLMKUBE_RETRIES="0",
        )
        run = pod.stage(env)
        api_requests = len(hub.requests("api"))

    assert run.error is None, f"{run.reason}: {run.detail}"
    assert api_requests == 2
    assert pod.dest("config.json").read_bytes() == data
