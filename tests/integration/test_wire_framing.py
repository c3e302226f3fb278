"""#29 item 3: framing taken for the body.

`Transfer-Encoding: chunked ` (a trailing space), `identity, chunked`, or
`identity` and `chunked` on two lines: the body is chunked (curl decodes
it), but http.client takes only a value that is exactly `chunked` for
chunked framing and otherwise reads the chunk framing (`40000\\r\\n...`)
as body bytes, by the Content-Length beside it or until the connection
closes. The agent used to count those values as framing http.client
removes: the framing was published as the model, exit 0.

What must hold, on the single stream, the resume and every parallel range:
a body whose Transfer-Encoding ends in one `chunked` after `identity`s is
decoded (the bytes on disk are the file's); any other Transfer-Encoding
(`chunked` twice, `chunked` not last) is refused, nothing written; on the
HEAD too, before any GET.

The origin is the suite's raw-socket origin (tests/harness/rawhttp.py):
it writes exactly the header lines and the chunk framing it is told to.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.harness.disk import partials, record_of, seed, shell_partial
from tests.harness.pod import Pod
from tests.harness.rawhttp import RawOrigin, Reply, Request, serve
from tests.harness.sample import payload

PATH = "/files/model.gguf"
KIB = 1024
MIB = 1024 * KIB
SIZE = 3 * 256 * KIB + 123  # several chunks of the raw origin's 256 KiB pieces
HALF = SIZE // 2
ETAG = '"v1"'

# Chunked, as curl reads it; http.client's `tr_enc.lower() == "chunked"` says no.
DECODABLE = {
    "trailing-space": ("chunked ",),
    "identity-first": ("identity, chunked",),
    "two-lines": ("identity", "chunked"),
    "tab": ("chunked\t",),
    "folded": ("\r\n chunked",),  # obs-fold: the value on a continuation line
}
# No client can tell where such a body ends (curl 7.88 decodes one layer of
# chunks: right only if the sender chunked once).
UNDECODABLE = {
    "chunked-twice": ("chunked, chunked",),
    "chunked-twice-two-lines": ("chunked", "chunked"),
    "chunked-not-last": ("chunked, identity",),
}


def _chunked(reply: Reply, lines: tuple[str, ...], with_length: bool) -> Reply:
    """The same answer with its body in chunks under `lines`; with a
    Content-Length of the body's own length beside them (the value that
    made http.client read exactly that many bytes of framing)."""
    reply.framing = "chunked"
    reply.transfer_encoding = lines
    reply.declared = len(reply.body) if with_length else None
    return reply


def _script(data: bytes, lines: tuple[str, ...], with_length: bool, on_head: bool = False):
    def script(request: Request) -> Reply:
        reply = serve(request, data, ETAG)
        if request.method == "HEAD" and not on_head:
            return reply
        return _chunked(reply, lines, with_length)

    return script


def _assert_nothing_published(dest: Path) -> None:
    assert not dest.exists()
    assert record_of(dest) is None
    assert set(partials(dest).values()) <= {0}, partials(dest)


@pytest.mark.parametrize("with_length", [True, False], ids=["with-length", "no-length"])
@pytest.mark.parametrize("lines", DECODABLE.values(), ids=DECODABLE.keys())
def test_chunked_framing_http_client_does_not_take_is_decoded(
    pod: Pod, lines: tuple[str, ...], with_length: bool
) -> None:
    """Before (with-length): the chunk framing was published, exit 0; (no
    length): a size mismatch where curl saves the file."""
    data = payload(SIZE, 31)
    with RawOrigin(_script(data, lines, with_length)) as origin:
        pod.stage(pod.single_env(origin.url + PATH)).ok()
        assert [s.status for s in origin.requests("GET")] == [200]
    assert pod.dest().read_bytes() == data


@pytest.mark.parametrize("lines", UNDECODABLE.values(), ids=UNDECODABLE.keys())
def test_framing_no_client_can_end_is_refused_on_the_get(pod: Pod, lines: tuple[str, ...]) -> None:
    """Before: counted as framing http.client removes; the framing (or the
    bytes up to the Content-Length) went into the file, exit 0."""
    data = payload(SIZE, 32)
    with RawOrigin(_script(data, lines, with_length=True)) as origin:
        run = pod.stage(pod.single_env(origin.url + PATH)).failed(
            "ModelSourceRejected", retryable=False
        )
        gets = origin.requests("GET")
    assert len(gets) == 1 and run.sleeps == []  # the same origin answers the same way
    assert "Transfer-Encoding" in run.term["message"], run.term["message"]
    _assert_nothing_published(pod.dest())


@pytest.mark.parametrize("lines", UNDECODABLE.values(), ids=UNDECODABLE.keys())
def test_framing_no_client_can_end_is_refused_on_the_head(pod: Pod, lines: tuple[str, ...]) -> None:
    """HEAD and GET agree: refused before any GET."""
    data = payload(SIZE, 33)
    with RawOrigin(_script(data, lines, with_length=True, on_head=True)) as origin:
        run = pod.stage(pod.single_env(origin.url + PATH)).failed("ModelSourceRejected")
        assert origin.requests("GET") == []
    assert "Transfer-Encoding" in run.term["message"]
    _assert_nothing_published(pod.dest())


@pytest.mark.parametrize("lines", DECODABLE.values(), ids=DECODABLE.keys())
def test_a_resumed_range_in_chunks_is_decoded(pod: Pod, lines: tuple[str, ...]) -> None:
    """The partial holds the first half; the 206 of the rest comes chunked
    under a value http.client does not take, with the range's length as
    Content-Length. Before: the framing was spliced after the half, exit 0."""
    data = payload(SIZE, 34)
    dest = pod.dest()
    seed(shell_partial(dest, SIZE, ETAG), data[:HALF], age_s=3600)
    with RawOrigin(_script(data, lines, with_length=True)) as origin:
        pod.stage(pod.single_env(origin.url + PATH)).ok()
        (get,) = origin.requests("GET")
    assert get.request.headers["range"] == f"bytes={HALF}-" and get.status == 206
    assert dest.read_bytes() == data


@pytest.mark.parametrize("lines", UNDECODABLE.values(), ids=UNDECODABLE.keys())
def test_a_resumed_range_no_client_can_end_never_touches_the_partial(
    pod: Pod, lines: tuple[str, ...]
) -> None:
    data = payload(SIZE, 35)
    dest = pod.dest()
    seed(shell_partial(dest, SIZE, ETAG), data[:HALF], age_s=3600)
    with RawOrigin(_script(data, lines, with_length=True)) as origin:
        pod.stage(pod.single_env(origin.url + PATH)).failed("ModelSourceRejected")
    assert not dest.exists() and record_of(dest) is None
    (name,) = partials(dest)
    assert (dest.parent / name).read_bytes() == data[:HALF]


BIG = 66 * MIB  # through the page cache, two workers of two 16 MiB items each


def _parallel_env(pod: Pod, url: str, **extra: str) -> dict[str, str]:
    return pod.single_env(url, LLMKUBE_CONNECTIONS="2", LLMKUBE_DIRECT_IO="off", **extra)


@pytest.mark.parametrize("pinned", [False, True], ids=["unpinned", "pinned"])
def test_parallel_ranges_in_chunks_are_decoded(pod: Pod, pinned: bool) -> None:
    """Every ranged GET is answered in chunks under `chunked `, with the
    range's length as Content-Length. Before: each range's first bytes of
    framing were written as the range (unpinned: published, exit 0)."""
    data = payload(BIG, 36)
    extra = {"MODEL_SHA256": hashlib.sha256(data).hexdigest()} if pinned else {}
    with RawOrigin(_script(data, ("chunked ",), with_length=True)) as origin:
        pod.stage(_parallel_env(pod, origin.url + PATH, **extra)).ok()
        gets = origin.requests("GET")
    assert len(gets) >= 2 and all(g.request.headers.get("range") for g in gets), gets
    assert pod.dest().read_bytes() == data


def test_parallel_ranges_no_client_can_end_are_refused(pod: Pod) -> None:
    data = payload(BIG, 37)
    with RawOrigin(_script(data, ("chunked, chunked",), with_length=True)) as origin:
        run = pod.stage(_parallel_env(pod, origin.url + PATH)).failed("ModelSourceRejected")
        gets = origin.requests("GET")
    assert gets and all(g.request.headers.get("range") for g in gets), gets
    assert len(gets) <= 2 and run.sleeps == []
    dest = pod.dest()
    assert not dest.exists() and record_of(dest) is None
    for name in partials(dest):
        path = dest.parent / name
        if name.endswith(".llmkube-journal.tmp"):
            assert json.loads(path.read_text())["done"] == [], path.read_text()
        else:
            assert path.stat().st_blocks == 0, name


@pytest.mark.parametrize("lines", DECODABLE.values(), ids=DECODABLE.keys())
def test_a_redirect_in_chunks_leaves_the_connection_clean(pod: Pod, lines: tuple[str, ...]) -> None:
    """A 302 whose small body comes in chunks under a spelling http.client
    does not take, with a Content-Length beside it: its drain must read the
    chunks, or the rest of them is taken for the next answer on the kept-alive
    connection. Before: the next answer misread, every attempt again
    (GETs 302, 200, 302, 200, 302, 200)."""
    data = payload(SIZE, 38)

    def script(request: Request) -> Reply:
        if request.method == "HEAD":
            return Reply(405)  # the GET itself meets the redirect
        if request.path == "/start":
            reply = Reply(302, [("Location", PATH)], b"moved " * 7000)
            return _chunked(reply, lines, with_length=True)
        return serve(request, data, ETAG)

    with RawOrigin(script) as origin:
        run = pod.stage(pod.single_env(origin.url + "/start")).ok()
        assert [s.status for s in origin.requests("GET")] == [302, 200]
    assert run.sleeps == [], run.stderr
    assert not [w for w in run.warnings if "BadStatusLine" in w], run.warnings
    assert pod.dest().read_bytes() == data


def test_a_redirect_no_client_can_end_is_never_read_nor_its_connection_reused(pod: Pod) -> None:
    """A 302 under `chunked, chunked` with `Content-Length: 0` and chunks
    after it: by its Content-Length it has no body, by its Transfer-Encoding
    it runs to the close. Its connection is closed, never reused: the
    redirect target is asked on a fresh one."""
    data = payload(SIZE, 39)

    def script(request: Request) -> Reply:
        if request.method == "HEAD":
            return Reply(405)
        if request.path == "/start":
            reply = Reply(302, [("Location", PATH)], b"moved " * 7000)
            reply = _chunked(reply, ("chunked, chunked",), with_length=False)
            reply.declared = 0
            return reply
        return serve(request, data, ETAG)

    with RawOrigin(script) as origin:
        run = pod.stage(pod.single_env(origin.url + "/start")).ok()
        assert [s.status for s in origin.requests("GET")] == [302, 200]
    assert run.sleeps == [], run.stderr
    assert pod.dest().read_bytes() == data
