"""A raw-socket HTTP/1.1 origin for lying and failing origins.

The loopback `Origin` (tests/harness/origin.py) is an honest server with
faults; some lies need full control of the wire: a body longer than its
Content-Length promised by the probe, chunked or close-delimited bodies cut
short, a 206 that carries another ETag than the one the client conditioned
on (an S3-compatible store ignoring If-Match), a 200 whose length differs
from the HEAD's. Each request goes to a `Script` callable that returns a
`Reply`; the server writes exactly that, and logs what it sent.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal, Self

_HOST = "127.0.0.1"
_RANGE_RE = re.compile(r"bytes=(\d+)-(\d*)")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names

    def range(self) -> tuple[int, int | None] | None:
        match = _RANGE_RE.fullmatch(self.headers.get("range", "").strip())
        if match is None:
            return None
        return int(match.group(1)), int(match.group(2)) if match.group(2) else None


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    # "length": Content-Length (set from `declared` or len(body));
    # "chunked": Transfer-Encoding chunked; "close": close-delimited.
    framing: Literal["length", "chunked", "close"] = "length"
    declared: int | None = None  # a Content-Length other than len(body)
    cut_after: int | None = None  # hang up after this many body bytes
    terminate: bool = True  # chunked: send the final zero chunk
    # chunked: the Transfer-Encoding header lines sent (#29 item 3: values
    # http.client does not take for chunked, `chunked ` or `identity, chunked`);
    # with `declared`, a Content-Length beside them.
    transfer_encoding: tuple[str, ...] = ("chunked",)


@dataclass
class Sent:
    request: Request
    status: int
    body_bytes: int


Script = Callable[[Request], Reply]


class RawOrigin:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.log: list[Sent] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.create_server((_HOST, 0))
        self._listener.settimeout(0.05)
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._accept = threading.Thread(target=self._accept_loop, daemon=True)

    def __enter__(self) -> Self:
        self._accept.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"http://{_HOST}:{self._listener.getsockname()[1]}"

    def requests(self, method: str | None = None) -> list[Sent]:
        with self._lock:
            return [s for s in self.log if method is None or s.request.method == method]

    def close(self) -> None:
        self._stop.set()
        self._accept.join(1.0)
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(1.0)
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            reader = conn.makefile("rb")
            try:
                while not self._stop.is_set():
                    request = _read_request(reader)
                    if request is None:
                        return
                    if not self._answer(conn, request):
                        return
            except OSError:
                return

    def _answer(self, conn: socket.socket, request: Request) -> bool:
        reply = self.script(request)
        entry = Sent(request, reply.status, 0)
        with self._lock:
            self.log.append(entry)
        head = [f"HTTP/1.1 {reply.status} X"]
        head += [f"{k}: {v}" for k, v in reply.headers]
        body = reply.body if request.method != "HEAD" else b""
        keep = reply.framing != "close" and reply.cut_after is None
        if reply.framing == "length":
            declared = reply.declared if reply.declared is not None else len(reply.body)
            head.append(f"Content-Length: {declared}")
        elif reply.framing == "chunked":
            head += [f"Transfer-Encoding: {value}" for value in reply.transfer_encoding]
            if reply.declared is not None:
                head.append(f"Content-Length: {reply.declared}")
        if not keep:
            head.append("Connection: close")
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        if request.method == "HEAD":
            return keep
        limit = len(body) if reply.cut_after is None else min(reply.cut_after, len(body))
        for piece in _pieces(body[:limit]):
            if self._stop.is_set():
                return False
            if reply.framing == "chunked":
                conn.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            else:
                conn.sendall(piece)
            entry.body_bytes += len(piece)
        if reply.framing == "chunked" and reply.terminate and reply.cut_after is None:
            conn.sendall(b"0\r\n\r\n")
        return keep


def _pieces(data: bytes, size: int = 256 * 1024) -> Iterator[bytes]:
    view = memoryview(data)
    for start in range(0, len(data), size):
        yield bytes(view[start : start + size])


def _read_request(reader: object) -> Request | None:
    readline = reader.readline  # type: ignore[attr-defined]
    line = readline(65536)
    if not line:
        return None
    method, path, _ = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        raw = readline(65536)
        if raw in (b"\r\n", b"\n", b""):
            break
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return Request(method, path, headers)


def honest(data: bytes, etag: str | None = '"v1"', last_modified: str | None = None) -> Script:
    """An honest ranged origin for `data` (a base to lie from)."""

    def script(request: Request) -> Reply:
        return serve(request, data, etag, last_modified)

    return script


def serve(
    request: Request, data: bytes, etag: str | None, last_modified: str | None = None
) -> Reply:
    headers = [("Accept-Ranges", "bytes")]
    if etag:
        headers.append(("ETag", etag))
    if last_modified:
        headers.append(("Last-Modified", last_modified))
    wanted = request.range()
    if wanted is None or request.method == "HEAD":
        return Reply(200, headers, data)
    first, last = wanted
    end = len(data) if last is None else min(last + 1, len(data))
    if first >= len(data):
        return Reply(416, [("Content-Range", f"bytes */{len(data)}")])
    span = ("Content-Range", f"bytes {first}-{end - 1}/{len(data)}")
    return Reply(206, [*headers, span], data[first:end])
