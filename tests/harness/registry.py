"""A real OCI registry on loopback (#43 item 5): Debian's `docker-registry`,
the CNCF distribution, storage in a temporary directory, in one of three
modes:

- "anonymous": anyone pulls and pushes;
- "basic": htpasswd Basic auth (`htpasswd -B` of apache2-utils);
- "token": the bearer-token flow; the registry checks JWTs (RS256, the
  certificate in an `x5c` header, trusted by its rootcertbundle) that the
  suite's own `TokenServer` issues at its realm after checking Basic
  credentials or an identity (refresh) token.

`push_*` helpers speak the registry API as any client does (POST an upload,
PUT it with its digest, PUT the manifest), so each layout a test needs is
built here, byte for byte, by the suite.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Self
from urllib.parse import parse_qs, urlsplit

from tests.harness.lifecycle import Lifecycle
from tests.harness.loopback import Clients, LoopbackHTTP, TrackedHandler

Mode = Literal["anonymous", "basic", "token"]
HOST = "127.0.0.1"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
EMPTY_CONFIG = b"{}"
SERVICE = "llmkube-test-registry"
_LEEWAY_S = 60


class RegistryUnavailable(RuntimeError):
    pass


def registry_binary() -> str | None:
    return shutil.which("docker-registry") or shutil.which("registry")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Registry(Lifecycle):
    mode: Mode = "anonymous"
    user: str = "puller"
    password: str = "pw-0"
    # A token's life: short ones expire during a pull (Docker Hub's is 300 s).
    token_ttl_s: int = 300
    port: int = 0
    work: str = ""
    token_server: TokenServer | None = None
    _server: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def hostport(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.hostport}"

    def start(self) -> Self:
        binary = registry_binary()
        if binary is None:
            raise RegistryUnavailable("docker-registry (Debian package docker-registry)")
        self.work = tempfile.mkdtemp(prefix="llmkube-registry-")
        try:
            self._start(binary)
        except BaseException:
            self.close()
            raise
        return self

    def _start(self, binary: str) -> None:
        self.port = free_port()
        auth = self._auth_config()
        config = {
            "version": 0.1,
            "log": {"level": "warn"},
            "storage": {
                "filesystem": {"rootdirectory": os.path.join(self.work, "data")},
                "delete": {"enabled": True},
            },
            "http": {"addr": self.hostport, "secret": "test-secret"},
            **({"auth": auth} if auth else {}),
        }
        path = os.path.join(self.work, "config.yml")
        with open(path, "w") as handle:
            json.dump(config, handle)  # YAML reads JSON
        self._server = subprocess.Popen(
            [binary, "serve", path],
            stdout=open(os.path.join(self.work, "registry.log"), "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self._await_ready()

    def _auth_config(self) -> dict[str, Any] | None:
        if self.mode == "basic":
            htpasswd = shutil.which("htpasswd")
            if htpasswd is None:
                raise RegistryUnavailable("htpasswd (Debian package apache2-utils)")
            path = os.path.join(self.work, "htpasswd")
            subprocess.run(
                [htpasswd, "-Bbc", path, self.user, self.password],
                check=True,
                capture_output=True,
            )
            return {"htpasswd": {"realm": "test", "path": path}}
        if self.mode == "token":
            self.token_server = TokenServer(
                self.user, self.password, self.work, self.token_ttl_s
            ).start()
            return {
                "token": {
                    "realm": self.token_server.realm,
                    "service": SERVICE,
                    "issuer": TokenServer.ISSUER,
                    "rootcertbundle": self.token_server.cert_path,
                }
            }
        return None

    def _await_ready(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self._server is not None
            if self._server.poll() is not None:
                raise RegistryUnavailable(f"docker-registry exited: {self.log()[-2000:]}")
            with contextlib.suppress(OSError):
                conn = http.client.HTTPConnection(HOST, self.port, timeout=2)
                conn.request("GET", "/v2/")
                conn.getresponse().read()
                conn.close()
                return
            time.sleep(0.05)
        raise RegistryUnavailable("docker-registry did not answer in 20 s")

    def log(self) -> str:
        with contextlib.suppress(OSError), open(os.path.join(self.work, "registry.log")) as h:
            return h.read()
        return ""

    def close(self) -> None:
        if self._server is not None:
            self._server.terminate()
            try:
                self._server.wait(5)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
            self._server = None
        if self.token_server is not None:
            self.token_server.close()
            self.token_server = None
        if self.work:
            shutil.rmtree(self.work, ignore_errors=True)
            self.work = ""

    # -- pushing ----------------------------------------------------------------------

    def _push_auth(self, repo: str) -> dict[str, str]:
        if self.mode == "basic":
            raw = f"{self.user}:{self.password}".encode()
            return {"Authorization": "Basic " + base64.b64encode(raw).decode()}
        if self.mode == "token":
            assert self.token_server is not None
            token = self.token_server.mint(self.user, [(repo, ["pull", "push"])])
            return {"Authorization": f"Bearer {token}"}
        return {}

    def _call(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=30)
        conn.request(method, path, body=body, headers=dict(headers))
        resp = conn.getresponse()
        resp.read()
        conn.close()
        return resp

    def push_blob(self, repo: str, data: bytes) -> str:
        digest = sha256_digest(data)
        auth = self._push_auth(repo)
        resp = self._call("POST", f"/v2/{repo}/blobs/uploads/", b"", auth)
        assert resp.status == 202, (resp.status, self.log()[-1000:])
        location = resp.getheader("Location") or ""
        parts = urlsplit(location)
        sep = "&" if parts.query else "?"
        target = f"{parts.path}?{parts.query}{sep}digest={digest}".replace("?&", "?")
        headers = {**auth, "Content-Type": "application/octet-stream"}
        resp = self._call("PUT", target, data, headers)
        assert resp.status == 201, resp.status
        return digest

    def read_blob(self, repo: str, digest: str) -> bytes:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=30)
        conn.request("GET", f"/v2/{repo}/blobs/{digest}", headers=self._push_auth(repo))
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        assert resp.status == 200, resp.status
        return data

    def push_manifest(self, repo: str, reference: str, doc: Mapping[str, Any] | bytes) -> str:
        raw = doc if isinstance(doc, bytes) else json.dumps(doc, indent=2).encode()
        media = json.loads(raw)["mediaType"]
        headers = {**self._push_auth(repo), "Content-Type": media}
        resp = self._call("PUT", f"/v2/{repo}/manifests/{reference}", raw, headers)
        assert resp.status == 201, (resp.status, self.log()[-1000:])
        return sha256_digest(raw)


# -- layouts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    data: bytes
    media_type: str
    annotations: Mapping[str, str] = field(default_factory=dict)

    def descriptor(self) -> dict[str, Any]:
        desc: dict[str, Any] = {
            "mediaType": self.media_type,
            "digest": sha256_digest(self.data),
            "size": len(self.data),
        }
        if self.annotations:
            desc["annotations"] = dict(self.annotations)
        return desc


def modelpack_layer(path: str, data: bytes, *, old: bool = False) -> Layer:
    """A ModelPack raw layer: the file itself, named by its annotation."""
    org = "cnai" if old else "cncf"
    kind = "weight" if path.endswith((".gguf", ".safetensors", ".bin")) else "weight.config"
    return Layer(
        data,
        f"application/vnd.{org}.model.{kind}.v1.raw",
        {f"org.{org}.model.filepath": path},
    )


def push_image(
    registry: Registry,
    repo: str,
    tag: str,
    layers: Iterable[Layer],
    *,
    media_type: str = OCI_MANIFEST,
    config_media: str = "application/vnd.cncf.model.config.v1+json",
    config: bytes = EMPTY_CONFIG,
) -> tuple[str, bytes]:
    """Push each layer, the config and the manifest; (digest, manifest bytes)."""
    layers = list(layers)
    for layer in layers:
        registry.push_blob(repo, layer.data)
    registry.push_blob(repo, config)
    doc: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": media_type,
        "config": {
            "mediaType": config_media,
            "digest": sha256_digest(config),
            "size": len(config),
        },
        "layers": [layer.descriptor() for layer in layers],
    }
    raw = json.dumps(doc, indent=2).encode()
    return registry.push_manifest(repo, tag, raw), raw


def push_index(
    registry: Registry,
    repo: str,
    tag: str,
    platforms: Mapping[str, bytes],
    *,
    media_type: str = OCI_INDEX,
) -> str:
    """An index of manifests already pushed ("os/arch" -> manifest bytes)."""
    manifests = []
    for platform, raw in platforms.items():
        os_name, _, arch = platform.partition("/")
        manifests.append(
            {
                "mediaType": json.loads(raw)["mediaType"],
                "digest": sha256_digest(raw),
                "size": len(raw),
                "platform": {"os": os_name, "architecture": arch},
            }
        )
    doc = {"schemaVersion": 2, "mediaType": media_type, "manifests": manifests}
    return registry.push_manifest(repo, tag, doc)


def docker_config(directory: str, registry: Registry, *, identity_token: str = "") -> str:
    """A docker config.json (as an imagePullSecret projects it) in `directory`."""
    os.makedirs(directory, exist_ok=True)
    raw = f"{registry.user}:{registry.password}".encode()
    entry: dict[str, str] = {"auth": base64.b64encode(raw).decode()}
    if identity_token:
        entry = {"auth": base64.b64encode(f"{registry.user}:".encode()).decode()}
        entry["identitytoken"] = identity_token
    path = os.path.join(directory, "config.json")
    with open(path, "w") as handle:
        json.dump({"auths": {registry.hostport: entry}}, handle)
    return path


# -- the bearer-token flow ----------------------------------------------------------------


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class TokenServer(LoopbackHTTP):
    """The realm of the bearer flow: GET with Basic credentials, or POST an
    OAuth2 refresh_token grant (docker's identitytoken), answers a signed JWT
    for the scopes asked. It records each request's form, never a secret."""

    ISSUER = "llmkube-test-issuer"

    def __init__(self, user: str, password: str, work: str, ttl_s: int) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID

        self.user, self.password, self.ttl_s = user, password, ttl_s
        self.refresh_token = ""
        self.public = False  # anonymous tokens may pull
        self.requests: list[dict[str, str]] = []
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "llmkube token issuer")])
        now = time.time()
        import datetime as dt

        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(dt.datetime.fromtimestamp(now - 3600, dt.UTC))
            .not_valid_after(dt.datetime.fromtimestamp(now + 86400, dt.UTC))
            .sign(self._key, hashes.SHA256())
        )
        self.cert_path = os.path.join(work, "token-cert.pem")
        with open(self.cert_path, "wb") as handle:
            handle.write(self._cert.public_bytes(serialization.Encoding.PEM))
        self._x5c = base64.b64encode(self._cert.public_bytes(serialization.Encoding.DER)).decode()
        super().__init__(_TokenState(self), _TokenHandler)

    @property
    def realm(self) -> str:
        return f"{self.url}/token"

    def mint(self, subject: str, scopes: list[tuple[str, list[str]]]) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        # The registry allows 60 s of clock skew past `exp` (distribution's
        # token leeway): a token of `ttl_s` is made to be refused after ttl_s.
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self._x5c]}
        claims = {
            "iss": self.ISSUER,
            "sub": subject,
            "aud": SERVICE,
            "exp": now + self.ttl_s - _LEEWAY_S,
            "nbf": now - 2 * _LEEWAY_S,
            "iat": now,
            "jti": os.urandom(8).hex(),
            "access": [
                {"type": "repository", "name": name, "actions": actions} for name, actions in scopes
            ],
        }
        signing = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = self._key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{_b64url(signature)}"


def _scopes(values: list[str]) -> list[tuple[str, list[str]]]:
    out = []
    for scope in values:
        kind, _, rest = scope.partition(":")
        name, _, actions = rest.rpartition(":")
        if kind == "repository" and name:
            out.append((name, [a for a in actions.split(",") if a == "pull"]))
    return out


class _TokenState(Clients):
    def __init__(self, tokens: TokenServer) -> None:
        super().__init__()
        self.tokens = tokens


class _TokenHandler(TrackedHandler):
    def _tokens(self) -> TokenServer:
        state = self.server.state
        assert isinstance(state, _TokenState)
        return state.tokens

    def _answer(self, status: int, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        tokens = self._tokens()
        query = parse_qs(urlsplit(self.path).query)
        auth = self.headers.get("Authorization", "")
        expected = base64.b64encode(f"{tokens.user}:{tokens.password}".encode()).decode()
        tokens.requests.append(
            {
                "method": "GET",
                "service": query.get("service", [""])[0],
                "scope": " ".join(query.get("scope", [])),
                "auth": auth.split(" ")[0],
            }
        )
        if auth and auth != f"Basic {expected}":
            self._answer(401, {"details": "bad credentials"})
            return
        subject = tokens.user if auth else ""
        # Anonymous tokens pull only where the registry is public (Docker
        # Hub's public images).
        scopes = _scopes(query.get("scope", [])) if auth or tokens.public else []
        token = tokens.mint(subject, scopes)
        self._answer(200, {"token": token, "expires_in": tokens.ttl_s})

    def do_POST(self) -> None:
        tokens = self._tokens()
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode())
        tokens.requests.append(
            {
                "method": "POST",
                "grant_type": form.get("grant_type", [""])[0],
                "scope": " ".join(form.get("scope", [])),
                "service": form.get("service", [""])[0],
            }
        )
        if (
            form.get("grant_type") != ["refresh_token"]
            or not tokens.refresh_token
            or form.get("refresh_token") != [tokens.refresh_token]
        ):
            self._answer(401, {"error": "invalid_grant"})
            return
        token = tokens.mint(tokens.user, _scopes(form.get("scope", [])))
        self._answer(200, {"access_token": token, "expires_in": tokens.ttl_s})
