"""The skeleton the loopback HTTP servers (origin, fake hub) share: a
threaded HTTP/1.1 server on 127.0.0.1, optionally TLS, whose handler threads
are tracked so that close() hangs up on every client within about a second."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Self

from tests.harness.lifecycle import Lifecycle

HOST = "127.0.0.1"
CLOSE_JOIN_S = 0.9  # close() budget for handler threads; callers expect ~1 s worst case


@dataclass(frozen=True)
class Request:
    """One request as a loopback server saw and answered it."""

    method: str
    path: str
    headers: dict[str, str]
    status: int


def accept_until(
    listener: socket.socket, stop: threading.Event, on_accept: Callable[[socket.socket], None]
) -> None:
    """Hand every connection to `on_accept` until `stop` is set; the listener
    needs a short timeout so that the loop notices."""
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        on_accept(conn)


def hard_shutdown(sock: socket.socket) -> None:
    # socket.socket.shutdown (not SSLSocket.shutdown) so a TLS handler thread blocked in
    # read/write wakes up with EOF instead of racing on a torn-down SSL object.
    with contextlib.suppress(OSError):  # already closed or never connected: nothing to wake
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class Clients:
    """What handler threads share with their server: a lock, the stop event
    and the connected clients. A server's state extends it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.clients: dict[socket.socket, threading.Thread] = {}

    def register(self, sock: socket.socket) -> None:
        with self.lock:
            self.clients[sock] = threading.current_thread()
            stopping = self.stop.is_set()
        if stopping:  # accepted just as close() snapshotted the clients: hang up ourselves
            hard_shutdown(sock)

    def unregister(self, sock: socket.socket) -> None:
        with self.lock:
            self.clients.pop(sock, None)

    def hang_up_clients(self, timeout: float) -> None:
        with self.lock:
            clients = list(self.clients.items())
        for sock, _ in clients:
            hard_shutdown(sock)
        deadline = time.monotonic() + timeout
        for _, thread in clients:
            thread.join(max(0.0, deadline - time.monotonic()))


class LoopbackServer(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True
    block_on_close = False  # close() joins handler threads itself, with a deadline

    def __init__(
        self,
        state: Clients,
        tls: ssl.SSLContext | None,
        port: int,
        handler: type[BaseHTTPRequestHandler],
    ) -> None:
        self.state = state
        self.tls = tls
        super().__init__((HOST, port), handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind does a reverse-DNS lookup (getfqdn) that can take seconds.
        socketserver.TCPServer.server_bind(self)
        self.server_name = HOST
        self.server_port = self.server_address[1]

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = self.socket.accept()
        if self.tls is not None:
            # Handshake later, in the handler thread, so a slow TLS client cannot block accept().
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up mid-body is routine in these tests; keep stderr quiet.
        return


class TrackedHandler(BaseHTTPRequestHandler):
    """Registers its connection with the server's `Clients`, does the TLS
    handshake in its own thread and logs nothing; a server's handler answers
    GET and HEAD in `answer`."""

    protocol_version = "HTTP/1.1"
    server: LoopbackServer

    def setup(self) -> None:
        self.server.state.register(self.request)
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()
        super().setup()

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.state.unregister(self.request)

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: test output should only show the stager's own logs

    def do_GET(self) -> None:
        self.answer("GET")

    def do_HEAD(self) -> None:
        self.answer("HEAD")

    def answer(self, method: str) -> None:
        raise NotImplementedError


class LoopbackHTTP(Lifecycle):
    """start/close/url of one `LoopbackServer` serving `handler` over `state`."""

    _name = "loopback"

    def __init__(
        self,
        state: Clients,
        handler: type[TrackedHandler],
        *,
        tls: ssl.SSLContext | None = None,
        port: int = 0,
    ) -> None:
        self._state = state
        self._handler = handler
        self._tls = tls
        self._port = port
        self._server: LoopbackServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError(f"{self._name} already started")
        self._server = LoopbackServer(self._state, self._tls, self._port, self._handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.01},  # shutdown() waits up to one poll interval
            name=f"{self._name}-{self._server.server_port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        server = self._server
        if server is None or self._state.stop.is_set():
            return
        self._state.stop.set()  # wakes stalled, delayed and throttled handlers
        server.shutdown()
        server.server_close()
        self._state.hang_up_clients(CLOSE_JOIN_S)
        if self._thread is not None:
            self._thread.join(CLOSE_JOIN_S)

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError(f"{self._name} not started")
        scheme = "http" if self._tls is None else "https"
        return f"{scheme}://{HOST}:{self._server.server_port}"
