"""Loopback HTTP origin with fault injection, used by tests, the demo and the benchmark.

Everything binds to 127.0.0.1 only. Files live in memory (``put``) or on disk
(``serve_directory``); ``Fault`` makes a path misbehave the way real upstreams do
(errors, truncation, stalls, broken Range support, redirects, throttling) so the
stager's resume and validation logic can be exercised deterministically.

Run ``python -m tests.harness.origin --dir DIR`` to serve a directory.
"""

from __future__ import annotations

import argparse
import email.utils
import gzip
import hashlib
import os
import re
import signal
import socket
import ssl
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from types import FrameType
from typing import Literal, Self
from urllib.parse import unquote, urlsplit

from tests.harness.lifecycle import Lifecycle
from tests.harness.loopback import (
    HOST,
    Clients,
    LoopbackHTTP,
    Request,
    TrackedHandler,
    accept_until,
)

_CHUNK = 256 * 1024
_FAULT_BODY = b"injected fault\n"
_NOT_FOUND_BODY = b"not found\n"
_RANGE_RE = re.compile(r"\s*bytes\s*=\s*(\d+)\s*-\s*(\d*)\s*", re.ASCII)


@dataclass(frozen=True)
class RequestRecord(Request):
    """One answered request, as the origin saw and answered it."""

    body_bytes: int


@dataclass
class Fault:
    """Misbehaviour for one path; fields combine. ``times`` counts matching requests."""

    status: int | None = None
    methods: tuple[str, ...] = ("GET", "HEAD")
    times: int | None = None
    retry_after: str | None = None
    truncate_after: int | None = None
    stall_after: int | None = None
    ignore_range: bool = False
    wrong_content_range: bool = False
    no_content_length: bool = False
    head_content_length_zero: bool = False
    redirect_to: str | None = None
    rate_bytes_per_s: int | None = None
    delay_s: float = 0.0
    # A transforming origin or proxy (#22 item 1): the body is sent encoded
    # ("gzip" and "deflate" really compressed, any other name sent as is
    # with the header), its Content-Length and ranges those of the encoded
    # bytes on HEAD and GET alike; the ETag stays (a proxy keeps it).
    content_encoding: str | None = None
    # The body goes out with Transfer-Encoding: chunked (no Content-Length).
    chunked: bool = False
    # Sent with every answer this fault makes (RateLimit, Via, X-Error-Code).
    headers: tuple[tuple[str, str], ...] = ()
    # HEAD alone answers this status (405: a server that refuses HEAD); GET
    # goes on as the other fields say.
    head_status: int | None = None


def encoded(data: bytes, coding: str) -> bytes:
    """`data` as an origin that applies `coding` sends it."""
    if coding == "gzip":
        return gzip.compress(data, mtime=0)
    if coding == "deflate":
        return zlib.compress(data)
    return data


@dataclass
class _Entry:
    """Live log entry, updated while the response is written (see ``_Handler._write``)."""

    method: str
    path: str
    headers: dict[str, str]
    status: int = 0
    body_bytes: int = 0

    def freeze(self) -> RequestRecord:
        return RequestRecord(
            self.method, self.path, dict(self.headers), self.status, self.body_bytes
        )


@dataclass(frozen=True)
class _Resource:
    """A servable body: in memory (``data``) or a file read on each request."""

    size: int
    etag: str | None
    last_modified: float | None  # None: no Last-Modified header
    data: bytes | None = None
    file_path: str | None = None
    # A CDN edge's per-connection cap: every GET of this path is paced.
    rate_bytes_per_s: int | None = None

    def chunks(self, start: int, end: int, chunk: int) -> Iterator[bytes | memoryview]:
        if self.data is not None:
            view = memoryview(self.data)
            for pos in range(start, end, chunk):
                yield view[pos : min(pos + chunk, end)]
            return
        assert self.file_path is not None
        with open(self.file_path, "rb") as fh:
            fh.seek(start)
            remaining = end - start
            while remaining > 0:
                piece = fh.read(min(chunk, remaining))
                if not piece:  # file shrank under us: stop short, like a real origin would
                    return
                remaining -= len(piece)
                yield piece


@dataclass(frozen=True)
class _Plan:
    """What to answer for a (possibly ranged) request: status and body byte span [start, end)."""

    status: int
    start: int
    end: int


def _auto_etag(data: bytes) -> str:
    return '"' + hashlib.sha256(data).hexdigest()[:16] + '"'


def _route(raw_path: str) -> str:
    """Key used for files and faults: the decoded path without query string."""
    return unquote(urlsplit(raw_path).path)


def _strong_match(if_range: str, etag: str | None) -> bool:
    # RFC 9110 If-Range uses strong comparison: weak tags never match.
    if etag is None or etag.startswith("W/"):
        return False
    return if_range.strip() == etag


def _parse_range(value: str) -> tuple[int, int | None] | None:
    # Only the single-range forms the stager sends; anything else is ignored (answered
    # 200 with the whole body), which RFC 9110 permits.
    match = _RANGE_RE.fullmatch(value)
    if match is None:
        return None
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) else None
    if last is not None and last < first:
        return None
    return first, last


def _plan(res: _Resource, range_hdr: str | None, if_range: str | None, fault: Fault) -> _Plan:
    whole = _Plan(200, 0, res.size)
    if range_hdr is None or fault.ignore_range:
        return whole
    if if_range is not None and not _strong_match(if_range, res.etag):
        return whole  # the client's partial copy is stale: hand it the new full body
    parsed = _parse_range(range_hdr)
    if parsed is None:
        return whole
    first, last = parsed
    if first >= res.size:
        return _Plan(416, 0, 0)
    end = res.size if last is None else min(last + 1, res.size)
    return _Plan(206, first, end)


def _disk_resource(root: str, prefix: str, route: str) -> _Resource | None:
    if not route.startswith(prefix):
        return None
    rel = os.path.normpath(route[len(prefix) :].lstrip("/"))
    # Refuse "../" escapes; symlinks inside root are followed on purpose (HF-cache style trees).
    if rel in (".", "") or rel.startswith("..") or os.path.isabs(rel):
        return None
    full = os.path.join(root, rel)
    try:
        st = os.stat(full)
    except OSError:
        return None
    if not os.path.isfile(full):
        return None
    etag = f'"{st.st_size:x}-{st.st_mtime_ns:x}"'
    return _Resource(st.st_size, etag, st.st_mtime, file_path=full)


class _State(Clients):
    """Everything handler threads share with the Origin; guarded by ``lock``."""

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[str, _Resource] = {}
        self.dirs: list[tuple[str, str]] = []
        self.faults: dict[str, Fault] = {}
        self.fault_uses: dict[str, int] = {}
        self.log: list[_Entry] = []

    def take_fault(self, route: str, method: str) -> Fault | None:
        """Return the fault to apply to this request, consuming one of its ``times``."""
        with self.lock:
            fault = self.faults.get(route)
            if fault is None or method not in fault.methods:
                return None
            used = self.fault_uses.get(route, 0)
            if fault.times is not None and used >= fault.times:
                return None
            self.fault_uses[route] = used + 1
            return fault

    def lookup(self, route: str) -> _Resource | None:
        with self.lock:
            res = self.files.get(route)
            dirs = list(self.dirs)
        if res is not None:
            return res
        for prefix, root in dirs:
            found = _disk_resource(root, prefix, route)
            if found is not None:
                return found
        return None


class _Handler(TrackedHandler):
    _entry: _Entry  # log entry of the request being answered

    def answer(self, method: str) -> None:
        # Logged up front and updated as bytes go out, so a client that has read the whole
        # response never races the handler thread to the log.
        headers = {k.lower(): v for k, v in self.headers.items()}
        self._entry = _Entry(method, self.path, headers)
        with self.server.state.lock:
            self.server.state.log.append(self._entry)
        try:
            self._dispatch(method)
        except OSError:  # client went away (incl. TLS errors): just drop the connection
            self.close_connection = True

    def _write(self, data: bytes | memoryview) -> None:
        # Count first (see _answer); a failed write is taken back out, so body_bytes only
        # counts bytes handed to the socket by completed writes.
        self._entry.body_bytes += len(data)
        try:
            self.wfile.write(data)
        except OSError:
            self._entry.body_bytes -= len(data)
            raise

    def _dispatch(self, method: str) -> None:
        state = self.server.state
        route = _route(self.path)
        fault = state.take_fault(route, method) or Fault()
        if fault.delay_s > 0 and state.stop.wait(fault.delay_s):
            self.close_connection = True  # shutting down mid-delay: answer nothing
            return
        if method == "HEAD" and fault.head_status is not None:
            self._send_simple(method, fault.head_status, _FAULT_BODY, [])
            return
        if fault.redirect_to is not None:
            self._send_simple(method, 302, b"", [("Location", fault.redirect_to), *fault.headers])
            return
        if fault.status is not None:
            extra = [] if fault.retry_after is None else [("Retry-After", fault.retry_after)]
            self._send_simple(method, fault.status, _FAULT_BODY, [*extra, *fault.headers])
            return
        resource = state.lookup(route)
        if resource is None:
            self._send_simple(method, 404, _NOT_FOUND_BODY, [])
            return
        if fault.content_encoding is not None and resource.data is not None:
            body = encoded(resource.data, fault.content_encoding)
            resource = replace(resource, size=len(body), data=body)
        self._send_resource(method, resource, fault)

    def _send_simple(
        self, method: str, status: int, body: bytes, extra: list[tuple[str, str]]
    ) -> None:
        self._entry.status = status
        self.send_response(status)
        for name, value in extra:
            self.send_header(name, value)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if method == "GET" and body:
            self._write(body)

    def _send_resource(self, method: str, res: _Resource, fault: Fault) -> None:
        plan = _plan(res, self.headers.get("Range"), self.headers.get("If-Range"), fault)
        if plan.status == 416:
            self._send_simple(method, 416, b"", [("Content-Range", f"bytes */{res.size}")])
            return
        self._entry.status = plan.status
        self.send_response(plan.status)
        self._entity_headers(method, res, plan, fault)
        self.end_headers()
        if method == "GET":
            self._send_body(res, plan, fault)

    def _entity_headers(self, method: str, res: _Resource, plan: _Plan, fault: Fault) -> None:
        length = plan.end - plan.start
        if plan.status == 206:
            # wrong_content_range shifts the whole span by one so the length stays consistent
            # and only a client that checks the start offset notices.
            first = plan.start + (1 if fault.wrong_content_range else 0)
            self.send_header("Content-Range", f"bytes {first}-{first + length - 1}/{res.size}")
        if fault.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        elif fault.no_content_length:
            # Close-delimited body: the connection closing is the only framing left.
            self.send_header("Connection", "close")
            self.close_connection = True
        elif method == "HEAD" and fault.head_content_length_zero:
            self.send_header("Content-Length", "0")
        else:
            self.send_header("Content-Length", str(length))
        if res.etag is not None:
            self.send_header("ETag", res.etag)
        if not fault.ignore_range:
            self.send_header("Accept-Ranges", "bytes")
        if res.last_modified is not None:
            modified = email.utils.formatdate(res.last_modified, usegmt=True)
            self.send_header("Last-Modified", modified)
        self.send_header("Content-Type", "application/octet-stream")
        if fault.content_encoding is not None:
            self.send_header("Content-Encoding", fault.content_encoding)
        for name, value in fault.headers:
            self.send_header(name, value)

    def _send_body(self, res: _Resource, plan: _Plan, fault: Fault) -> None:
        stop = self.server.state.stop
        limit = plan.end - plan.start
        for cut in (fault.truncate_after, fault.stall_after):
            if cut is not None:
                limit = min(limit, cut)
        rate = fault.rate_bytes_per_s or res.rate_bytes_per_s
        # Small chunks when throttled so the pacing is smooth (~20 writes/s).
        chunk = _CHUNK if rate is None else max(1, min(_CHUNK, rate // 20))
        started = time.monotonic()
        for piece in res.chunks(plan.start, plan.start + limit, chunk):
            if stop.is_set():
                break
            self._write_piece(piece, fault.chunked)
            if rate is not None:
                self._pace(started, rate)
        if fault.chunked and self._entry.body_bytes == plan.end - plan.start:
            self.wfile.write(b"0\r\n\r\n")
        if self._entry.body_bytes < plan.end - plan.start:
            if fault.stall_after is not None:
                stop.wait()  # hold the socket open, silent, until the origin closes
            # The promised length was not delivered; the only honest end is a hang-up.
            self.close_connection = True

    def _write_piece(self, piece: bytes | memoryview, chunked: bool) -> None:
        if not chunked:
            self._write(piece)
            return
        self.wfile.write(b"%x\r\n" % len(piece))
        self._write(piece)
        self.wfile.write(b"\r\n")

    def _pace(self, started: float, rate: int) -> None:
        ahead = self._entry.body_bytes / rate - (time.monotonic() - started)
        if ahead > 0:
            self.server.state.stop.wait(ahead)


class Origin(LoopbackHTTP):
    """Threaded HTTP/1.1 origin on 127.0.0.1 with files in memory, faults and a request log."""

    _name = "origin"
    _state: _State

    def __init__(self, *, tls: ssl.SSLContext | None = None, port: int = 0) -> None:
        super().__init__(_State(), _Handler, tls=tls, port=port)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def put(
        self,
        path: str,
        data: bytes,
        *,
        etag: str | None = "auto",
        rate_bytes_per_s: int | None = None,
        last_modified: float | Literal["now"] | None = "now",
    ) -> None:
        """Serve ``data`` at ``path``; replaces any previous content (an upstream change).
        ``rate_bytes_per_s`` caps every connection's GET of it, like a CDN edge.
        ``last_modified``: the Last-Modified time (epoch seconds), None for no header."""
        _check_path(path)
        tag = _auto_etag(data) if etag == "auto" else etag
        modified = time.time() if last_modified == "now" else last_modified
        res = _Resource(
            len(data), tag, modified, data=bytes(data), rate_bytes_per_s=rate_bytes_per_s
        )
        with self._state.lock:
            self._state.files[path] = res

    def remove(self, path: str) -> None:
        with self._state.lock:
            self._state.files.pop(path, None)

    def set_fault(self, path: str, fault: Fault | None) -> None:
        """Install (or clear, with None) the fault for ``path``; resets its ``times`` count."""
        _check_path(path)
        with self._state.lock:
            self._state.fault_uses.pop(path, None)
            if fault is None:
                self._state.faults.pop(path, None)
            else:
                self._state.faults[path] = fault

    def requests(self, path: str | None = None, method: str | None = None) -> list[RequestRecord]:
        """Snapshot of the log, oldest first; ``path`` matches with or without the query.

        A request still being answered appears with the body bytes sent so far.
        """
        with self._state.lock:
            log = [entry.freeze() for entry in self._state.log]
        return [
            rec
            for rec in log
            if (path is None or path in (rec.path, _route(rec.path)))
            and (method is None or rec.method == method)
        ]

    def clear_log(self) -> None:
        with self._state.lock:
            self._state.log.clear()

    def serve_directory(self, root: str, prefix: str = "/") -> None:
        """Also serve files under ``root`` at ``prefix``; read from disk on every request."""
        if not os.path.isdir(root):
            raise NotADirectoryError(root)
        _check_path(prefix)
        prefix = prefix if prefix.endswith("/") else prefix + "/"
        with self._state.lock:
            self._state.dirs.append((prefix, os.path.abspath(root)))


def _check_path(path: str) -> None:
    if not path.startswith("/"):
        raise ValueError(f"path must start with '/': {path!r}")


class Blackhole(Lifecycle):
    """127.0.0.1 listener for timeout tests.

    mode="accept": the kernel accepts connections, nobody ever answers (read/stall timeout).
    mode="syn-drop": listen(0) backlog filled by a few pre-made connections so further
    connects hang in SYN (connect timeout).
    """

    def __init__(self, mode: Literal["accept", "syn-drop"]) -> None:
        if mode not in ("accept", "syn-drop"):
            raise ValueError(f"unknown Blackhole mode {mode!r}")
        self._mode = mode
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._held: list[socket.socket] = []
        self._accepted = 0
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        if self._listener is not None:
            raise RuntimeError("blackhole already started")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((HOST, 0))
        self._listener = listener
        if self._mode == "accept":
            listener.listen(64)
            listener.settimeout(0.05)  # lets the accept loop notice close()
            self._thread = threading.Thread(target=self._accept_loop, daemon=True)
            self._thread.start()
        else:
            listener.listen(0)
            self._fill_backlog()
        return self

    def _accept_loop(self) -> None:
        # Accept (and hold, silently) so the backlog never fills and every connect succeeds.
        assert self._listener is not None
        accept_until(self._listener, self._stop, self._hold)

    def _hold(self, conn: socket.socket) -> None:
        with self._lock:
            self._held.append(conn)
            self._accepted += 1

    def _fill_backlog(self) -> None:
        # Linux drops SYNs once the accept queue is full, and nobody ever accepts here, so
        # connect until one attempt stalls; that attempt proves the queue is full.
        for _ in range(8):
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probe.settimeout(0.1)
            try:
                probe.connect((HOST, self.port))
            except TimeoutError:
                probe.close()
                return
            self._held.append(probe)
        raise RuntimeError("could not fill the listen backlog; syn-drop unsupported here")

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("blackhole not started")
        port: int = self._listener.getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def connections(self) -> int:
        """Connections accepted so far (mode="accept"), also after close()."""
        with self._lock:
            return self._accepted

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)
        with self._lock:
            held, self._held = self._held, []
        for sock in held:
            sock.close()
        if self._listener is not None:
            self._listener.close()

    @property
    def running(self) -> bool:
        return self._listener is not None


def closed_port_url() -> str:
    """URL of a 127.0.0.1 port with nothing listening (connects are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]
    return f"http://{HOST}:{port}"


# -- a repo on the origin, and what it was asked ----------------------------------------

# Where `serve_repo` puts a multi-file model: an HF-like resolve path.
REPO = "/org/repo/resolve/main"


def serve_repo(origin: Origin, files: Mapping[str, bytes]) -> str:
    """Put a multi-file repo at <origin>/org/repo/resolve/main/; returns the base URL."""
    for rel, data in files.items():
        origin.put(f"{REPO}/{rel}", data)
    return origin.url + REPO + "/"


def gets(origin: Origin, path: str | None = None) -> list[RequestRecord]:
    """The GETs the origin received (for one path, or all)."""
    return origin.requests(path, "GET")


def methods(origin: Origin, path: str | None = None) -> Counter[str]:
    """HEAD/GET counts the origin received (for one path, or all)."""
    return Counter(r.method for r in origin.requests(path))


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness.origin",
        description="Serve a directory over HTTP on 127.0.0.1 (Range, HEAD, ETag).",
    )
    parser.add_argument("--dir", required=True, help="directory served at /")
    parser.add_argument("--port", type=int, default=0, help="port (0 = pick a free one)")
    parser.add_argument("--port-file", help="write the origin URL to this file once listening")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.dir):
        parser.error(f"--dir {args.dir!r} is not a directory")
    return args


def _write_atomically(path: str, text: str) -> None:
    # Readers poll for the file; rename makes sure they never see a half-written URL.
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    done = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    with Origin(port=args.port) as origin:
        origin.serve_directory(args.dir)
        if args.port_file:
            _write_atomically(args.port_file, origin.url)
        print(f"origin listening on {origin.url}", file=sys.stderr, flush=True)
        while not done.wait(0.5):  # timed wait keeps the main thread responsive to signals
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
