"""A recording reverse proxy in front of a real S3 server (SeaweedFS), on
127.0.0.1, that lets tests see every request the agent sent and make the
server misbehave the way AWS S3 does.

SeaweedFS keeps no request log a test could read, and it neither throttles
nor knows regions. The front forwards each request unchanged (Host header
included, so SigV4 and presigned signatures are still checked by SeaweedFS
against what the client signed) and records method, path, query, headers,
status and body bytes. A `S3Fault` answers instead of the server, like S3
would (`503 SlowDown` with an XML body, none for HEAD), ignores `Range`,
delays a request (so a presigned URL or its credentials expire in flight),
cuts a body short or paces it. `bucket_regions` makes a bucket live in
another region: a request signed for the wrong region gets AWS's answer
(301 `PermanentRedirect` with `x-amz-bucket-region`); one signed for the
right region goes to SeaweedFS, which checks the signature with that region.

The front can also terminate TLS (`tls=`), so HTTPS S3 is real TLS with the
test CA while SeaweedFS itself speaks plain HTTP on loopback.
"""

from __future__ import annotations

import http.client
import re
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Self
from urllib.parse import parse_qs, unquote, urlsplit

from tests.harness.lifecycle import Lifecycle
from tests.harness.loopback import LoopbackServer

_HOST = "127.0.0.1"
_CHUNK = 256 * 1024
_UPSTREAM_TIMEOUT_S = 30.0
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_SCOPE_RE = re.compile(r"Credential=[^/,]+/\d{8}/([^/,]+)/s3/aws4_request")


@dataclass(frozen=True)
class S3Request:
    """One request as the front received it (header names lower-cased)."""

    method: str
    path: str  # percent-decoded path
    query: str  # raw query string
    headers: dict[str, str]
    status: int
    body_bytes: int  # response body bytes handed to the client

    @property
    def params(self) -> dict[str, list[str]]:
        return parse_qs(self.query)


@dataclass
class S3Fault:
    """Misbehaviour for one path (`"/bucket/key"`, or `"*"` for every path);
    fields combine. `times` counts matching requests."""

    methods: tuple[str, ...] = ("GET", "HEAD")
    times: int | None = None
    status: int | None = None
    code: str = ""  # the S3 error code of the XML body (GET only)
    retry_after: str | None = None
    delay_s: float = 0.0  # before the request is forwarded
    ignore_range: bool = False
    truncate_after: int | None = None
    rate_bytes_per_s: int | None = None
    # A hop that compresses what it relays (#29 item 11): a GET's 200 body
    # gzipped, with `Content-Encoding: gzip` and the gzipped length.
    gzip_body: bool = False
    # A hop that repeats the Content-Length line (RFC 9110 §8.6 allows the
    # same value twice; a client reads it joined, `N, N`).
    length_twice: bool = False
    # A hop that flips one byte of each GET body it relays (the middle of
    # its first piece): the bytes differ, the framing does not (#33).
    corrupt: bool = False
    # A listing that goes round (#41 item 5): every matching request after
    # the first is answered with the first's answer (the same page, the
    # same token), `rewrite` applied to that first body (e.g. an S3 page
    # made truncated with a continuation token: SeaweedFS's pages are of
    # 1,000 keys, and SigV4 signs the query a front could lower).
    replay_first: bool = False
    rewrite: Callable[[bytes], bytes] | None = None
    # Headers added to the relayed answer, as a store that encrypted the
    # object says so (`x-amz-server-side-encryption: aws:kms`, #41 item 7).
    add_headers: tuple[tuple[str, str], ...] = ()


@dataclass
class _Entry:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    status: int = 0
    body_bytes: int = 0

    def freeze(self) -> S3Request:
        return S3Request(
            self.method, self.path, self.query, dict(self.headers), self.status, self.body_bytes
        )


@dataclass
class _State:
    upstream_port: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    log: list[_Entry] = field(default_factory=list)
    faults: dict[str, S3Fault] = field(default_factory=dict)
    uses: dict[str, int] = field(default_factory=dict)
    bucket_regions: dict[str, str] = field(default_factory=dict)
    hook: Callable[[S3Request], None] | None = None
    upstream_tls: ssl.SSLContext | None = None
    # Query parameters lowered on the way up (`S3Front.cap_query`).
    query_caps: dict[str, int] = field(default_factory=dict)
    # The first answer per path of a `replay_first` fault: status, reason,
    # headers, body.
    replayed: dict[str, tuple[int, str, list[tuple[str, str]], bytes]] = field(default_factory=dict)

    def take_fault(self, path: str, method: str) -> S3Fault | None:
        with self.lock:
            for key in (path, "*"):
                fault = self.faults.get(key)
                if fault is None or method not in fault.methods:
                    continue
                used = self.uses.get(key, 0)
                if fault.times is not None and used >= fault.times:
                    continue
                self.uses[key] = used + 1
                return fault
        return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: LoopbackServer  # whose state is a _State
    _entry: _Entry

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            try:
                self.request.do_handshake()
            except (OSError, ssl.SSLError):
                self.close_connection = True
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self._answer("GET")

    def do_HEAD(self) -> None:
        self._answer("HEAD")

    def do_PUT(self) -> None:
        self._answer("PUT")

    def do_POST(self) -> None:
        self._answer("POST")

    def do_DELETE(self) -> None:
        self._answer("DELETE")

    def _answer(self, method: str) -> None:
        parts = urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        self._entry = _Entry(method, unquote(parts.path), parts.query, headers)
        state = self.server.state
        with state.lock:
            state.log.append(self._entry)
        try:
            self._dispatch(method, state)
        except OSError:
            self.close_connection = True

    def _dispatch(self, method: str, state: _State) -> None:
        body = self._request_body()
        hook = state.hook
        if hook is not None:
            hook(self._entry.freeze())
        fault = state.take_fault(self._entry.path, method) or S3Fault()
        if fault.delay_s > 0 and state.stop.wait(fault.delay_s):
            self.close_connection = True
            return
        if fault.status is not None:
            extra = [] if fault.retry_after is None else [("Retry-After", fault.retry_after)]
            self._error(method, fault.status, fault.code or "InjectedFault", extra)
            return
        wrong = self._wrong_region(state)
        if wrong is not None:
            self._error(method, 301, "PermanentRedirect", [("x-amz-bucket-region", wrong)])
            return
        self._forward(method, body, fault, state)

    def _request_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _wrong_region(self, state: _State) -> str | None:
        """The bucket's region when the request was signed for another one."""
        bucket = self._entry.path.lstrip("/").split("/", 1)[0]
        region = state.bucket_regions.get(bucket)
        if region is None:
            return None
        query = parse_qs(self._entry.query)
        credential = query.get("X-Amz-Credential", [""])[0]
        signed = self._entry.headers.get("authorization", "") or f"Credential={credential}"
        match = _SCOPE_RE.search(signed)
        return region if match is None or match.group(1) != region else None

    def _error(self, method: str, status: int, code: str, extra: list[tuple[str, str]]) -> None:
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{code}</Message><Resource>{self._entry.path}</Resource></Error>"
        ).encode()
        self._entry.status = status
        self.send_response(status)
        for name, value in extra:
            self.send_header(name, value)
        self.send_header("Content-Type", "application/xml")
        # S3 sends no body with a HEAD answer, so a client can map it by status only.
        self.send_header("Content-Length", "0" if method == "HEAD" else str(len(body)))
        self.end_headers()
        if method != "HEAD":
            self._write(body)

    def _forward(self, method: str, body: bytes, fault: S3Fault, state: _State) -> None:
        headers = {
            k: v
            for k, v in self.headers.items()
            if k.lower() not in _HOP_BY_HOP
            and not (fault.ignore_range and k.lower() in ("range", "if-range"))
        }
        upstream: http.client.HTTPConnection
        if state.upstream_tls is not None:
            # An upstream that only speaks TLS (Azurite's OAuth, #33 item 2).
            upstream = http.client.HTTPSConnection(
                _HOST, state.upstream_port, timeout=_UPSTREAM_TIMEOUT_S, context=state.upstream_tls
            )
        else:
            upstream = http.client.HTTPConnection(
                _HOST, state.upstream_port, timeout=_UPSTREAM_TIMEOUT_S
            )
        try:
            target = _capped(self.path, state.query_caps)
            upstream.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in headers.items():
                upstream.putheader(name, value)
            upstream.endheaders(body or None)
            response = upstream.getresponse()
            if fault.replay_first:
                self._replay(response, fault, state)
            else:
                self._relay(method, response, fault)
        finally:
            upstream.close()

    def _relay(self, method: str, response: http.client.HTTPResponse, fault: S3Fault) -> None:
        self._entry.status = response.status
        if fault.gzip_body and method == "GET" and response.status == 200:
            self._relay_gzipped(response)
            return
        self.send_response_only(response.status, response.reason)
        length = response.getheader("Content-Length")
        for name, value in response.getheaders():
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                self.send_header(name, value)
        if fault.ignore_range:
            self.send_header("Accept-Ranges", "none")
        for name, value in fault.add_headers:
            self.send_header(name, value)
        if length is not None:
            self.send_header("Content-Length", length)
            if fault.length_twice:
                self.send_header("Content-Length", length)
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if method == "HEAD":
            return
        self._relay_body(response, fault, None if length is None else int(length))

    def _replay(self, response: http.client.HTTPResponse, fault: S3Fault, state: _State) -> None:
        """The first answer this path got, again and again (GET only)."""
        skipped = _HOP_BY_HOP | {"content-length"}
        headers = [(n, v) for n, v in response.getheaders() if n.lower() not in skipped]
        data = response.read()
        if fault.rewrite is not None:
            data = fault.rewrite(data)
        with state.lock:
            first = state.replayed.setdefault(
                self._entry.path, (response.status, response.reason, headers, data)
            )
        status, reason, headers, data = first
        self._entry.status = status
        self.send_response_only(status, reason)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self._write(data)

    def _relay_gzipped(self, response: http.client.HTTPResponse) -> None:
        import gzip

        body = gzip.compress(response.read())
        self.send_response_only(200, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in _HOP_BY_HOP | {"content-length", "content-encoding"}:
                self.send_header(name, value)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self._write(body)

    def _relay_body(
        self, response: http.client.HTTPResponse, fault: S3Fault, length: int | None
    ) -> None:
        limit = fault.truncate_after
        rate = fault.rate_bytes_per_s
        chunk = _CHUNK if rate is None else max(1, min(_CHUNK, rate // 20))
        started = time.monotonic()
        while not self.server.state.stop.is_set():
            want = chunk if limit is None else min(chunk, limit - self._entry.body_bytes)
            piece = response.read(want) if want > 0 else b""
            if not piece:
                break
            if fault.corrupt and self._entry.body_bytes == 0:
                middle = len(piece) // 2
                piece = piece[:middle] + bytes([piece[middle] ^ 0xFF]) + piece[middle + 1 :]
            self._write(piece)
            if rate is not None:
                ahead_s = self._entry.body_bytes / rate - (time.monotonic() - started)
                if ahead_s > 0:
                    time.sleep(ahead_s)
        if length is not None and self._entry.body_bytes < length:
            self.close_connection = True  # the promised length was not delivered

    def _write(self, data: bytes) -> None:
        self.wfile.write(data)
        self._entry.body_bytes += len(data)


def _capped(target: str, caps: dict[str, int]) -> str:
    """The request target with each capped integer parameter at most its cap."""
    if not caps or "?" not in target:
        return target
    path, query = target.split("?", 1)
    pairs = []
    for pair in query.split("&"):
        name, sep, value = pair.partition("=")
        cap = caps.get(name)
        if cap is not None and value.isdigit() and int(value) > cap:
            value = str(cap)
        pairs.append(f"{name}{sep}{value}")
    return f"{path}?{'&'.join(pairs)}"


class S3Front(Lifecycle):
    """The recording, fault-injecting front of one S3 server."""

    def __init__(
        self,
        upstream_port: int,
        *,
        tls: ssl.SSLContext | None = None,
        upstream_tls: ssl.SSLContext | None = None,
    ) -> None:
        self._state = _State(upstream_port, upstream_tls=upstream_tls)
        self._tls = tls
        self._server: LoopbackServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        self._server = LoopbackServer(self._state, self._tls, 0, _Handler)  # type: ignore[arg-type]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="s3-front",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._state.stop.set()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(1.0)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("S3 front not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"{'https' if self._tls else 'http'}://{_HOST}:{self.port}"

    def requests(self, method: str | None = None) -> list[S3Request]:
        with self._state.lock:
            log = [e.freeze() for e in self._state.log]
        return [r for r in log if method is None or r.method == method]

    def clear(self) -> None:
        """Forget the log, the faults and the regions (a test's clean slate)."""
        with self._state.lock:
            self._state.log.clear()
            self._state.faults.clear()
            self._state.uses.clear()
            self._state.bucket_regions.clear()
            self._state.query_caps.clear()
            self._state.replayed.clear()
            self._state.hook = None

    def set_fault(self, path: str, fault: S3Fault) -> None:
        with self._state.lock:
            self._state.faults[path] = fault
            self._state.uses.pop(path, None)
            self._state.replayed.pop(path, None)

    def cap_query(self, name: str, most: int) -> None:
        """Forward the integer query parameter `name` as at most `most` (the
        log keeps what the client sent): a service answering smaller pages
        than asked, as Azure's List Blobs may (fewer than `maxresults`,
        with a NextMarker). Not for a request whose signature covers its
        query (SigV4); a SAS signs its own fields only."""
        with self._state.lock:
            self._state.query_caps[name] = most

    def set_bucket_region(self, bucket: str, region: str) -> None:
        with self._state.lock:
            self._state.bucket_regions[bucket] = region

    def on_request(self, hook: Callable[[S3Request], None] | None) -> None:
        """Run `hook` before each request is answered (status 0 in its argument)."""
        with self._state.lock:
            self._state.hook = hook
