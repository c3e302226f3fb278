"""The bulk-byte data path: GET (and HEAD) over the pool's connections
(connection.py), stdlib `http.client` reading with `readinto` into the
caller's reusable buffers.

Why not httpx here: on this 2-core class of machine a plain httpx streaming
loop moves ~264 MB/s against curl's ~795 MB/s, while `http.client.readinto`
reaches ~580 MB/s before any tuning (#2's measurements); the per-chunk
object churn of httpx is the cost. httpx stays on the control path (probe).
Network exceptions are translated into `SourceError` as they happen
(errors.py); redirects are followed by hand, auth re-decided per hop.
"""

from __future__ import annotations

import http.client

from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.logs import display_url
from llmkube_stager.sources.base import RangeUnusable
from llmkube_stager.sources.wire.bounded import AbsurdNumber
from llmkube_stager.sources.wire.coding import (
    NO_PROOF,
    CodingProof,
    HeaderGet,
    chunked_framing,
    encoded_error,
    encoding_header,
    hop_words,
    transfer_codings,
    unproven,
)
from llmkube_stager.sources.wire.connection import ConnectionPool
from llmkube_stager.sources.wire.errors import translate_network_error
from llmkube_stager.sources.wire.status import (
    MAX_REDIRECTS,
    REDIRECT_STATUSES,
    Authorizer,
    Origin,
    next_hop,
    parse_content_range,
    parse_length,
    parse_unsatisfied_range,
    status_error,
)

_DRAIN_LIMIT_BYTES = 64 * 1024
_STALE_ERRORS = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class WireBody:
    """A response body being received; see `sources.base.Body`."""

    copy_into = None  # bytes pass through user space (hashed, counted)

    def __init__(
        self,
        pool: ConnectionPool,
        url: str,
        conn: http.client.HTTPConnection,
        resp: http.client.HTTPResponse,
    ) -> None:
        self._pool = pool
        self._conn = conn
        self._resp = resp
        self.response = resp
        # Where the bytes come from: the connection's origin, and its name
        # in an error (the URL shown without its query or userinfo).
        self._origin = Origin.of(url)
        self._where = display_url(url)
        self.start = 0
        self.total_bytes: int | None = None
        self.complete = False
        self.etag: str | None = resp.getheader("etag")
        self.last_modified: str | None = resp.getheader("last-modified")
        self.framed = bool(resp.chunked) or resp.length is not None
        # Bytes still due by Content-Length (None: chunked or close-delimited).
        self._remaining = None if resp.chunked else resp.length
        self._pending: SourceError | None = None

    def readinto(self, buffer: memoryview) -> int:
        """Fill as much of `buffer` as the socket gives, one recv at a time,
        so that a stall after some bytes returns those bytes first and
        raises on the next call (a timeout inside a buffered `readinto`
        would lose them)."""
        if self._pending is not None:
            raise self._pending
        if self._resp.chunked or self._resp.fp is None:
            return self._read_via_http_client(buffer)
        filled = 0
        while filled < len(buffer) and self._remaining != 0:
            limit = len(buffer) if self._remaining is None else filled + self._remaining
            try:
                n = self._resp.fp.readinto1(buffer[filled : min(len(buffer), limit)])
            except (OSError, http.client.HTTPException) as exc:
                error = translate_network_error(exc, self._where, "receive", self._origin)
                if not filled:
                    raise error from exc
                self._pending = error
                return filled
            if not n:
                break
            filled += n
            if self._remaining is not None:
                self._remaining -= n
        if self._remaining == 0:
            self._resp.close()  # body done: the connection may be reused
        return filled

    def _read_via_http_client(self, buffer: memoryview) -> int:
        try:
            return self._resp.readinto(buffer)
        except (OSError, http.client.HTTPException) as exc:
            raise translate_network_error(exc, self._where, "receive", self._origin) from exc

    def close(self) -> None:
        if self._resp.isclosed() and not self._resp.will_close:
            self._pool.give_back(self._origin, self._conn)
            return
        self._resp.close()
        self._conn.close()


def _request(
    pool: ConnectionPool, method: str, url: str, headers: dict[str, str]
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    origin = Origin.of(url)
    target, proxy_headers = pool.request_form(url)
    for attempt in range(2):
        # The retry takes a new connection: the next idle one may be dead
        # too (a proxy that closes kept-alive connections; it flaked so).
        conn, reused = pool.take(origin, fresh=attempt > 0)
        try:
            conn.request(method, target, headers={**headers, **proxy_headers})
            resp = conn.getresponse()
            _decode_chunks(resp, method)
            if pool.log is not None and pool.log.debugging:
                from llmkube_stager.sources.wire.trace import trace_exchange

                trace_exchange(pool.log, method, url, headers, resp)
            return conn, resp
        except _STALE_ERRORS as exc:
            conn.close()
            # A kept-alive connection the server already closed: retry once
            # at once on a fresh one (GET/HEAD are idempotent).
            if not reused:
                raise translate_network_error(exc, display_url(url), "request", origin) from exc
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise translate_network_error(exc, display_url(url), "request", origin) from exc
    raise AssertionError("unreachable")


# Answers without a body whatever their headers say (RFC 9112 §6.3).
_BODILESS_STATUSES = frozenset({204, 304})


def _decode_chunks(resp: http.client.HTTPResponse, method: str) -> None:
    """#29 item 3: http.client decodes chunks only under a Transfer-Encoding
    that is exactly `chunked`, and otherwise reads the chunk framing as
    body bytes (by the Content-Length beside it, or until the connection
    closes). Where the header says chunked in another spelling (`chunked `,
    `identity, chunked`, two lines), make it decode them, as curl does: its
    own chunk reader then frames the body, and Content-Length is ignored
    (RFC 9112 §6.1). A value no client can frame by is refused before any
    byte is read (`encoding_header`; `_drain_and_release` never reads it)."""
    if method == "HEAD" or resp.status in _BODILESS_STATUSES or resp.status < 200:
        return
    value = resp.getheader("transfer-encoding")
    if resp.chunked or not transfer_codings(value):
        return
    if chunked_framing(value):
        resp.chunked, resp.chunk_left, resp.length = True, None, None
    else:
        # No end to read by (a Content-Length beside it is none, RFC 9112
        # §6.3): never read, never reused (`_framed_by_client`).
        resp.length, resp.will_close = None, True


def _framed_by_client(resp: http.client.HTTPResponse) -> bool:
    """http.client reads this body to its true end: none (HEAD, 204, 304:
    `_decode_chunks` left their length at 0), chunks it decodes, or no
    Transfer-Encoding coding at all."""
    if resp.chunked or resp.length == 0:
        return True
    return not transfer_codings(resp.getheader("transfer-encoding"))


def _drain_and_release(
    pool: ConnectionPool, url: str, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse
) -> None:
    """Read a small error/redirect body so the connection can be reused;
    one whose end the client cannot find (#29 item 3) is never read, its
    connection closed."""
    if not _framed_by_client(resp):
        conn.close()
        return
    try:
        resp.read(_DRAIN_LIMIT_BYTES)
    except (OSError, http.client.HTTPException):
        conn.close()
        return
    if resp.isclosed() and not resp.will_close:
        pool.give_back(Origin.of(url), conn)
    else:
        conn.close()


def open_get(
    pool: ConnectionPool,
    url: str,
    headers: dict[str, str],
    auth: Authorizer,
    offset: int,
    end: int | None = None,
    asked_url: str | None = None,
    proof: CodingProof = NO_PROOF,
) -> WireBody:
    """GET with redirects followed by hand (auth re-decided per hop) and the
    response status turned into a body or a SourceError. `asked_url`: where
    the file was first asked for (before a probe's redirects), to name the
    hop of an encoded answer; `proof`: what proves a Content-Encoding
    harmless (#29 item 11)."""
    first_url = url
    for _ in range(MAX_REDIRECTS + 1):
        conn, resp = _request(pool, "GET", url, {**headers, **auth.headers_for(url, first_url)})
        if resp.status in REDIRECT_STATUSES:
            location = resp.getheader("location")
            _drain_and_release(pool, url, conn, resp)
            if not location:
                raise SourceError(
                    f"{display_url(url)} redirected without a Location",
                    reason=Reason.SOURCE_REJECTED,
                    answered=True,
                )
            url = next_hop(url, location)
            continue
        return _body_for(pool, url, conn, resp, (offset, end), asked_url or first_url, proof)
    raise SourceError(
        f"too many redirects from {display_url(first_url)}",
        reason=Reason.SOURCE_REJECTED,
        answered=True,
    )


def head(
    pool: ConnectionPool,
    url: str,
    headers: dict[str, str],
    auth: Authorizer,
    proof: CodingProof = NO_PROOF,
) -> tuple[str, int, dict[str, str]]:
    """HEAD with redirects followed by hand, as `open_get` does: (the final
    URL, its status, its headers with lowercase names). On the connections
    the bodies use: a probe per file of a many-file model costs 0.17 ms of
    CPU here, against 0.8 ms through httpx (#16)."""
    first_url = url
    for _ in range(MAX_REDIRECTS + 1):
        conn, resp = _request(pool, "HEAD", url, {**headers, **auth.headers_for(url, first_url)})
        _drain_and_release(pool, url, conn, resp)  # a HEAD has no body
        answer = _joined(resp.getheaders())
        location = answer.get("location")
        if resp.status in REDIRECT_STATUSES and location:
            url = next_hop(url, location)
            continue
        if 200 <= resp.status < 300:
            # HEAD and GET agree on an encoded answer: refused before any GET.
            _refuse_encoded(pool, first_url, url, answer.get, proof)
        return url, resp.status, answer
    raise SourceError(
        f"too many redirects from {display_url(first_url)}",
        reason=Reason.SOURCE_REJECTED,
        answered=True,
    )


# Headers whose every line counts (#29 item 3: a second `Transfer-Encoding:
# chunked` line, a second `Content-Encoding` after `identity`, a second
# Content-Length), joined as getheader joins them.
_JOINED = frozenset({"transfer-encoding", "content-encoding", "content-length"})


def _joined(headers: list[tuple[str, str]]) -> dict[str, str]:
    """Header lines by lowercase name: the last of a repeated name, or for
    the names of _JOINED, its values joined with ", " (RFC 9110 §5.3)."""
    joined: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        if key in _JOINED and key in joined:
            value = f"{joined[key]}, {value}"
        joined[key] = value
    return joined


def _refuse_encoded(
    pool: ConnectionPool, asked_url: str, url: str, get: HeaderGet, proof: CodingProof
) -> None:
    """#22 item 1: a body under a content coding is not the file; #29 item
    11: unless the coding names no transformation, or `proof` shows it
    changed nothing."""
    header = encoding_header(unproven(get, proof))
    if header is None:
        return
    proxy = pool.proxy_for(Origin.of(url))
    who = hop_words(asked_url, url, proxy.display if proxy else None, get("via"))
    raise encoded_error(display_url(url), header, who)


def _body_for(
    pool: ConnectionPool,
    url: str,
    conn: http.client.HTTPConnection,
    resp: http.client.HTTPResponse,
    asked: tuple[int, int | None],
    asked_url: str,
    proof: CodingProof,
) -> WireBody:
    where = display_url(url)
    body = WireBody(pool, url, conn, resp)
    try:
        if resp.status in (200, 206):
            return _framed_body(pool, url, body, asked, asked_url, proof)
        if resp.status == 416:
            body.complete = True
            body.total_bytes = parse_unsatisfied_range(resp.getheader("content-range"))
    except AbsurdNumber as err:
        body.close()  # unread: never reused
        raise err.at(where) from None  # #29 item 8
    except (SourceError, RangeUnusable):
        body.close()
        raise
    if resp.status == 416:
        _drain_and_release(pool, url, conn, resp)
        return body
    error = status_error(resp.status, resp.getheader, where)
    _drain_and_release(pool, url, conn, resp)
    raise error


def _framed_body(
    pool: ConnectionPool,
    url: str,
    body: WireBody,
    asked: tuple[int, int | None],
    asked_url: str,
    proof: CodingProof,
) -> WireBody:
    """A 200 or 206 that is the file's bytes as asked, or the refusal."""
    where = display_url(url)
    offset, end = asked
    resp = body.response
    _refuse_encoded(pool, asked_url, url, resp.getheader, proof)
    _check_length(resp, where)
    if resp.status == 206:
        span = parse_content_range(resp.getheader("content-range"))
        # Every returned range is checked (s3transfer's rule).
        if span is None or span[0] != offset or (end is not None and span[1] != end):
            raise RangeUnusable(f"{where} answered bytes={offset}- with a wrong Content-Range")
        body.start, body.total_bytes = offset, span[2]
        return body
    # Under chunks a Content-Length is no length (RFC 9112 §6.1, #29 item 3).
    length = None if resp.chunked else resp.getheader("content-length")
    body.total_bytes = parse_length(length)
    return body


def _check_length(resp: http.client.HTTPResponse, where: str) -> None:
    """#29 item 8: http.client frames a body by int() of the first
    Content-Length line, which takes `1_0` and `+10` and gives up past
    4,300 digits (then reading until the connection closes). The body's end
    is trusted only where the agent reads the same length from the header
    (every line, joined): one plain decimal within the bound."""
    value = resp.getheader("content-length")
    if value is None or resp.chunked:
        return
    length = parse_length(value)
    if length is None or length != resp.length:
        raise SourceError(
            f"{where} answered with Content-Length: {_shown(value)}, which is no length the "
            "agent can frame the body by",
            reason=Reason.SOURCE_REJECTED,
            answered=True,
        )


def _shown(value: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in value.strip())[:40]
