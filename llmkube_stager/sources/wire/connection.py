"""Keep-alive connections per origin for the stdlib `http.client` data path
(exchange.py), direct or through a forward proxy: https origins over our own
CONNECT tunnel, http ones with absolute-form request targets (proxy.py
decides which, per URL).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

from llmkube_stager.errors import known
from llmkube_stager.logs import Log
from llmkube_stager.proxy import Proxy, ProxySettings
from llmkube_stager.sources.wire.errors import ProxyRefused, translate_network_error
from llmkube_stager.sources.wire.setup import bounded_setup
from llmkube_stager.sources.wire.status import Origin


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
        # TCP, CONNECT and TLS within one connect timeout (#29 item 4): the
        # socket's timeout bounds each read, and a proxy answering one byte
        # a second never trips it.
        with bounded_setup(self.timeout or 0.0) as deadline:
            sock = socket.create_connection((self._proxy.host, self._proxy.port), self.timeout)
            deadline.watch(sock)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                open_tunnel(sock, self.host, self.port, self._proxy.authorization())
                self.sock = self._tls.wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise


class _BoundedHTTPSConnection(http.client.HTTPSConnection):
    """An https origin, direct: TCP and TLS within one connect timeout
    (#29 item 4; the handshake's own deadline starts after TCP)."""

    def __init__(self, origin: Origin, timeout_s: float, context: ssl.SSLContext):
        super().__init__(origin.host, origin.port, timeout=timeout_s, context=context)
        self._tls = context

    def connect(self) -> None:
        with bounded_setup(self.timeout or 0.0) as deadline:
            sock = socket.create_connection((self.host, self.port), self.timeout)
            deadline.watch(sock)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.sock = self._tls.wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise


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
        # The run's log, for each exchange at the debug level (trace.py).
        self.log: Log | None = None

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
            conn = _BoundedHTTPSConnection(origin, self._connect_s, self._ssl_context())
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
        # After the handshake the socket timeout is the stall timeout: the
        # longest time without a received byte (CONTRACT §3).
        known(conn.sock, "a connected socket").settimeout(self._stall_s)
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
