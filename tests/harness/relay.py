"""A loopback TCP relay in front of an origin that counts the connections a
client opens (the origin does not expose that): the evidence that the agent
reuses keep-alive connections instead of opening one per request.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.harness.loopback import accept_until

_CHUNK = 256 * 1024


class CountingRelay:
    """Relays `url` to `target_url`; `connections` counts what clients opened."""

    def __init__(self, target_url: str) -> None:
        self._target = ("127.0.0.1", int(target_url.rsplit(":", 1)[1]))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.connections = 0
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _accept_loop(self) -> None:
        accept_until(self._listener, self._stop, self._relay)

    def _relay(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self._target)
        with self._lock:
            self.connections += 1
            self._sockets += [client, upstream]
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(_CHUNK):
                dst.sendall(chunk)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(1.0)
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()
