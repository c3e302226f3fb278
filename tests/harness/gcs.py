"""Google Cloud Storage on loopback for the gs:// tests (#33 item 4): the
real `gcp-storage-emulator` (PyPI) behind a recording front, a fake GKE
metadata server and a fake OAuth token endpoint.

The emulator stores objects, generations, md5Hash and crc32c and answers
Range, but it lists every object in one answer (no pageToken), ignores
`generation=` on a download (it always serves the live object), checks no
credentials and never throttles. The front (`GcsFront`) adds what GCS does
there and the tests need: pages of at most `page_size` objects with a
`nextPageToken`; a download naming a generation that is no longer live
answers 404 (GCS without versioning); a bearer token it does not accept
answers 401; `GcsFault`s answer 429/503, cut a body short or pace it; and
every request is recorded. Everything else is the emulator's.

`GceMetadata` is the GKE metadata server (Workload Identity) as
google-auth asks it: the ping (`Metadata-Flavor: Google`), the account's
info and its tokens, each a fresh canary; `GceMetadata(present=False)`
answers like a host that is no metadata server (404, no flavor), so an
agent without credentials settles on anonymous at once. `TokenEndpoint`
is Google's OAuth token endpoint for a service-account key: it checks the
JWT assertion's RS256 signature against the key file the test made
(`key_file`). Every test points google-auth's GCE_METADATA_HOST and
GCE_METADATA_IP at one of these (`gcs_env`), and tests/conftest.py points
them at a closed loopback port for the whole session: nothing ever asks
169.254.169.254 or metadata.google.internal.
"""

from __future__ import annotations

import base64
import functools
import http.client
import itertools
import json
import secrets
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from tests.harness.lifecycle import Lifecycle
from tests.harness.loopback import HOST, Clients, LoopbackHTTP, TrackedHandler

_CHUNK = 64 * 1024
_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _ask(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=_TIMEOUT_S)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


class GcsEmulator(Lifecycle):
    """gcp-storage-emulator in this process, in memory, on 127.0.0.1."""

    _name = "gcp-storage-emulator"

    def __init__(self) -> None:
        self.port = _free_port()
        self._server: Any = None

    def start(self) -> Self:
        from gcp_storage_emulator.server import create_server

        self._server = create_server(HOST, self.port, in_memory=True)
        _no_state_file(self._server)
        self._server.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def create_bucket(self, bucket: str) -> None:
        status, _, _ = _ask(
            self.port,
            "POST",
            "/storage/v1/b",
            json.dumps({"name": bucket}).encode(),
            {"Content-Type": "application/json"},
        )
        assert status in (200, 409), status

    def put(self, bucket: str, name: str, data: bytes) -> dict[str, Any]:
        """Upload (a new generation) and return the object's resource."""
        self._upload(bucket, name, data)
        # Generations are clock-based: two uploads in one tick must differ.
        time.sleep(0.002)
        return self.meta(bucket, name)

    def put_many(self, bucket: str, objects: dict[str, bytes]) -> None:
        """Upload objects of distinct names without reading each one back
        (a listing test's thousand objects)."""
        for name, data in objects.items():
            self._upload(bucket, name, data)

    def _upload(self, bucket: str, name: str, data: bytes) -> None:
        query = urlencode({"uploadType": "media", "name": name})
        status, _, body = _ask(
            self.port,
            "POST",
            f"/upload/storage/v1/b/{quote(bucket, safe='')}/o?{query}",
            data,
            {"Content-Type": "application/octet-stream"},
        )
        assert status == 200, (status, body[:200])

    def meta(self, bucket: str, name: str) -> dict[str, Any]:
        status, _, body = _ask(
            self.port, "GET", f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"
        )
        assert status == 200, (status, name)
        doc: dict[str, Any] = json.loads(body)
        return doc


def _no_state_file(server: Any) -> None:
    """The emulator rewrites its whole state (every object's resource, as
    indented JSON) into a `.meta` file after each change, which only a
    restart of a persistent emulator reads back: in memory, a cost per
    upload that grows with every object stored (1,003 uploads took 17 s of
    a 24 s test). Dropped where the installed version has it; every answer
    is the emulator's as before."""
    storage = getattr(server, "_storage", None)
    if storage is not None and callable(getattr(storage, "_write_config_to_file", None)):
        storage._write_config_to_file = lambda: None


@dataclass(frozen=True)
class GcsRequest:
    method: str
    path: str  # percent-decoded
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    status: int
    body_bytes: int

    @property
    def kind(self) -> str:
        return _kind_of(self.path)

    @property
    def bearer(self) -> str | None:
        value = self.headers.get("authorization", "")
        return value[7:] if value.startswith("Bearer ") else None


def _kind_of(path: str) -> str:
    if path.startswith("/download/"):
        return "media"
    parts = path.split("/")
    # /storage/v1/b/<bucket>/o[/<name>]
    return "list" if len(parts) == 6 and parts[5] == "o" else "meta"


@dataclass
class GcsFault:
    """Misbehaviour for requests of one kind ("list", "meta", "media")."""

    kind: str
    times: int | None = None
    name: str | None = None  # only this object's requests (its name in the bucket)
    status: int | None = None
    retry_after: str | None = None
    cut_after_bytes: int | None = None  # the body ends early (a dropped connection)
    rate_bytes_per_s: int | None = None
    corrupt: bool = False  # one byte of the body flipped (a bad copy on the way)
    # The first so many matching requests are served as they are: the
    # fault applies from the next one on (the N-th GET of an object).
    after: int = 0


@dataclass
class _FrontState(Clients):
    upstream_port: int = 0
    page_size: int = 1000
    # None: every request is served (a public bucket); else the bearer
    # tokens accepted, read at each request (a test revokes by replacing).
    tokens: set[str] | None = None
    faults: list[GcsFault] = field(default_factory=list)
    log: list[GcsRequest] = field(default_factory=list)
    # Called with each media request once its answer is sent.
    after_media: Callable[[GcsRequest, int], None] | None = None
    # Body bytes sent so far under a media fault (a test waits on it).
    media_sent: int = 0
    # Names described as composite objects (`GcsFront.composite`).
    composite: set[str] = field(default_factory=set)
    # A listing without end (#41 item 5): every page is the first page's
    # objects, with a token of its own.
    endless: bool = False
    # Names stored gzip-encoded (`GcsFront.gzip_stored`, #41 item 6).
    gzipped: set[str] = field(default_factory=set)

    def described(self, item: dict[str, Any]) -> dict[str, Any]:
        """A resource as GCS describes it: a composite object has no md5Hash,
        an object uploaded with `gsutil cp -z` has its contentEncoding."""
        if item.get("name") in self.gzipped:
            item = item | {"contentEncoding": "gzip"}
        if item.get("name") not in self.composite:
            return item
        return {k: v for k, v in item.items() if k != "md5Hash"} | {"componentCount": 2}

    def __post_init__(self) -> None:
        Clients.__init__(self)

    def take_fault(self, kind: str, path: str) -> GcsFault | None:
        with self.lock:
            for fault in self.faults:
                if fault.name is not None and not path.endswith(f"/o/{fault.name}"):
                    continue
                if fault.kind == kind and fault.after > 0:
                    fault.after -= 1
                    continue
                if fault.kind == kind and (fault.times is None or fault.times > 0):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None


class _FrontHandler(TrackedHandler):
    @property
    def state(self) -> _FrontState:
        state = self.server.state
        assert isinstance(state, _FrontState)
        return state

    def answer(self, method: str) -> None:
        parts = urlsplit(self.path)
        path, query = unquote(parts.path), parse_qs(parts.query)
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, sent = self._serve(method, path, parts.query, query, headers)
        entry = GcsRequest(method, path, query, headers, status, sent)
        with self.state.lock:
            self.state.log.append(entry)
        hook = self.state.after_media
        if entry.kind == "media" and hook is not None:
            hook(entry, sent)

    def _serve(
        self,
        method: str,
        path: str,
        raw_query: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
    ) -> tuple[int, int]:
        state = self.state
        kind = _kind_of(path)
        accepted = state.tokens
        if accepted is not None:
            auth = headers.get("authorization", "")
            if not auth.startswith("Bearer ") or auth[7:] not in accepted:
                return self._json(401, {"error": {"code": 401, "message": "Invalid Credentials"}})
        fault = state.take_fault(kind, path)
        if fault is not None and fault.status is not None:
            extra = {"Retry-After": fault.retry_after} if fault.retry_after else {}
            return self._json(fault.status, {"error": {"code": fault.status}}, extra)
        if kind == "list":
            return self._list(path, query)
        if kind == "media":
            return self._media(path, raw_query, query, headers, fault)
        status, answer_headers, body = _ask(state.upstream_port, method, self.path)
        if kind == "meta" and status == 200 and (state.composite or state.gzipped):
            body = json.dumps(state.described(json.loads(body))).encode()
        return self._send(status, answer_headers, body, None)

    def _list(self, path: str, query: dict[str, list[str]]) -> tuple[int, int]:
        prefix = query.get("prefix", [""])[0]
        upstream = quote(path) + ("?" + urlencode({"prefix": prefix}) if prefix else "")
        status, headers, body = _ask(self.state.upstream_port, "GET", upstream)
        if status != 200:
            return self._send(status, headers, body, None)
        items = sorted(json.loads(body).get("items") or [], key=lambda i: i["name"])
        items = [self.state.described(item) for item in items]
        start = int(query.get("pageToken", ["0"])[0] or 0)
        size = min(self.state.page_size, int(query.get("maxResults", ["1000"])[0]))
        first = 0 if self.state.endless else start
        doc: dict[str, Any] = {"kind": "storage#objects", "items": items[first : first + size]}
        if start + size < len(items) or self.state.endless:
            doc["nextPageToken"] = str(start + size)
        return self._json(200, doc)

    def _media(
        self,
        path: str,
        raw_query: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
        fault: GcsFault | None,
    ) -> tuple[int, int]:
        bucket, name = path.split("/")[5], "/".join(path.split("/")[7:])
        meta_path = f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"
        status, _, body = _ask(self.state.upstream_port, "GET", meta_path)
        if status != 200:
            return self._json(404, {"error": {"code": 404, "message": "No such object"}})
        live = json.loads(body)["generation"]
        asked = query.get("generation", [None])[0]
        if asked is not None and asked != live:
            # GCS without object versioning: the old generation is gone.
            return self._json(404, {"error": {"code": 404, "message": "No such object"}})
        upstream = {"Range": headers["range"]} if "range" in headers else {}
        status, answer_headers, data = _ask(
            self.state.upstream_port,
            "GET",
            f"{meta_path.replace('/storage', '/download/storage', 1)}?alt=media",
            None,
            upstream,
        )
        answer_headers["x-goog-generation"] = live
        if name in self.state.gzipped and status in (200, 206):
            status, data = self._gzip_stored(status, answer_headers, data, headers, meta_path)
        if fault is not None and fault.corrupt and data:
            middle = len(data) // 2
            data = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]
        return self._send(status, answer_headers, data, fault)

    def _gzip_stored(
        self,
        status: int,
        answer_headers: dict[str, str],
        data: bytes,
        headers: dict[str, str],
        meta_path: str,
    ) -> tuple[int, bytes]:
        """GCS's answers for an object stored with Content-Encoding: gzip
        (its transcoding documentation): a request that accepts gzip gets
        the stored bytes, labelled; any other gets them decompressed
        (decompressive transcoding), the whole object whatever Range asked,
        with the stored coding and length in x-goog-stored-* headers."""
        import gzip

        if "gzip" in headers.get("accept-encoding", "").lower():
            answer_headers["content-encoding"] = "gzip"
            return status, data
        _, _, stored = _ask(
            self.state.upstream_port,
            "GET",
            f"{meta_path.replace('/storage', '/download/storage', 1)}?alt=media",
        )
        answer_headers.pop("content-range", None)
        answer_headers["x-goog-stored-content-encoding"] = "gzip"
        answer_headers["x-goog-stored-content-length"] = str(len(stored))
        return 200, gzip.decompress(stored)

    def _json(self, status: int, doc: Any, extra: dict[str, str] | None = None) -> tuple[int, int]:
        body = json.dumps(doc).encode()
        headers = {"content-type": "application/json", **(extra or {})}
        return self._send(status, headers, body, None)

    def _send(
        self, status: int, headers: dict[str, str], body: bytes, fault: GcsFault | None
    ) -> tuple[int, int]:
        self.send_response(status)
        for name in (
            "content-type",
            "content-range",
            "content-encoding",
            "x-goog-stored-content-encoding",
            "x-goog-stored-content-length",
            "x-goog-hash",
            "x-goog-generation",
            "retry-after",
        ):
            if name in headers:
                self.send_header(name, headers[name])
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD":
            return status, 0
        limit = len(body)
        if fault is not None and fault.cut_after_bytes is not None:
            limit = min(limit, fault.cut_after_bytes)
        sent = 0
        try:
            while sent < limit:
                piece = body[sent : min(limit, sent + _CHUNK)]
                self.wfile.write(piece)
                self.wfile.flush()
                sent += len(piece)
                if fault is not None:
                    with self.state.lock:
                        self.state.media_sent += len(piece)
                rate = fault.rate_bytes_per_s if fault is not None else None
                if rate and self.state.stop.wait(len(piece) / rate):
                    break
        except OSError:
            self.close_connection = True
            return status, sent
        if sent < len(body):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        return status, sent


class GcsFront(LoopbackHTTP):
    """The emulator as the agent sees it (STORAGE_EMULATOR_HOST=front.url)."""

    _name = "gcs-front"

    def __init__(self, emulator: GcsEmulator, *, tls: ssl.SSLContext | None = None) -> None:
        self.emulator = emulator
        self.state = _FrontState(upstream_port=emulator.port)
        super().__init__(self.state, _FrontHandler, tls=tls)

    def requests(self, kind: str | None = None) -> list[GcsRequest]:
        with self.state.lock:
            return [r for r in self.state.log if kind is None or r.kind == kind]

    def fault(self, fault: GcsFault) -> None:
        with self.state.lock:
            self.state.faults.append(fault)

    def composite(self, *names: str) -> None:
        """Describe these objects as GCS describes composed ones (`compose`,
        parallel composite uploads): crc32c and no md5Hash. The emulator
        gives every object an md5Hash, composed or not."""
        with self.state.lock:
            self.state.composite.update(names)

    def gzip_stored(self, *names: str) -> None:
        """Describe and serve these objects as GCS does those uploaded with
        `gsutil cp -z` (#41 item 6): contentEncoding gzip in the resource,
        the stored bytes only to a request that accepts gzip, else
        decompressive transcoding. The test uploads the gzip bytes."""
        with self.state.lock:
            self.state.gzipped.update(names)

    def accept(self, *tokens: str) -> None:
        """Accept exactly these bearer tokens from now on (none: any request)."""
        with self.state.lock:
            self.state.tokens = set(tokens) if tokens else None


# -- credentials ------------------------------------------------------------------------------


class _MetadataState(Clients):
    def __init__(self, present: bool, expires_in_s: int) -> None:
        super().__init__()
        self.present = present
        self.expires_in_s = expires_in_s
        self.issued: list[str] = []
        self.paths: list[str] = []
        self.on_issue: Callable[[str], None] | None = None


class _MetadataHandler(TrackedHandler):
    def answer(self, method: str) -> None:
        state = self.server.state
        assert isinstance(state, _MetadataState)
        path = urlsplit(self.path).path
        with state.lock:
            state.paths.append(path)
        if not state.present:
            self._reply(404, b"not a metadata server", {})
            return
        flavor = {"Metadata-Flavor": "Google"}
        if self.headers.get("Metadata-Flavor") != "Google":
            self._reply(403, b"Missing Metadata-Flavor:Google header.", flavor)
            return
        if path in ("/", "/computeMetadata/v1/"):
            self._reply(200, b"computeMetadata/", {**flavor, "Content-Type": "application/text"})
        elif path.endswith("/token"):
            token = "ya29.wi-" + secrets.token_urlsafe(24)
            with state.lock:
                state.issued.append(token)
            if state.on_issue is not None:
                state.on_issue(token)
            doc = {"access_token": token, "expires_in": state.expires_in_s, "token_type": "Bearer"}
            self._json(doc, flavor)
        elif path.startswith("/computeMetadata/v1/instance/service-accounts/default"):
            doc2 = {
                "email": "model-reader@proj.iam.gserviceaccount.com",
                "scopes": ["cloud-platform"],
                "aliases": ["default"],
            }
            self._json(doc2, flavor)
        else:
            self._reply(404, b"not found", flavor)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.answer("POST")

    def _json(self, doc: Any, headers: dict[str, str]) -> None:
        self._reply(200, json.dumps(doc).encode(), {**headers, "Content-Type": "application/json"})

    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class GceMetadata(LoopbackHTTP):
    """The GKE metadata server (Workload Identity), or a host without one."""

    _name = "gce-metadata"

    def __init__(self, *, present: bool = True, expires_in_s: int = 3600) -> None:
        self.state = _MetadataState(present, expires_in_s)
        super().__init__(self.state, _MetadataHandler)

    @property
    def hostport(self) -> str:
        return self.url.removeprefix("http://")

    @property
    def issued(self) -> list[str]:
        with self.state.lock:
            return list(self.state.issued)


class _TokenState(Clients):
    def __init__(self, public_pem: bytes, expires_in_s: int) -> None:
        super().__init__()
        self.public_pem = public_pem
        self.expires_in_s = expires_in_s
        self.issued: list[str] = []
        self.refused = 0
        self.on_issue: Callable[[str], None] | None = None


class _TokenHandler(TrackedHandler):
    def do_POST(self) -> None:
        state = self.server.state
        assert isinstance(state, _TokenState)
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode())
        assertion = form.get("assertion", [""])[0]
        if not _rs256_ok(assertion, state.public_pem):
            with state.lock:
                state.refused += 1
            body = json.dumps(
                {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
            )
            self._reply(400, body.encode())
            return
        token = "ya29.sa-" + secrets.token_urlsafe(24)
        with state.lock:
            state.issued.append(token)
        if state.on_issue is not None:
            state.on_issue(token)
        doc = {"access_token": token, "expires_in": state.expires_in_s, "token_type": "Bearer"}
        self._reply(200, json.dumps(doc).encode())

    def answer(self, method: str) -> None:
        self._reply(405, b"")

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _rs256_ok(jwt: str, public_pem: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    try:
        head, claims, sig = jwt.split(".")
        signature = base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4))
        key: Any = serialization.load_pem_public_key(public_pem)
        key.verify(signature, f"{head}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256())
    except (ValueError, InvalidSignature):
        return False
    return True


@functools.cache
def _rsa_key(role: str) -> Any:
    """One 2048-bit key per role for the session (each takes a noticeable
    part of a second to make): the endpoint's own, and another one that it
    refuses."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class TokenEndpoint(LoopbackHTTP):
    """Google's OAuth token endpoint for a service-account key's JWT grant."""

    _name = "oauth-token"

    def __init__(self, *, expires_in_s: int = 3600) -> None:
        from cryptography.hazmat.primitives import serialization

        self.private_key = _rsa_key("service-account")
        public_pem = self.private_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.state = _TokenState(public_pem, expires_in_s)
        super().__init__(self.state, _TokenHandler)

    @property
    def issued(self) -> list[str]:
        with self.state.lock:
            return list(self.state.issued)

    def key_file(self, path: Path, *, own_key: bool = True) -> Path:
        """A service-account key file whose token_uri is this endpoint;
        `own_key=False`: signed with another key (a revoked or wrong key)."""
        from cryptography.hazmat.primitives import serialization

        key = self.private_key if own_key else _rsa_key("another")
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        doc = {
            "type": "service_account",
            "project_id": "proj",
            "private_key_id": secrets.token_hex(20),
            "private_key": pem,
            "client_email": "model-reader@proj.iam.gserviceaccount.com",
            "client_id": "1234567890",
            "token_uri": f"{self.url}/token",
        }
        path.write_text(json.dumps(doc))
        return path


# -- the agent's environment ------------------------------------------------------------------


def gcs_env(front: GcsFront, metadata: GceMetadata, **extra: str) -> dict[str, str]:
    """What a pod of a gs:// test gets: the front as API_ENDPOINT_OVERRIDE
    (a custom endpoint, sent the credentials as google-cloud-storage sends
    them; STORAGE_EMULATOR_HOST would be anonymous, #33 review item 5) and
    google-auth's metadata variables on the suite's own fake."""
    return {
        "API_ENDPOINT_OVERRIDE": front.url,
        "GCE_METADATA_HOST": metadata.hostport,
        "GCE_METADATA_IP": metadata.hostport,
        **extra,
    }


_BUCKETS = itertools.count(1)


def new_bucket(emulator: GcsEmulator) -> str:
    name = f"models-{next(_BUCKETS)}-{secrets.token_hex(3)}"
    emulator.create_bucket(name)
    return name
