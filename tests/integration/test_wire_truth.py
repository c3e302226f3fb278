"""#22 Wire truth, the data path's side: encoded bodies (item 1), rate-limit
headers (item 5) and redirects to other schemes (item 8), against the
loopback origin (real sockets; the origin encodes, chunks, redirects and
rate-limits the way transforming origins, CDNs and proxies do).

What must hold: bytes a `Content-Encoding` other than `identity` produced
are never written as the model (the agent asks for identity and refuses
anything else, naming the header and the hop that sent it); a rate-limit
window the origin announced is honoured, and when it is longer than the
agent may wait, no request is made inside it and the termination message
says how long it is; only http and https redirects are followed.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.harness.disk import partials, record_of, seed, shell_partial
from tests.harness.origin import Fault, Origin, encoded
from tests.harness.proxy import ForwardProxy
from tests.harness.sample import payload

PATH = "/files/model.gguf"
KIB = 1024
SIZE = 256 * KIB
HALF = SIZE // 2


def _gets(origin: Origin) -> list[int]:
    return [r.status for r in origin.requests(PATH, "GET")]


def _assert_nothing_published(pod) -> None:  # type: ignore[no-untyped-def]
    """No file, no size record, and no byte of the answer in a partial (an
    empty one, created before the request, is the sweep's)."""
    dest = pod.dest()
    assert not dest.exists()
    assert record_of(dest) is None
    assert set(partials(dest).values()) <= {0}, partials(dest)


# -- item 1: Content-Encoding ------------------------------------------------------------


@pytest.mark.parametrize("coding", ["gzip", "br", "deflate", "x-gzip, identity"])
def test_an_encoded_body_is_never_published_when_head_and_get_agree(origin, pod, coding) -> None:
    """Before: the gzip bytes were published, exit 0, with the encoded
    length as the size record (HEAD and GET both said it)."""
    data = payload(SIZE)
    origin.put(PATH, data)
    origin.set_fault(PATH, Fault(content_encoding=coding))

    run = pod.stage(pod.single_env(origin.url + PATH)).failed(
        "ModelSourceRejected", retryable=False
    )

    assert run.returncode == 4
    assert f"Content-Encoding: {coding}" in run.term["message"]
    assert f"the origin 127.0.0.1:{origin.port}" in run.term["message"]
    assert "identity" in run.term["remedy"]
    assert run.sleeps == []  # the same origin answers the same way: no retries
    _assert_nothing_published(pod)


def test_an_encoded_body_is_refused_when_head_is_refused(origin, pod) -> None:
    """HEAD answers 405, so nothing is known before the GET: the GET's own
    Content-Encoding decides, before a byte of it is written."""
    data = payload(SIZE)
    origin.put(PATH, data)
    origin.set_fault(PATH, Fault(content_encoding="gzip", head_status=405))

    run = pod.stage(pod.single_env(origin.url + PATH)).failed("ModelSourceRejected")

    assert _gets(origin) == [200]
    assert "Content-Encoding: gzip" in run.detail
    _assert_nothing_published(pod)


def test_a_chunked_encoded_body_is_refused(origin, pod) -> None:
    data = payload(SIZE)
    origin.put(PATH, data)
    origin.set_fault(PATH, Fault(content_encoding="gzip", chunked=True))

    run = pod.stage(pod.single_env(origin.url + PATH)).failed("ModelSourceRejected")

    assert "Content-Encoding: gzip" in run.detail
    _assert_nothing_published(pod)


def test_a_resumed_range_answered_encoded_never_touches_the_partial(origin, pod) -> None:
    """The probe (HEAD) is identity; the resume's 206 comes back gzip (a
    proxy compressing the GETs only). Ranges of an encoded body are ranges
    of the encoded bytes: never spliced into an identity partial."""
    data = payload(SIZE)
    origin.put(PATH, data, etag='"vA"')
    dest = pod.dest()
    seed(shell_partial(dest, SIZE, '"vA"'), data[:HALF], age_s=3600)
    origin.set_fault(PATH, Fault(content_encoding="gzip", methods=("GET",)))

    run = pod.stage(pod.single_env(origin.url + PATH)).failed("ModelSourceRejected")

    (get,) = origin.requests(PATH, "GET")
    assert get.headers["range"] == f"bytes={HALF}-" and get.status == 206
    assert "Content-Encoding: gzip" in run.detail
    assert not dest.exists() and record_of(dest) is None
    # The (adopted) partial still holds exactly the identity bytes it held.
    (name,) = partials(dest)
    assert (dest.parent / name).read_bytes() == data[:HALF]


def test_identity_spelled_out_is_the_file(origin, pod) -> None:
    data = payload(SIZE)
    origin.put(PATH, data)
    origin.set_fault(PATH, Fault(content_encoding="identity"))

    pod.stage(pod.single_env(origin.url + PATH)).ok()

    assert pod.dest().read_bytes() == data


def test_the_encoding_hop_is_the_redirect_target(origin, origin_b, pod) -> None:
    """The first origin redirects to a CDN that compresses: the message
    names the CDN (the redirect target), not the origin the user set."""
    data = payload(SIZE)
    origin_b.put(PATH, data)
    origin_b.set_fault(PATH, Fault(content_encoding="gzip", head_status=405))
    origin.set_fault(PATH, Fault(redirect_to=origin_b.url + PATH))

    run = pod.stage(pod.single_env(origin.url + PATH)).failed("ModelSourceRejected")

    message = run.term["message"]
    assert f"the redirect target 127.0.0.1:{origin_b.port}" in message, message
    assert f"redirected from 127.0.0.1:{origin.port}" in message, message
    _assert_nothing_published(pod)


def test_the_encoding_hop_through_an_http_proxy_names_the_proxy(origin, pod) -> None:
    """Plain http through a forward proxy: the proxy may have compressed
    it, and a Via header says a proxy was on the way."""
    data = payload(SIZE)
    origin.put(PATH, data)
    origin.set_fault(PATH, Fault(content_encoding="gzip", headers=(("Via", "1.1 edge-cache"),)))

    with ForwardProxy() as proxy:
        env = pod.single_env(origin.url + PATH, HTTP_PROXY=proxy.url, NO_PROXY="")
        run = pod.stage(env).failed("ModelSourceRejected")
        port = proxy.port
        assert [r.method for r in proxy.requests()] == ["HEAD"]

    message = run.term["message"]
    assert f"the proxy 127.0.0.1:{port}" in message, message
    assert "Via: 1.1 edge-cache" in message, message
    _assert_nothing_published(pod)


def test_the_origin_encoded_bytes_really_differ(origin) -> None:
    """The harness sends what it claims: real gzip bytes of another length."""
    data = payload(SIZE)
    assert len(encoded(data, "gzip")) != len(data)


# -- item 5: rate-limit headers ----------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        (("RateLimit", '"default";r=0;t=55'),),
        (("RateLimit", '"default";r=0;t=55'), ("RateLimit-Policy", '"default";q=100;w=60')),
        (("RateLimit", "limit=100, remaining=0, reset=55"),),
        (("X-RateLimit-Reset", "55"),),
        (("RateLimit-Reset", "55"),),
    ],
    ids=["ietf-structured", "with-policy", "draft-dictionary", "x-ratelimit-reset", "reset"],
)
@pytest.mark.parametrize("methods", [("GET", "HEAD"), ("GET",)], ids=["probe", "get"])
def test_a_window_longer_than_the_wait_cap_ends_at_once_and_says_how_long(
    origin, pod, headers, methods
) -> None:
    """Before (structured field): three requests with backoff inside the
    55 s window, then exit 1 with nothing saying how long to wait."""
    origin.put(PATH, payload(64 * KIB))
    origin.set_fault(PATH, Fault(status=429, headers=headers, methods=methods))

    run = pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_MAX_RETRY_WAIT="5")).failed(
        "ModelSourceRateLimited", retryable=True
    )

    assert [r.status for r in origin.requests()].count(429) == 1
    assert run.sleeps == []
    assert run.term["retryAfterSeconds"] == 55, run.term
    assert "55 s" in run.term["message"], run.term["message"]
    _assert_nothing_published(pod)


def test_an_epoch_x_ratelimit_reset_is_a_time_not_a_duration(origin, pod) -> None:
    origin.put(PATH, payload(64 * KIB))
    reset = int(time.time()) + 40
    origin.set_fault(PATH, Fault(status=429, headers=(("X-RateLimit-Reset", str(reset)),)))

    run = pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_MAX_RETRY_WAIT="5")).failed(
        "ModelSourceRateLimited"
    )

    assert len(origin.requests()) == 1
    assert 35 <= run.term["retryAfterSeconds"] <= 41, run.term


def test_a_short_structured_window_is_waited_out(origin, pod) -> None:
    data = payload(64 * KIB)
    origin.put(PATH, data)
    origin.set_fault(
        PATH, Fault(status=429, times=1, headers=(("RateLimit", '"default";r=0;t=3'),))
    )

    run = pod.stage(pod.single_env(origin.url + PATH)).ok()

    assert run.sleeps == [3.0]
    assert pod.dest().read_bytes() == data


def test_the_structured_window_outranks_a_shorter_retry_after(origin, pod) -> None:
    """huggingface_hub reads `RateLimit` (remaining 0) first: a Retry-After
    of 1 s next to a window of 4 s would be a request inside the window."""
    data = payload(64 * KIB)
    origin.put(PATH, data)
    fault = Fault(
        status=429, times=1, retry_after="1", headers=(("RateLimit", '"default";r=0;t=4'),)
    )
    origin.set_fault(PATH, fault)

    run = pod.stage(pod.single_env(origin.url + PATH)).ok()

    assert run.sleeps == [4.0]  # was [1.0]: the retry went into the window
    assert pod.dest().read_bytes() == data


def test_a_policy_with_quota_left_is_not_a_window(origin, pod) -> None:
    """`r=7`: that quota is not the exhausted one; the 429's Retry-After is."""
    data = payload(64 * KIB)
    origin.put(PATH, data)
    headers = (("RateLimit", '"burst";r=7;t=50'),)
    origin.set_fault(PATH, Fault(status=429, times=1, retry_after="2", headers=headers))

    run = pod.stage(pod.single_env(origin.url + PATH)).ok()

    assert run.sleeps == [2.0]


def test_retries_exhausted_inside_short_windows_still_say_the_window(origin, pod) -> None:
    origin.put(PATH, payload(64 * KIB))
    origin.set_fault(PATH, Fault(status=429, headers=(("RateLimit", '"default";r=0;t=2'),)))

    run = pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_RETRIES="2")).failed(
        "ModelSourceRateLimited"
    )

    assert run.sleeps == [2.0, 2.0]
    assert run.term["retryAfterSeconds"] == 2
    assert "2 s" in run.term["message"]


# -- item 8: redirects to other schemes --------------------------------------------------


@pytest.mark.parametrize("scheme", ["ftp", "gopher", "ftps", "file", "data"])
@pytest.mark.parametrize("methods", [("GET", "HEAD"), ("GET",)], ids=["probe", "get"])
def test_a_redirect_to_another_scheme_is_rejected_and_never_fetched(
    origin, origin_b, pod, scheme, methods
) -> None:
    """Before: ftp://, gopher:// and ftps:// were fetched as cleartext HTTP
    from that host and port (origin_b served the bytes, published, exit 0);
    file:/// was a retryable "could not resolve host"."""
    origin_b.put(PATH, payload(SIZE))
    target = {
        "file": "file:///etc/passwd",
        "data": "data:application/octet-stream;base64,AAAA",
    }.get(scheme, f"{scheme}://127.0.0.1:{origin_b.port}{PATH}")
    origin.put(PATH, payload(SIZE, 2))
    origin.set_fault(PATH, Fault(redirect_to=target, methods=methods))

    run = pod.stage(pod.single_env(origin.url + PATH)).failed(
        "ModelSourceRejected", retryable=False
    )

    assert run.returncode == 4
    assert origin_b.requests() == []
    assert f"{scheme}:" in run.term["message"]
    assert "only http and https" in run.term["message"]
    assert run.sleeps == []
    _assert_nothing_published(pod)


def test_https_to_http_redirect_without_a_token_is_still_followed(origin, origin_b, pod) -> None:
    """The scheme rule is about foreign schemes: http<->http across hosts
    stays as it was (the token rule is tested in test_http_failures)."""
    data = payload(SIZE)
    origin_b.put(PATH, data)
    origin.set_fault(PATH, Fault(redirect_to=origin_b.url + PATH))

    pod.stage(pod.single_env(origin.url + PATH)).ok()

    assert pod.dest().read_bytes() == data


def test_parallel_ranges_answered_encoded_are_refused(origin, pod) -> None:
    """A file large enough for ranged connections; the HEAD is identity, the
    ranged GETs come back `br` (a proxy compressing 206s): every worker's
    answer is refused, nothing is written, no range is retried."""
    big = payload(66 * 1024 * KIB)  # two workers of two 16 MiB items each, at once
    origin.put(PATH, big)
    origin.set_fault(PATH, Fault(content_encoding="br", methods=("GET",)))
    env = pod.single_env(origin.url + PATH, LLMKUBE_CONNECTIONS="2", LLMKUBE_DIRECT_IO="off")

    run = pod.stage(env).failed("ModelSourceRejected")

    gets = origin.requests(PATH, "GET")
    assert gets and all(r.headers.get("range") for r in gets), gets
    assert len(gets) <= 2  # one per connection at most: a refusal is not retried
    assert run.sleeps == []
    dest = pod.dest()
    assert not dest.exists() and record_of(dest) is None
    # The sparse data file holds no byte (no block allocated) and its
    # journal claims no range.
    for name in partials(dest):
        path = dest.parent / name
        if name.endswith(".llmkube-journal.tmp"):
            assert json.loads(path.read_text())["done"] == [], path.read_text()
        else:
            assert path.stat().st_blocks == 0, name
