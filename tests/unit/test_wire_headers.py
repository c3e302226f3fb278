"""#22 header math, pure: the rate-limit forms (item 5), content codings
and the hop that sent them (item 1), and which redirects are followed
(item 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmkube_stager.errors import (
    REMEDY_ENCODED,
    REMEDY_GATED,
    REMEDY_REDIRECT_SCHEME,
    Reason,
    SourceError,
)
from llmkube_stager.sources.wire.coding import encoded_error, encoding_header, hop_words
from llmkube_stager.sources.wire.ratelimit import rate_limit_wait_s, reset_s, structured_window_s
from llmkube_stager.sources.wire.status import next_hop

NOW = 1_800_000_000.0


def headers(**values: str):  # type: ignore[no-untyped-def]
    lowered = {k.replace("_", "-").lower(): v for k, v in values.items()}
    return lowered.get


# -- item 5 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "policy", "expected"),
    [
        ('"api";r=0;t=55', None, 55.0),  # the Hub's form, huggingface_hub's example
        ('"resolvers";r=0;t=55', None, 55.0),
        ("api;r=0;t=55", None, 55.0),  # a token rather than a string
        ('"burst";r=3;t=1, "day";r=0;t=3600', None, 3600.0),  # the exhausted one
        ('"a";r=0;t=10, "b";r=0;t=20', None, 20.0),  # the longest exhausted
        ('"burst";r=7;t=50', None, None),  # quota left: not a window
        ('"api";r=0', '"api";q=500;w=300', 300.0),  # no t: the whole window
        ('"api";r=0', None, None),
        ('"api" ; R=0 ; T=9', None, 9.0),
        ("limit=100, remaining=0, reset=55", None, 55.0),  # draft-07 dictionary
        ("limit=100, remaining=4, reset=55", None, None),
        ("", None, None),
        ('"api";r=0;t=soon', None, None),
        ('"api";r=0;t=²', None, None),
    ],
)
def test_structured_ratelimit(value: str, policy: str | None, expected: float | None) -> None:
    assert structured_window_s(value, policy) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("55", 55.0), (str(int(NOW) + 40), 40.0), (str(int(NOW) - 5), 0.0), ("x", None), ("", None)],
    ids=["seconds", "epoch", "epoch-past", "junk", "empty"],
)
def test_reset_is_seconds_or_an_epoch(value: str, expected: float | None) -> None:
    assert reset_s(value, now_s=NOW) == expected


def test_the_structured_field_outranks_retry_after_and_resets() -> None:
    get = headers(ratelimit='"api";r=0;t=55', retry_after="1", x_ratelimit_reset="2")
    assert rate_limit_wait_s(get, NOW) == 55.0


def test_retry_after_then_the_reset_headers() -> None:
    assert rate_limit_wait_s(headers(retry_after="5", ratelimit_reset="50"), NOW) == 5.0
    assert rate_limit_wait_s(headers(ratelimit_reset="50"), NOW) == 50.0
    epoch = str(int(NOW) + 30)
    assert rate_limit_wait_s(headers(x_ratelimit_reset=epoch), NOW) == 30.0
    # A RateLimit with quota left says nothing: the next form decides.
    assert rate_limit_wait_s(headers(ratelimit='"b";r=3;t=9', retry_after="4"), NOW) == 4.0


# -- item 1 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "transfer", "expected"),
    [
        (None, None, None),
        ("identity", None, None),
        ("", None, None),
        ("gzip", None, ("Content-Encoding", "gzip")),
        ("br", None, ("Content-Encoding", "br")),
        ("identity, zstd", None, ("Content-Encoding", "identity, zstd")),
        ("GZIP", None, ("Content-Encoding", "GZIP")),
        (None, "chunked", None),
        (None, "gzip, chunked", ("Transfer-Encoding", "gzip, chunked")),
    ],
)
def test_encoding_header(
    content: str | None, transfer: str | None, expected: tuple[str, str] | None
) -> None:
    values = {}
    if content is not None:
        values["content_encoding"] = content
    if transfer is not None:
        values["transfer_encoding"] = transfer
    assert encoding_header(headers(**values)) == expected


def test_hop_words_name_origin_redirect_target_proxy_and_via() -> None:
    first = "https://models.example/m.gguf"
    assert hop_words(first, first, None, None) == "the origin models.example:443"
    cdn = "https://cdn.example:8443/x"
    assert hop_words(first, cdn, None, None) == (
        "the redirect target cdn.example:8443 (redirected from models.example:443)"
    )
    plain = "http://[::1]:8080/m"
    words = hop_words(plain, plain, "proxy.corp:3128", "1.1 squid\x07")
    assert words.startswith("the origin [::1]:8080 or the proxy proxy.corp:3128")
    assert words.endswith("Via: 1.1 squid?")  # control characters never printed
    assert "TLS-intercepting" in hop_words(first, first, "proxy.corp:3128", None)


def test_encoded_error_is_rejected_not_retried() -> None:
    err = encoded_error("https://h/m", ("Content-Encoding", "gzip"), "the origin h:443")
    assert err.reason is Reason.SOURCE_REJECTED and not err.transient and not err.retryable
    assert err.exit_code == 4 and err.remedy == REMEDY_ENCODED
    assert "Content-Encoding: gzip, sent by the origin h:443" in err.detail


# -- item 8 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "location",
    [
        "ftp://h/x",
        "FTPS://h:990/x",
        "gopher://h:70/x",
        "file:///etc/passwd",
        "data:text/plain,hi",
        "javascript:alert(1)",
        "ws://h/x",
        "hf://org/repo",
    ],
)
def test_only_http_and_https_redirects_are_followed(location: str) -> None:
    with pytest.raises(SourceError) as caught:
        next_hop("https://origin.example/m.gguf", location)
    err = caught.value
    assert err.reason is Reason.SOURCE_REJECTED and err.exit_code == 4
    assert err.remedy == REMEDY_REDIRECT_SCHEME
    assert "only http and https" in err.detail


def test_a_foreign_redirect_never_prints_its_credentials_or_query() -> None:
    with pytest.raises(SourceError) as caught:
        next_hop("https://o/m", "ftp://user:hunter2-secret@h/x?X-Amz-Signature=sig-secret")
    assert "hunter2" not in caught.value.detail and "sig-secret" not in caught.value.detail
    with pytest.raises(SourceError) as caught:
        next_hop("https://o/m", "data:application/octet-stream;base64,c2VjcmV0LXRva2Vu")
    assert "c2VjcmV0" not in caught.value.detail


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("/other", "https://origin.example/other"),
        ("https://u:p@cdn.example/x?sig=1", "https://cdn.example/x?sig=1"),
        ("http://plain.example/x", "http://plain.example/x"),
        ("  HTTPS://cdn.example/x ", "https://cdn.example/x"),
    ],
)
def test_http_redirects_are_followed_without_userinfo(location: str, expected: str) -> None:
    assert next_hop("https://origin.example/m.gguf", location) == expected


# -- the docs quote the remedies of #22 verbatim --------------------------------------------


@pytest.mark.parametrize(
    "remedy",
    [REMEDY_ENCODED, REMEDY_GATED, REMEDY_REDIRECT_SCHEME],
    ids=["encoded", "gated", "scheme"],
)
def test_the_runbook_quotes_the_cause_specific_remedy(remedy: str) -> None:
    root = Path(__file__).resolve().parents[2]
    runbook = " ".join((root / "docs" / "operations.md").read_text().split())
    assert " ".join(remedy.split()) in runbook
