"""Forward proxies from HTTPS_PROXY / HTTP_PROXY / NO_PROXY (proxy.py), as
the scripts' curl honoured them.

A real loopback proxy (testing/proxy.py) logs what it was asked: CONNECT for
https origins, absolute-form requests for http ones. Assertions are on that
log, on what the origin received, on the bytes and on the log/termination
text (proxy credentials are secrets).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmkube_stager.config import secret_values
from llmkube_stager.logs import Redactor
from tests.harness.origin import Origin
from tests.harness.proxy import ForwardProxy
from tests.harness.sample import payload
from tests.harness.tlsca import make_ca

PATH = "/files/model.gguf"
MIB = 1 << 20
CANARY = "proxy-canary-Zq81xK"


@pytest.fixture
def tls_origin(tmp_path: Path) -> Iterator[tuple[Origin, Path]]:
    ca = make_ca(tmp_path / "pki")
    ca_dir = tmp_path / "custom-certs"
    ca_dir.mkdir()
    (ca_dir / "ca.crt").write_bytes(ca.ca_pem.read_bytes())
    with Origin(tls=ca.server_context()) as srv:
        yield srv, ca_dir


def _port(origin: Origin) -> int:
    return int(origin.url.rsplit(":", 1)[1])


def test_an_https_origin_is_reached_through_a_connect_tunnel(tls_origin, proxy, pod) -> None:
    origin, ca_dir = tls_origin
    data = payload(3 * MIB, seed=1)
    origin.put(PATH, data)
    digest = hashlib.sha256(data).hexdigest()

    pod.stage(
        pod.single_env(
            origin.url + PATH,
            LLMKUBE_CA_DIR=str(ca_dir),
            HTTPS_PROXY=proxy.url,
            MODEL_SHA256=digest,
        )
    ).ok()

    assert pod.dest().read_bytes() == data
    tunnels = [r for r in proxy.requests() if r.method == "CONNECT"]
    assert tunnels and all(r.target == f"127.0.0.1:{_port(origin)}" for r in tunnels)
    # The HEAD and the GET both came through it, on one kept-alive tunnel
    # (both go through http.client's connections since #16).
    assert [r.method for r in origin.requests()] == ["HEAD", "GET"]
    assert len(tunnels) == 1


def test_an_http_origin_gets_absolute_form_requests(proxy, origin, pod) -> None:
    data = payload(2 * MIB, seed=2)
    origin.put(PATH, data)

    pod.stage(pod.single_env(origin.url + PATH, http_proxy=proxy.url)).ok()

    assert pod.dest().read_bytes() == data
    asked = [(r.method, r.target) for r in proxy.requests()]
    assert asked == [("HEAD", origin.url + PATH), ("GET", origin.url + PATH)]


def test_https_proxy_is_not_used_for_an_http_origin(proxy, origin, pod) -> None:
    origin.put(PATH, payload(64 * 1024))

    pod.stage(pod.single_env(origin.url + PATH, HTTPS_PROXY=proxy.url)).ok()

    assert proxy.requests() == []
    assert len(origin.requests()) == 2


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "localhost,127.0.0.0/8", "*", ".svc,127.0.0.1"])
def test_no_proxy_sends_matching_hosts_direct(proxy, origin, pod, no_proxy: str) -> None:
    data = payload(64 * 1024)
    origin.put(PATH, data)

    pod.stage(pod.single_env(origin.url + PATH, HTTP_PROXY=proxy.url, NO_PROXY=no_proxy)).ok()

    assert pod.dest().read_bytes() == data
    assert proxy.requests() == []


def test_proxy_credentials_are_sent_and_never_printed(tmp_path, origin, pod) -> None:
    data = payload(64 * 1024)
    origin.put(PATH, data)
    with ForwardProxy(credentials=("agent", CANARY)) as proxy:
        env = pod.single_env(origin.url + PATH, HTTP_PROXY=proxy.url)
        run = pod.stage(env, redactor=Redactor(secret_values(env, {}))).ok()
        assert all(r.authorized for r in proxy.requests())
        assert len(proxy.requests()) == 2

    assert pod.dest().read_bytes() == data
    assert CANARY not in run.stderr
    assert not any(CANARY in p.read_text(errors="replace") for p in _text_files(tmp_path))


def test_a_proxy_refusing_the_credentials_fails_with_a_reason_and_no_secret(
    tls_origin, pod
) -> None:
    origin, ca_dir = tls_origin
    origin.put(PATH, payload(64 * 1024))
    with ForwardProxy(credentials=("agent", "the-right-one")) as proxy:
        wrong = proxy.url.replace("the-right-one", CANARY)
        env = pod.single_env(origin.url + PATH, LLMKUBE_CA_DIR=str(ca_dir), HTTPS_PROXY=wrong)
        run = pod.stage(env, redactor=Redactor(secret_values(env, {}))).failed()
        assert {r.status for r in proxy.requests()} == {407}
        assert len(proxy.requests()) == 1, "a 407 is not retried"
        where = f"127.0.0.1:{proxy.port}"

    # #22 item 6: wrong proxy credentials do not fix themselves (exit 4).
    assert run.reason == "ModelSourceUnauthorized" and run.returncode == 4
    assert "407" in str(run.error) and f"via the proxy {where}" in str(run.error)
    assert "proxy credentials" in str(run.error) and "HTTPS_PROXY" in run.term["remedy"]
    assert CANARY not in run.stderr and CANARY not in str(run.error)
    assert origin.requests() == []
    assert not pod.dest().exists()


def test_a_proxy_that_is_down_is_named_in_the_error(origin, pod) -> None:
    origin.put(PATH, payload(64 * 1024))
    with ForwardProxy() as gone:
        dead, where = gone.url, f"127.0.0.1:{gone.port}"
    run = pod.stage(pod.single_env(origin.url + PATH, HTTP_PROXY=dead)).failed()

    assert run.reason == "ModelSourceUnreachable"
    assert f"via the proxy {where}" in str(run.error)
    assert origin.requests() == []


def _text_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and p.stat().st_size < 1 << 20]


def test_an_http_origin_behind_a_proxy_wanting_credentials_fails_once(origin, pod) -> None:
    origin.put(PATH, payload(64 * 1024))
    with ForwardProxy(credentials=("agent", "needed")) as proxy:
        run = pod.stage(
            pod.single_env(origin.url + PATH, HTTP_PROXY=f"http://127.0.0.1:{proxy.port}")
        ).failed()
        statuses = [r.status for r in proxy.requests()]

    assert run.reason == "ModelSourceUnauthorized" and run.returncode == 4
    assert "407" in str(run.error) and "proxy credentials" in str(run.error)
    assert statuses == [407] and run.sleeps == []
    assert origin.requests() == []


def test_the_data_path_reports_a_refused_tunnel_without_retrying(tls_origin) -> None:
    """The GET's own CONNECT (http.client), refused by the proxy."""
    from llmkube_stager.errors import SourceError
    from llmkube_stager.proxy import ProxySettings, parse_proxy
    from llmkube_stager.sources.wire.connection import ConnectionPool
    from llmkube_stager.sources.wire.exchange import open_get
    from llmkube_stager.sources.wire.status import AuthPolicy
    from llmkube_stager.sources.wire.tls import make_ssl_context

    origin, ca_dir = tls_origin
    origin.put(PATH, b"x" * 1000)
    with ForwardProxy(credentials=("agent", "needed")) as proxy:
        wrong = parse_proxy(f"http://agent:{CANARY}@127.0.0.1:{proxy.port}", "HTTPS_PROXY")
        context = make_ssl_context(str(ca_dir))
        pool = ConnectionPool(5.0, 5.0, lambda: context, ProxySettings(https=wrong))
        with pytest.raises(SourceError) as caught:
            open_get(pool, origin.url + PATH, {}, AuthPolicy("", ""), 0)
        where = f"via the proxy 127.0.0.1:{proxy.port}"

    error = caught.value
    assert "407" in str(error) and where in str(error)
    assert not error.transient and CANARY not in str(error)
    assert error.exit_code == 4 and "proxy credentials" in str(error)
    assert origin.requests() == []
