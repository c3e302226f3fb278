"""Which requests go through a proxy (proxy.py): URL parsing, NO_PROXY
matching as curl and Kubernetes clusters write it, and what counts as secret."""

from __future__ import annotations

import base64

import pytest

from llmkube_stager.proxy import (
    ProxyConfigError,
    ProxySettings,
    bypassed,
    parse_no_proxy,
    parse_proxy,
)


def test_a_proxy_url_with_credentials() -> None:
    proxy = parse_proxy("http://agent:p%40ss@proxy.corp:3128", "HTTPS_PROXY")
    assert proxy is not None
    assert (proxy.host, proxy.port, proxy.username, proxy.password) == (
        "proxy.corp",
        3128,
        "agent",
        "p@ss",
    )
    assert proxy.display == "proxy.corp:3128"
    assert proxy.authorization() == "Basic " + base64.b64encode(b"agent:p@ss").decode()
    assert proxy.url() == "http://agent:p%40ss@proxy.corp:3128"
    assert "p@ss" in proxy.secrets()
    assert "p@ss" not in repr(proxy)


def test_no_scheme_means_http_and_no_port_means_80() -> None:
    proxy = parse_proxy("proxy.corp", "HTTP_PROXY")
    assert proxy is not None and (proxy.host, proxy.port) == ("proxy.corp", 80)
    assert proxy.authorization() is None and proxy.secrets() == ()


@pytest.mark.parametrize("text", ["https://proxy:3128", "socks5://proxy:1080"])
def test_only_http_proxies(text: str) -> None:
    with pytest.raises(ProxyConfigError, match="only http://"):
        parse_proxy(text, "HTTPS_PROXY")


@pytest.mark.parametrize("text", ["http://proxy:notaport", "http://:3128"])
def test_unusable_proxy_urls_are_refused_without_echoing_them(text: str) -> None:
    with pytest.raises(ProxyConfigError) as caught:
        parse_proxy(text, "HTTPS_PROXY")
    assert "HTTPS_PROXY" in str(caught.value) and text not in str(caught.value)


def test_empty_means_no_proxy() -> None:
    assert parse_proxy("  ", "HTTPS_PROXY") is None


@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "direct"),
    [
        ("huggingface.co", 443, "", False),
        ("huggingface.co", 443, "*", True),
        ("huggingface.co", 443, "huggingface.co", True),
        ("cdn-lfs.huggingface.co", 443, "huggingface.co", True),
        ("cdn-lfs.huggingface.co", 443, ".huggingface.co", True),
        ("cdn-lfs.huggingface.co", 443, "*.huggingface.co", True),
        ("nothuggingface.co", 443, "huggingface.co", False),
        ("minio.models.svc.cluster.local", 9000, ".svc,.cluster.local", True),
        ("minio.models.svc.cluster.local", 9000, "minio.models.svc.cluster.local:9000", True),
        ("minio.models.svc.cluster.local", 9001, "minio.models.svc.cluster.local:9000", False),
        ("10.96.0.12", 80, "10.0.0.0/8", True),
        ("11.96.0.12", 80, "10.0.0.0/8", False),
        ("127.0.0.1", 8080, "127.0.0.1", True),
        ("127.0.0.1", 8080, "localhost", False),
        ("::1", 8080, "::1", True),
        ("[fd00::5]", 8080, "fd00::/8", True),
        ("models.example", 80, "10.0.0.0/8", False),
        ("HuggingFace.CO.", 443, "huggingface.co", True),
    ],
)
def test_no_proxy_matching(host: str, port: int, no_proxy: str, direct: bool) -> None:
    assert bypassed(host, port, parse_no_proxy(no_proxy)) is direct


def test_the_scheme_picks_the_proxy() -> None:
    https = parse_proxy("http://secure-proxy:3128", "HTTPS_PROXY")
    plain = parse_proxy("http://plain-proxy:3128", "HTTP_PROXY")
    settings = ProxySettings(https=https, http=plain, no_proxy=parse_no_proxy(".internal"))
    assert settings.for_url("https", "huggingface.co", 443) is https
    assert settings.for_url("http", "mirror.example", 80) is plain
    assert settings.for_url("https", "minio.internal", 443) is None
    assert ProxySettings(https=https).for_url("http", "mirror.example", 80) is None


@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "direct"),
    [
        # #22 item 2: an IPv6 literal with a port never matched before.
        ("::1", 8080, "[::1]:8080", True),
        ("[::1]", 8080, "[::1]:8080", True),
        ("::1", 8081, "[::1]:8080", False),
        ("::1", 8080, "[::1]", True),
        ("::2", 8080, "[::1]:8080", False),
        ("fd00::5", 443, "[fd00::]/8", True),
        ("127.0.0.1", 8080, "[::1]:8080", False),
    ],
)
def test_ipv6_literals_with_a_port(host: str, port: int, no_proxy: str, direct: bool) -> None:
    assert bypassed(host, port, parse_no_proxy(no_proxy)) is direct


def test_a_whole_url_gets_the_same_decision() -> None:
    proxy = parse_proxy("http://egress:3128", "HTTPS_PROXY")
    settings = ProxySettings(https=proxy, http=proxy, no_proxy=parse_no_proxy("127.0.0.0/8"))
    assert settings.for_full_url("https://127.0.0.1:9000/bucket") is None
    assert settings.for_full_url("http://[::1]:9000/") is proxy
    assert settings.for_full_url("https://sts.us-east-1.amazonaws.com") is proxy
    assert (
        ProxySettings(https=proxy, no_proxy=parse_no_proxy("[::1]:9000")).for_full_url(
            "https://[::1]:9000/"
        )
        is None
    )
