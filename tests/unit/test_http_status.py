"""sources.wire.status: status classification, header math and the HF auth origin rule."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable

import pytest

from llmkube_stager.errors import Reason
from llmkube_stager.sources.wire.ratelimit import rate_limit_wait_s, retry_after_s
from llmkube_stager.sources.wire.status import (
    AuthPolicy,
    Origin,
    content_length,
    is_hf_auth_origin,
    parse_content_range,
    parse_unsatisfied_range,
    status_error,
)

WHERE = "GET https://huggingface.co/org/repo/resolve/main/model.safetensors"


def headers(**values: str) -> Callable[[str], str | None]:
    """A case-insensitive header getter, like the probe's and the data path's."""
    table = {k.replace("_", "-").lower(): v for k, v in values.items()}
    return lambda name: table.get(name.lower())


NO_HEADERS = headers()


# --- status_error --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "reason", "transient"),
    [
        (401, Reason.SOURCE_UNAUTHORIZED, False),
        (403, Reason.SOURCE_UNAUTHORIZED, False),
        (404, Reason.SOURCE_NOT_FOUND, False),
        (410, Reason.SOURCE_NOT_FOUND, False),
        (429, Reason.SOURCE_RATE_LIMITED, True),
        (500, Reason.SOURCE_UNAVAILABLE, True),
        (502, Reason.SOURCE_UNAVAILABLE, True),
        (503, Reason.SOURCE_UNAVAILABLE, True),
        (504, Reason.SOURCE_UNAVAILABLE, True),
        (599, Reason.SOURCE_UNAVAILABLE, True),
        (400, Reason.SOURCE_REJECTED, False),
        (405, Reason.SOURCE_REJECTED, False),
        (416, Reason.SOURCE_REJECTED, False),
        (418, Reason.SOURCE_REJECTED, False),
        (451, Reason.SOURCE_REJECTED, False),
    ],
)
def test_status_classification(status: int, reason: Reason, transient: bool) -> None:
    err = status_error(status, NO_HEADERS, WHERE)
    assert err.reason is reason
    assert err.transient is transient
    assert err.answered is True  # an answering origin is never "unreachable"
    assert str(status) in err.detail
    assert WHERE in err.detail


def test_transient_statuses_are_retryable_reasons() -> None:
    assert status_error(429, NO_HEADERS, WHERE).retryable is True
    assert status_error(503, NO_HEADERS, WHERE).retryable is True
    assert status_error(404, NO_HEADERS, WHERE).retryable is False
    assert status_error(403, NO_HEADERS, WHERE).retryable is False


def test_429_with_retry_after_seconds() -> None:
    err = status_error(429, headers(retry_after="7"), WHERE)
    assert err.reason is Reason.SOURCE_RATE_LIMITED
    assert err.retry_after_s == 7.0


def test_429_with_retry_after_http_date() -> None:
    when = email.utils.formatdate(time.time() + 3600, usegmt=True)
    err = status_error(429, headers(retry_after=when), WHERE)
    assert err.retry_after_s is not None
    assert 3500 < err.retry_after_s <= 3600


def test_429_without_retry_after_uses_the_ratelimit_reset_hint() -> None:
    assert status_error(429, headers(ratelimit_reset="42"), WHERE).retry_after_s == 42.0
    assert status_error(429, NO_HEADERS, WHERE).retry_after_s is None


def test_503_with_retry_after() -> None:
    assert status_error(503, headers(retry_after="3"), WHERE).retry_after_s == 3.0
    assert status_error(503, NO_HEADERS, WHERE).retry_after_s is None


# --- Retry-After and rate-limit hints ------------------------------------------------------------

NOW = email.utils.parsedate_to_datetime("Wed, 21 Oct 2015 07:28:00 GMT").timestamp()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0.0),
        ("7", 7.0),
        (" 120 ", 120.0),
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("Wed, 21 Oct 2015 08:28:00 GMT", 3600.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),  # in the past: retry now
        ("Wednesday, 21-Oct-15 07:28:10 GMT", 10.0),  # RFC 850 form
        (None, None),
        ("", None),
        ("soon", None),
        ("-3", None),
        ("1.5", None),
    ],
)
def test_retry_after(value: str | None, expected: float | None) -> None:
    assert retry_after_s(value, now_s=NOW) == expected


def test_rate_limit_wait_prefers_retry_after() -> None:
    get = headers(retry_after="5", ratelimit_reset="50", x_ratelimit_reset="500")
    assert rate_limit_wait_s(get) == 5.0


def test_rate_limit_wait_reset_headers() -> None:
    assert rate_limit_wait_s(headers(ratelimit_reset="50")) == 50.0
    assert rate_limit_wait_s(headers(x_ratelimit_reset="60")) == 60.0
    assert rate_limit_wait_s(headers(ratelimit_reset="soon")) is None
    assert rate_limit_wait_s(NO_HEADERS) is None


# --- Content-Length and ranges -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("0", None),  # CL0 is "unavailable", never authoritative (spec §8.1)
        ("", None),
        ("80000", 80000),
        (" 80000 ", 80000),
        ("-1", None),
        ("12abc", None),
        ("1.5", None),
    ],
)
def test_content_length(value: str | None, expected: int | None) -> None:
    get = NO_HEADERS if value is None else headers(content_length=value)
    assert content_length(get) == expected


@pytest.mark.parametrize("header", ["content-length", "retry-after", "ratelimit-reset"])
def test_non_ascii_digits_in_headers_are_ignored_not_a_crash(header: str) -> None:
    get = headers(**{header.replace("-", "_"): "²"})
    assert content_length(get) is None
    assert rate_limit_wait_s(get) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("bytes 0-99/200", (0, 99, 200)),
        ("bytes 100-199/200", (100, 199, 200)),
        ("bytes 100-199/*", (100, 199, None)),
        ("  bytes 5-9/10 ", (5, 9, 10)),
        ("bytes */200", None),
        ("bytes 0-99", None),
        ("items 0-99/200", None),
        ("bytes=0-99/200", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_content_range(
    value: str | None, expected: tuple[int, int, int | None] | None
) -> None:
    assert parse_content_range(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("bytes */12345", 12345),
        (" bytes */0 ", 0),
        ("bytes 0-1/2", None),
        ("bytes */*", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_unsatisfied_range(value: str | None, expected: int | None) -> None:
    assert parse_unsatisfied_range(value) == expected


# --- Origin and the HF auth rule (spec §3.2, scenario 90) ----------------------------------------


def test_origin_defaults_ports_and_folds_case() -> None:
    assert Origin.of("https://HuggingFace.CO/org/repo") == Origin("https", "huggingface.co", 443)
    assert Origin.of("HTTP://Host.Example/x") == Origin("http", "host.example", 80)
    assert Origin.of("https://h:8443/x") == Origin("https", "h", 8443)
    assert Origin.of("https://huggingface.co:443/x") == Origin.of("https://huggingface.co/y")


@pytest.mark.parametrize(
    "url",
    [
        "https://huggingface.co/org/repo/resolve/main/config.json",
        "https://www.huggingface.co/org/repo/resolve/main/config.json",
        "https://HUGGINGFACE.CO/org/repo",
        "https://Www.HuggingFace.co/org/repo",
        "https://huggingface.co:443/org/repo",
    ],
)
def test_hf_hosts_get_the_token(url: str) -> None:
    assert is_hf_auth_origin(Origin.of(url), "") is True


@pytest.mark.parametrize(
    "url",
    [
        "https://huggingface.co.evil.example/org/repo",
        "https://nothuggingface.co/org/repo",
        "https://evilhuggingface.co/org/repo",
        "https://huggingface.com/org/repo",
        "https://cdn-lfs.huggingface.co/repos/xx",
        "https://api.huggingface.co.attacker.net/x",
        "http://huggingface.co/org/repo",  # plain http: the token would travel in clear
        "https://huggingface.co@evil.example/org/repo",  # userinfo trick
        "https://evil.example/huggingface.co/org/repo",
        "https://evil.example/?u=https://huggingface.co",
        "s3://huggingface.co/key",
    ],
)
def test_lookalikes_get_no_token(url: str) -> None:
    assert is_hf_auth_origin(Origin.of(url), "") is False


@pytest.mark.parametrize(
    ("endpoint", "url", "expected"),
    [
        ("https://mirror.example", "https://mirror.example/org/repo", True),
        ("https://mirror.example\n", "https://mirror.example/org/repo", True),
        ("  https://mirror.example/  \n", "https://mirror.example/org/repo", True),
        ("https://mirror.example", "https://MIRROR.example:443/org/repo", True),
        ("http://mirror.internal:8080", "http://mirror.internal:8080/org/repo", True),
        ("https://mirror.example:8443", "https://mirror.example:8443/x", True),
        ("https://mirror.example:8443", "https://mirror.example/x", False),
        ("https://mirror.example", "https://mirror.example:8443/x", False),
        ("https://mirror.example", "http://mirror.example/x", False),
        ("http://mirror.internal:8080", "https://mirror.internal:8080/x", False),
        ("https://mirror.example", "https://mirror.example.evil/x", False),
        ("https://mirror.example", "https://sub.mirror.example/x", False),
        ("", "https://mirror.example/x", False),
    ],
)
def test_hf_endpoint_exact_scheme_host_port(endpoint: str, url: str, expected: bool) -> None:
    assert is_hf_auth_origin(Origin.of(url), endpoint) is expected


# --- AuthPolicy ----------------------------------------------------------------------------------

HF_FILE = "https://huggingface.co/org/repo/resolve/main/model.safetensors"
CDN = "https://cdn-lfs.huggingface.co/repos/ab/cd/0123?X-Amz-Signature=x"


def test_token_sent_to_the_hf_host() -> None:
    policy = AuthPolicy(token="hf_tok", hf_endpoint="")
    assert policy.headers_for(HF_FILE, HF_FILE) == {"Authorization": "Bearer hf_tok"}


@pytest.mark.parametrize(
    "redirect",
    [
        CDN,
        "https://cas-bridge.xethub.hf.co/xet-bridge-us/abc",
        "https://www.huggingface.co/org/repo/resolve/main/model.safetensors",
        "http://huggingface.co/org/repo/resolve/main/model.safetensors",
        "https://huggingface.co:8443/org/repo/resolve/main/model.safetensors",
        "https://mirror.example/org/repo",
    ],
)
def test_token_never_follows_a_redirect_to_another_origin(redirect: str) -> None:
    policy = AuthPolicy(token="hf_tok", hf_endpoint="https://mirror.example")
    assert policy.headers_for(redirect, HF_FILE) == {}


def test_token_sent_again_when_a_redirect_stays_on_the_first_origin() -> None:
    policy = AuthPolicy(token="hf_tok", hf_endpoint="")
    moved = "https://huggingface.co/org/repo/resolve/0123abc/model.safetensors"
    assert policy.headers_for(moved, HF_FILE) == {"Authorization": "Bearer hf_tok"}


def test_no_token_for_a_non_hf_first_url_even_on_the_same_origin() -> None:
    policy = AuthPolicy(token="hf_tok", hf_endpoint="")
    url = "https://models.example/model.gguf"
    assert policy.headers_for(url, url) == {}


def test_lookalike_first_url_gets_no_token() -> None:
    policy = AuthPolicy(token="hf_tok", hf_endpoint="")
    url = "https://huggingface.co.evil.example/org/repo/resolve/main/x"
    assert policy.headers_for(url, url) == {}


def test_mirror_endpoint_with_trailing_newline_gets_the_token() -> None:
    policy = AuthPolicy(token="hf_tok", hf_endpoint="https://mirror.internal:8443\n")
    url = "https://mirror.internal:8443/org/repo/resolve/main/model.safetensors"
    assert policy.headers_for(url, url) == {"Authorization": "Bearer hf_tok"}
    assert policy.headers_for("https://cdn.internal/blob", url) == {}


@pytest.mark.parametrize("url", [HF_FILE, "https://mirror.example/x"])
def test_nothing_sent_without_a_token(url: str) -> None:
    policy = AuthPolicy(token="", hf_endpoint="https://mirror.example")
    assert policy.headers_for(url, url) == {}
