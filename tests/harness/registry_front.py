"""A recording, fault-injecting front in front of the real registry
(tests/harness/registry.py), on loopback: every request the agent makes
goes through it and is recorded (method, path, Range, whether it carried
an Authorization), and a test scripts what the registry "does" wrong:

- `fail(match, status, times)`: answer `status` (429, 503, ...) instead;
- `cut(match, after_bytes)`: send the headers and `after_bytes` of the
  body, then drop the connection;
- `flip(match, at)`: one byte of the body changed in flight;
- `ignore_range`: Range stripped, so the registry answers 200 and all;
- `delay(match, seconds)`: wait before forwarding (a token expires);
- `slow(match, bytes_per_s)`: the body sent at that rate (a kill lands
  mid-layer); `sent_bytes` counts the body bytes sent to the agent;
- `redirect_blobs(storage)`: blob GETs answered 307 to another host,
  `BlobStorage`, which serves the same bytes without asking for auth and
  records whether an Authorization reached it.

`match` is a substring of the request path; each fault applies to as many
requests as `times` says (default 1).
"""

from __future__ import annotations

import http.client
import time
from dataclasses import dataclass, field

from tests.harness.loopback import Clients, LoopbackHTTP, LoopbackServer, TrackedHandler
from tests.harness.registry import HOST, Registry

_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "host", "content-length"})


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    range: str
    authorized: bool
    status: int


@dataclass
class Fault:
    match: str
    kind: str
    times: int = 1
    status: int = 0
    at: int = 0
    seconds: float = 0.0


@dataclass
class FrontState(Clients):
    upstream_port: int = 0
    faults: list[Fault] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    ignore_range: bool = False
    sent_bytes: int = 0
    storage: BlobStorage | None = None

    def __post_init__(self) -> None:
        Clients.__init__(self)

    def take(self, path: str, kinds: tuple[str, ...]) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.kind in kinds and fault.match in path and fault.times > 0:
                    fault.times -= 1
                    return fault
        return None


class RegistryFront(LoopbackHTTP):
    _name = "registry-front"

    def __init__(self, registry: Registry) -> None:
        self.state = FrontState(upstream_port=registry.port)
        super().__init__(self.state, _FrontHandler)

    @property
    def hostport(self) -> str:
        return self.url.removeprefix("http://")

    def add(self, match: str, kind: str, **kw: float) -> None:
        with self.state.lock:
            self.state.faults.append(Fault(match, kind, **kw))  # type: ignore[arg-type]

    def fail(self, match: str, status: int, times: int = 1) -> None:
        self.add(match, "fail", status=status, times=times)

    def cut(self, match: str, after_bytes: int, times: int = 1) -> None:
        self.add(match, "cut", at=after_bytes, times=times)

    def flip(self, match: str, at: int, times: int = 1) -> None:
        self.add(match, "flip", at=at, times=times)

    def delay(self, match: str, seconds: float, times: int = 1) -> None:
        self.add(match, "delay", seconds=seconds, times=times)

    def slow(self, match: str, bytes_per_s: int, times: int = 1) -> None:
        self.add(match, "slow", at=bytes_per_s, times=times)

    def seen(self, method: str = "", part: str = "") -> list[Seen]:
        with self.state.lock:
            return [
                s for s in self.state.seen if (not method or s.method == method) and part in s.path
            ]


class _FrontHandler(TrackedHandler):
    server: LoopbackServer

    @property
    def front(self) -> FrontState:
        state = self.server.state
        assert isinstance(state, FrontState)
        return state

    def do_GET(self) -> None:
        self._forward("GET")

    def do_HEAD(self) -> None:
        self._forward("HEAD")

    def _record(self, method: str, status: int) -> None:
        with self.front.lock:
            self.front.seen.append(
                Seen(
                    method,
                    self.path,
                    self.headers.get("Range", ""),
                    "Authorization" in self.headers,
                    status,
                )
            )

    def _forward(self, method: str) -> None:
        front = self.front
        delayed = front.take(self.path, ("delay",))
        if delayed is not None:
            time.sleep(delayed.seconds)
        failed = front.take(self.path, ("fail",))
        if failed is not None:
            self._record(method, failed.status)
            self._plain(failed.status, {"Retry-After": "0"})
            return
        if front.storage is not None and method == "GET" and "/blobs/" in self.path:
            self._record(method, 307)
            self._plain(307, {"Location": f"{front.storage.url}{self.path}"})
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        if front.ignore_range:
            headers.pop("Range", None)
        self._relay(method, headers)

    def _relay(self, method: str, headers: dict[str, str]) -> None:
        front = self.front
        conn = http.client.HTTPConnection(HOST, front.upstream_port, timeout=30)
        conn.request(method, self.path, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        self._record(method, resp.status)
        flip = front.take(self.path, ("flip",)) if body else None
        if flip is not None and flip.at < len(body):
            body = body[: flip.at] + bytes([body[flip.at] ^ 0xFF]) + body[flip.at + 1 :]
        self.send_response(resp.status)
        for name, value in resp.getheaders():
            if name.lower() not in _HOP:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if method == "HEAD":
            return
        cut = front.take(self.path, ("cut",))
        if cut is not None:
            self.wfile.write(body[: cut.at])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        slow = front.take(self.path, ("slow",))
        step = max(1, slow.at // 20) if slow is not None else len(body) or 1
        for start in range(0, len(body), step):
            self.wfile.write(body[start : start + step])
            with front.lock:
                front.sent_bytes += len(body[start : start + step])
            if slow is not None:
                time.sleep(0.05)

    def _plain(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()


class BlobStorage(LoopbackHTTP):
    """Another host serving blobs (S3 or a CDN behind a registry): it reads
    them from the registry with the harness's own credentials and records
    whether the agent sent it an Authorization (it never should). Named
    `localhost`, so it is another origin than the registry's 127.0.0.1."""

    _name = "blob-storage"

    def __init__(self, registry: Registry) -> None:
        self.state = StorageState(registry)
        super().__init__(self.state, _StorageHandler)

    @property
    def authorized(self) -> list[bool]:
        return self.state.authorized

    @property
    def expired(self) -> int:
        return self.state.expired

    @expired.setter
    def expired(self, count: int) -> None:
        self.state.expired = count

    @property
    def url(self) -> str:
        return super().url.replace(HOST, "localhost")


class StorageState(Clients):
    def __init__(self, registry: Registry) -> None:
        super().__init__()
        self.registry = registry
        self.authorized: list[bool] = []
        # Answer 403 to this many requests first (a signed URL expired).
        self.expired = 0


class _StorageHandler(TrackedHandler):
    def do_GET(self) -> None:
        storage = self.server.state
        assert isinstance(storage, StorageState)
        storage.authorized.append("Authorization" in self.headers)
        if storage.expired > 0:
            storage.expired -= 1
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        repo, _, digest = self.path.removeprefix("/v2/").partition("/blobs/")
        data = storage.registry.read_blob(repo, digest)
        start, end = 0, len(data) - 1
        wanted = self.headers.get("Range", "")
        if wanted.startswith("bytes="):
            first, _, last = wanted[6:].partition("-")
            start, end = int(first), int(last) if last else len(data) - 1
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self.wfile.write(data[start : end + 1])
