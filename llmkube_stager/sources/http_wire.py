"""The bulk-byte data path: stdlib `http.client` reading with `readinto` into
the caller's reusable buffers.

Why not httpx here: on this 2-core class of machine a plain httpx streaming
loop moves ~264 MB/s against curl's ~795 MB/s, while `http.client.readinto`
reaches ~580 MB/s before any tuning (issue #2 measurements); the per-chunk
object churn of httpx is the cost. httpx stays on the control path (probe).
Network exceptions are translated into `SourceError` here and only here.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

from llmkube_stager.errors import Network, Reason, SourceError, Wire, proxy_unauthorized
from llmkube_stager.logs import display_url
from llmkube_stager.proxy import Proxy, ProxySettings
from llmkube_stager.sources.base import RangeUnusable
from llmkube_stager.sources.http_coding import HeaderGet, encoded_error, encoding_header, hop_words
from llmkube_stager.sources.http_status import (
    MAX_REDIRECTS,
    REDIRECT_STATUSES,
    AuthPolicy,
    Origin,
    next_hop,
    parse_content_range,
    parse_digits,
    parse_unsatisfied_range,
    status_error,
)
from llmkube_stager.sources.tls import cert_error

_DRAIN_LIMIT_BYTES = 64 * 1024
_STALE_ERRORS = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


def translate_network_error(
    exc: BaseException, where: str, phase: str, peer: Origin | None = None
) -> SourceError:
    """OSError / http.client errors -> SourceError, by type (never by text).
    `peer` (the host and port connected to: the origin, or the proxy) goes
    into the error's facts, from which errors.operator_phrase gives the
    operator's matcher curl's words."""
    if isinstance(exc, ProxyRefused):
        return proxy_refused(f"{exc.status} {exc.reason}", where, phase)
    if isinstance(exc, TimeoutError):
        return timeout_error(phase, where, peer)
    cert = cert_error(exc)
    if cert is not None:
        wire = _wire(Network.TLS_UNTRUSTED, peer, tls_problem=str(cert.verify_message or ""))
        return SourceError(
            f"TLS certificate verify failed for {where}", reason=Reason.SOURCE_UNTRUSTED, wire=wire
        )
    kind: Network | None = None
    if isinstance(exc, socket.gaierror):
        kind, text = Network.DNS, f"could not resolve host for {where}"
    elif isinstance(exc, ConnectionRefusedError):
        kind, text = Network.REFUSED, f"connection refused by {where}"
    else:
        kind = Network.RESET if isinstance(exc, ConnectionResetError) else None
        text = f"{phase} failed for {where}: {type(exc).__name__}"
    return SourceError(
        text, reason=Reason.SOURCE_UNREACHABLE, transient=True, wire=_wire(kind, peer)
    )


def timeout_error(phase: str, where: str, peer: Origin | None) -> SourceError:
    """No connection within the connect timeout, or no byte within the stall
    timeout on an established one."""
    kind = Network.CONNECT_TIMEOUT if phase == "connect" else Network.READ_TIMEOUT
    return SourceError(
        f"{phase} timed out for {where}",
        reason=Reason.SOURCE_UNREACHABLE,
        transient=True,
        wire=_wire(kind, peer),
    )


def _wire(kind: Network | None, peer: Origin | None, tls_problem: str = "") -> Wire:
    if peer is None:
        return Wire(network=kind, tls_problem=tls_problem)
    return Wire(network=kind, host=peer.host, port=peer.port, tls_problem=tls_problem)


class ProxyRefused(OSError):
    """A forward proxy answered CONNECT with a non-2xx status (its status
    line holds no secret)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"the proxy answered CONNECT with {status} {reason}")
        self.status = status
        self.reason = reason


def open_tunnel(sock: socket.socket, host: str, port: int, authorization: str | None) -> None:
    """CONNECT host:port through a forward proxy on `sock` (RFC 9110 §9.3.6).
    Ours, not http.client's `set_tunnel`, which reports a refusal as a bare
    OSError with the status line in its text."""
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
    if authorization:
        lines.append(f"Proxy-Authorization: {authorization}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    # The proxy sends nothing after its header block until the TLS client
    # hello, so the response's buffered reader cannot swallow tunnel bytes.
    response = http.client.HTTPResponse(sock, method="CONNECT")
    try:
        response.begin()
    finally:
        response.fp = None  # type: ignore[assignment]  # keep the socket: it is the tunnel
    if not 200 <= response.status < 300:
        raise ProxyRefused(response.status, response.reason)


class _TunnelledHTTPSConnection(http.client.HTTPSConnection):
    """An https origin through a forward proxy: TCP to the proxy, our own
    CONNECT, then TLS to the origin over the tunnel."""

    def __init__(self, origin: Origin, proxy: Proxy, timeout_s: float, context: ssl.SSLContext):
        super().__init__(origin.host, origin.port, timeout=timeout_s, context=context)
        self._proxy = proxy
        self._tls = context

    def connect(self) -> None:
        sock = socket.create_connection((self._proxy.host, self._proxy.port), self.timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            open_tunnel(sock, self.host, self.port, self._proxy.authorization())
            self.sock = self._tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise


def proxy_refused(status_line: str, where: str, phase: str) -> SourceError:
    """A proxy answered its own error (CONNECT refused, 407, 502). Wrong
    proxy credentials do not fix themselves: no retries for a 407."""
    status_line = status_line.strip()
    if status_line.startswith("407"):  # #22 item 6: exit 4, the credentials named
        return proxy_unauthorized(f"{phase} failed for {where}", credentials_sent=None)
    return SourceError(
        f"{phase} failed for {where}: the proxy answered {status_line}",
        reason=Reason.SOURCE_UNREACHABLE,
        transient=not status_line.startswith("407"),
    )


class ConnectionPool:
    """Keep-alive connections per origin, reused across the files of a
    manifest (a 40-file model should not pay 40 TLS handshakes) and shared
    by the parallel range workers of one file. Thread-safe. Through a forward
    proxy (proxy.py): https origins over a CONNECT tunnel, http ones with
    absolute-form request targets."""

    _MAX_IDLE_PER_ORIGIN = 16

    def __init__(
        self,
        connect_timeout_s: float,
        stall_timeout_s: float,
        ssl_context: Callable[[], ssl.SSLContext],
        proxies: ProxySettings | None = None,
    ) -> None:
        self._connect_s = connect_timeout_s
        self._stall_s = stall_timeout_s
        self._ssl_context = ssl_context
        self._proxies = proxies or ProxySettings()
        self._idle: dict[Origin, list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()

    def proxy_for(self, origin: Origin) -> Proxy | None:
        return self._proxies.for_url(origin.scheme, origin.host, origin.port)

    def request_form(self, url: str) -> tuple[str, dict[str, str]]:
        """The request target and proxy headers for `url`: origin-form, or
        absolute-form plus Proxy-Authorization through an http proxy."""
        origin = Origin.of(url)
        proxy = self.proxy_for(origin)
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if proxy is not None and origin.scheme == "http":
            auth = proxy.authorization()
            host = parts.netloc.rpartition("@")[2]  # never userinfo to the proxy
            return f"http://{host}{target}", {"Proxy-Authorization": auth} if auth else {}
        return target, {}

    def take(self, origin: Origin, fresh: bool = False) -> tuple[http.client.HTTPConnection, bool]:
        """A connected connection and whether it was reused; `fresh`: never
        an idle one (the retry after a dead kept-alive connection)."""
        with self._lock:
            idle = [] if fresh else self._idle.get(origin, [])
            while idle:
                conn = idle.pop()
                if conn.sock is not None:
                    return conn, True
        return self._connect(origin), False

    def _connect(self, origin: Origin) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        proxy = self.proxy_for(origin)
        host, port = (proxy.host, proxy.port) if proxy is not None else (origin.host, origin.port)
        if origin.scheme == "https" and proxy is not None:
            conn = _TunnelledHTTPSConnection(origin, proxy, self._connect_s, self._ssl_context())
        elif origin.scheme == "https":
            conn = http.client.HTTPSConnection(
                host, port, timeout=self._connect_s, context=self._ssl_context()
            )
        else:
            conn = http.client.HTTPConnection(host, port, timeout=self._connect_s)
        where = f"{origin.scheme}://{origin.host}:{origin.port}"
        if proxy is not None:
            where += f" via the proxy {proxy.display}"
        try:
            conn.connect()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            peer = Origin(origin.scheme, host, port)
            raise translate_network_error(exc, where, "connect", peer) from exc
        assert conn.sock is not None
        # After the handshake the socket timeout is the stall timeout: the
        # longest time without a received byte (CONTRACT §3).
        conn.sock.settimeout(self._stall_s)
        return conn

    def give_back(self, origin: Origin, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(origin, [])
            if conn in idle:
                return
            if len(idle) < self._MAX_IDLE_PER_ORIGIN:
                idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for conn in conns:
            conn.close()


class WireBody:
    """A response body being received; see `sources.base.Body`."""

    copy_into = None  # bytes pass through user space (hashed, counted)

    def __init__(
        self,
        pool: ConnectionPool,
        origin: Origin,
        conn: http.client.HTTPConnection,
        resp: http.client.HTTPResponse,
        where: str,
    ) -> None:
        self._pool = pool
        self._origin = origin
        self._conn = conn
        self._resp = resp
        self._where = where
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
            return conn, conn.getresponse()
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


def _drain_and_release(
    pool: ConnectionPool, url: str, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse
) -> None:
    """Read a small error/redirect body so the connection can be reused."""
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
    auth: AuthPolicy,
    offset: int,
    end: int | None = None,
    asked_url: str | None = None,
) -> WireBody:
    """GET with redirects followed by hand (auth re-decided per hop) and the
    response status turned into a body or a SourceError. `asked_url`: where
    the file was first asked for (before a probe's redirects), to name the
    hop of an encoded answer."""
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
        return _body_for(pool, url, conn, resp, (offset, end), asked_url or first_url)
    raise SourceError(
        f"too many redirects from {display_url(first_url)}",
        reason=Reason.SOURCE_REJECTED,
        answered=True,
    )


def head(
    pool: ConnectionPool, url: str, headers: dict[str, str], auth: AuthPolicy
) -> tuple[str, int, dict[str, str]]:
    """HEAD with redirects followed by hand, as `open_get` does: (the final
    URL, its status, its headers with lowercase names). On the connections
    the bodies use: a probe per file of a many-file model costs 0.17 ms of
    CPU here, against 0.8 ms through httpx (#16)."""
    first_url = url
    for _ in range(MAX_REDIRECTS + 1):
        conn, resp = _request(pool, "HEAD", url, {**headers, **auth.headers_for(url, first_url)})
        answer = {name.lower(): value for name, value in resp.getheaders()}
        _drain_and_release(pool, url, conn, resp)  # a HEAD has no body
        location = answer.get("location")
        if resp.status in REDIRECT_STATUSES and location:
            url = next_hop(url, location)
            continue
        if 200 <= resp.status < 300:
            # HEAD and GET agree on an encoded answer: refused before any GET.
            _refuse_encoded(pool, first_url, url, answer.get)
        return url, resp.status, answer
    raise SourceError(
        f"too many redirects from {display_url(first_url)}",
        reason=Reason.SOURCE_REJECTED,
        answered=True,
    )


def _refuse_encoded(pool: ConnectionPool, asked_url: str, url: str, get: HeaderGet) -> None:
    """#22 item 1: a body under a content coding is not the file."""
    header = encoding_header(get)
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
) -> WireBody:
    where = display_url(url)
    offset, end = asked
    body = WireBody(pool, Origin.of(url), conn, resp, where)
    if resp.status in (200, 206):
        try:
            _refuse_encoded(pool, asked_url, url, resp.getheader)
        except SourceError:
            body.close()  # unread: never reused
            raise
    if resp.status == 206:
        span = parse_content_range(resp.getheader("content-range"))
        # Every returned range is checked (s3transfer's rule).
        if span is None or span[0] != offset or (end is not None and span[1] != end):
            body.close()
            raise RangeUnusable(f"{where} answered bytes={offset}- with a wrong Content-Range")
        body.start, body.total_bytes = offset, span[2]
        return body
    if resp.status == 200:
        length = resp.getheader("content-length")
        body.total_bytes = parse_digits(length)
        return body
    if resp.status == 416:
        body.complete = True
        body.total_bytes = parse_unsatisfied_range(resp.getheader("content-range"))
        _drain_and_release(pool, url, conn, resp)
        return body
    error = status_error(resp.status, resp.getheader, where)
    _drain_and_release(pool, url, conn, resp)
    raise error
