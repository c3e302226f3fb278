"""A forward HTTP proxy on 127.0.0.1 for tests: CONNECT tunnels (https
origins) and absolute-form GET/HEAD (http origins), optional Basic
credentials (407 without them), and a log of what it was asked.

Upstream connections go to loopback only (the tests' origins); a request for
anything else is answered 403, so a test can never reach the internet
through it. A plain request's body (an STS POST) is forwarded with it.
`silent_tunnels=True` answers CONNECT with 200 and then never moves a byte
(an egress proxy whose upstream hangs: #22 item 4). `dribble_s` answers
CONNECT with its header block one byte every `dribble_s` seconds, a block
that never ends: each read of the client gets a byte well within its
timeout, and only a bound on the whole set-up ends it (#29 item 4); with
`dribble_bytes` the block ends after that many dribbled bytes and the
tunnel then works. `routes` maps a CONNECT target ("host:port", a host
a library pins, e.g. iamcredentials.googleapis.com:443) to a loopback port:
the tunnel goes to the suite's fake of that host instead (#41 item 1).
"""

from __future__ import annotations

import base64
import select
import socket
import socketserver
import threading
import time
from dataclasses import dataclass
from typing import Self
from urllib.parse import urlsplit

from tests.harness.lifecycle import Lifecycle

_HOST = "127.0.0.1"
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
_CHUNK = 1 << 16


@dataclass(frozen=True)
class ProxyRecord:
    method: str
    target: str  # "host:port" for CONNECT, the absolute URL otherwise
    authorized: bool
    status: int


class _State:
    def __init__(
        self,
        credentials: tuple[str, str] | None,
        silent_tunnels: bool,
        dribble_s: float | None = None,
        dribble_bytes: int | None = None,
        routes: dict[str, int] | None = None,
    ) -> None:
        self.routes = dict(routes or {})
        self.lock = threading.Lock()
        self.silent_tunnels = silent_tunnels
        self.dribble_s = dribble_s
        self.dribble_bytes = dribble_bytes
        self.stop = threading.Event()
        self.log: list[ProxyRecord] = []
        self.expected = (
            "Basic " + base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode()).decode()
            if credentials
            else None
        )

    def record(self, entry: ProxyRecord) -> None:
        with self.lock:
            self.log.append(entry)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, state: _State) -> None:
        self.state = state
        super().__init__((_HOST, 0), _Handler)


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        while self._one_request():
            pass

    def _one_request(self) -> bool:
        line = self.rfile.readline(65536).decode("latin-1").strip()
        if not line:
            return False
        method, target, _ = [*line.split(" "), "", ""][:3]
        headers = self._headers()
        state = self.server.state
        authorized = state.expected is None or headers.get("proxy-authorization") == state.expected
        host, port = _upstream(method, target)
        if method == "CONNECT" and target in state.routes:
            host, port = _HOST, state.routes[target]
        if not authorized:
            # Recorded before the reply: a client that has its answer finds it in the log.
            state.record(ProxyRecord(method, target, False, 407))
            if method != "CONNECT":  # the connection stays usable for the next request
                self.rfile.read(int(headers.get("content-length") or 0))
            self._reply(407, 'Proxy-Authenticate: Basic realm="test"\r\n')
            return method != "CONNECT"
        if method == "CONNECT" and state.silent_tunnels:
            state.record(ProxyRecord(method, target, True, 200))
            self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            self.wfile.flush()
            state.stop.wait()  # hold the tunnel open, silent, until the proxy closes
            return False
        if method == "CONNECT" and state.dribble_s is not None and state.dribble_bytes is None:
            state.record(ProxyRecord(method, target, True, 200))
            _dribble(self.connection, state.dribble_s, state.stop)
            return False
        if not _is_loopback(host):
            state.record(ProxyRecord(method, target, True, 403))
            self._reply(403)
            return False
        try:
            upstream = socket.create_connection((_address_of(host), port), timeout=10)
        except OSError:
            state.record(ProxyRecord(method, target, True, 502))
            self._reply(502)
            return False
        state.record(ProxyRecord(method, target, True, 200))
        with upstream:
            if method == "CONNECT" and state.dribble_s is not None:
                if not _dribble_finite(self.connection, state):
                    return False
            elif method == "CONNECT":
                self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                self.wfile.flush()
            else:
                # The body may already sit in rfile's buffer: read it from there.
                body = self.rfile.read(int(headers.get("content-length") or 0))
                upstream.sendall(_origin_form(method, target, headers) + body)
            # Nothing else is left in rfile's buffer: clients send nothing
            # after CONNECT before the 200, nor after a request's body.
            _pipe(self.connection, upstream)
        return False  # the upstream closed (Connection: close) or the tunnel ended

    def _headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        while True:
            line = self.rfile.readline(65536).decode("latin-1")
            if line in ("\r\n", "\n", ""):
                return headers
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()

    def _reply(self, status: int, extra: str = "") -> None:
        reason = {403: "Forbidden", 407: "Proxy Authentication Required", 502: "Bad Gateway"}
        self.wfile.write(
            f"HTTP/1.1 {status} {reason.get(status, '')}\r\n{extra}"
            "Content-Length: 0\r\n\r\n".encode()
        )
        self.wfile.flush()


_DRIBBLED_HEAD = b"HTTP/1.1 200 Connection established\r\nX-Pad: "


def _dribble(sock: socket.socket, every_s: float, stop: threading.Event) -> None:
    """A CONNECT answer's status line and then an endless header line, one
    byte every `every_s`, until the client goes or the proxy closes."""
    sent = 0
    while not stop.wait(every_s):
        byte = _DRIBBLED_HEAD[sent : sent + 1] or b"a"
        try:
            sock.sendall(byte)
        except OSError:
            return
        sent += 1


def _dribble_finite(sock: socket.socket, state: _State) -> bool:
    """The status line at once, then `dribble_bytes` of one header line one
    byte every `dribble_s`, then the block's end; False when the client
    went first."""
    assert state.dribble_s is not None and state.dribble_bytes is not None
    try:
        sock.sendall(_DRIBBLED_HEAD)
        for _ in range(state.dribble_bytes):
            if state.stop.wait(state.dribble_s):
                return False
            sock.sendall(b"a")
        sock.sendall(b"\r\n\r\n")
    except OSError:
        return False
    return True


def _is_loopback(host: str) -> bool:
    # RFC 6761 §6.3: every name under .localhost is loopback (virtual-host
    # style S3 tests use <bucket>.localhost, which the system resolver may
    # not know).
    return host in _LOOPBACK or host.endswith(".localhost")


def _address_of(host: str) -> str:
    return _HOST if host.endswith(".localhost") else host


def _upstream(method: str, target: str) -> tuple[str, int]:
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        return host.strip("[]"), int(port or 443)
    parts = urlsplit(target)
    return parts.hostname or "", parts.port or 80


def _origin_form(method: str, target: str, headers: dict[str, str]) -> bytes:
    parts = urlsplit(target)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    kept = {
        k: v
        for k, v in headers.items()
        if k not in ("proxy-authorization", "proxy-connection", "connection")
    }
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in kept.items())]
    lines.append("Connection: close")  # one request per upstream connection
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _pipe(client: socket.socket, upstream: socket.socket) -> None:
    """Bytes both ways until either side closes."""
    sockets = [client, upstream]
    while True:
        readable, _, _ = select.select(sockets, [], [], 30)
        if not readable:
            return
        for sock in readable:
            try:
                data = sock.recv(_CHUNK)
            except OSError:
                return
            if not data:
                return
            other = upstream if sock is client else client
            try:
                other.sendall(data)
            except OSError:
                return


class DribblingTLS(Lifecycle):
    """A TLS peer on 127.0.0.1 that reads the client's hello and answers a
    handshake record one byte every `every_s` seconds, never completing it
    (#29 item 4): `https://127.0.0.1:<port>` for any https client."""

    # A handshake record header announcing 16 KiB that never all arrive.
    _RECORD = b"\x16\x03\x03\x40\x00"

    def __init__(self, every_s: float = 0.5) -> None:
        self._every_s = every_s
        self._stop = threading.Event()
        self._server: socket.socket | None = None
        self._lock = threading.Lock()
        self.accepted = 0
        # How long each connection lasted, from its accept to the client's
        # leaving (or the peer's closing).
        self.handshakes_s: list[float] = []

    def start(self) -> Self:
        self._server = socket.create_server((_HOST, 0))
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        assert self._server is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        started = time.monotonic()
        try:
            self._dribble(conn)
        finally:
            with self._lock:
                self.handshakes_s.append(time.monotonic() - started)

    def _dribble(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)  # the client hello
            except OSError:
                return
            sent = 0
            while not self._stop.is_set():
                # The client's leaving ends the connection at once (EOF).
                readable, _, _ = select.select([conn], [], [], self._every_s)
                try:
                    if readable:
                        if not conn.recv(65536):
                            return
                        continue
                    conn.sendall(self._RECORD[sent : sent + 1] or b"\x02")
                except OSError:
                    return
                sent += 1

    def close(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.close()
            self._server = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("not started")
        return f"https://{_HOST}:{self._server.getsockname()[1]}"


class ForwardProxy(Lifecycle):
    """`with ForwardProxy() as proxy:`; `proxy.url` for HTTPS_PROXY/HTTP_PROXY."""

    def __init__(
        self,
        credentials: tuple[str, str] | None = None,
        *,
        silent_tunnels: bool = False,
        dribble_s: float | None = None,
        dribble_bytes: int | None = None,
        routes: dict[str, int] | None = None,
    ) -> None:
        self._state = _State(credentials, silent_tunnels, dribble_s, dribble_bytes, routes)
        self._credentials = credentials
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        self._server = _Server(self._state)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._state.stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("proxy not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """With the credentials in it when the proxy requires some."""
        if self._credentials:
            user, password = self._credentials
            return f"http://{user}:{password}@{_HOST}:{self.port}"
        return f"http://{_HOST}:{self.port}"

    def requests(self) -> list[ProxyRecord]:
        with self._state.lock:
            return list(self._state.log)
