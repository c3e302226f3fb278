"""A fake Microsoft Entra ID token endpoint on 127.0.0.1 over TLS (the
test CA), for azure-identity's real credentials (#33 item 2): the OpenID
metadata MSAL reads and the v2.0 token endpoint, which checks what the test
made (the client id and secret of a service principal, or the federated
assertion of a workload identity's token file) and issues JWTs Azurite's
`--oauth basic` accepts (audience https://storage.azure.com, an
sts.windows.net issuer, a lifetime the test chooses). Every token asked
for is recorded. AZURE_AUTHORITY_HOST points azure-identity here: nothing
goes to login.microsoftonline.com.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from tests.harness.lifecycle import Lifecycle
from tests.harness.loopback import Clients, LoopbackHTTP, TrackedHandler

TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
CLIENT_ID = "0b6c0c3e-1a3f-4d5e-9a7b-1c2d3e4f5a6b"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


def _b64(doc: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()


@dataclass
class Issued:
    grant: str  # "secret" or "assertion"
    token: str
    at: float


@dataclass
class _State:
    secret: str
    assertion: str
    lifetime_s: int
    # The JWT's own exp, when shorter than what expires_in says (a token
    # the service refuses before the client expects it to).
    jwt_lifetime_s: int | None = None
    # The public key (PEM) of a certificate service principal's
    # certificate: an RS256 client assertion it verifies is that grant
    # (#41 item 3).
    certificate_key: bytes | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    issued: list[Issued] = field(default_factory=list)
    refused: int = 0


class _Handler(BaseHTTPRequestHandler):
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        # Where it was asked (127.0.0.1 or localhost): MSAL posts there.
        host = self.headers.get("Host") or f"127.0.0.1:{self.server.server_address[1]}"
        base = f"https://{host}/{TENANT}"
        if self.path.startswith(f"/{TENANT}/v2.0/.well-known/openid-configuration"):
            self._json(
                200,
                {
                    "token_endpoint": f"{base}/oauth2/v2.0/token",
                    "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                    "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode",
                    "issuer": f"{base}/v2.0",
                },
            )
            return
        self._json(404, {"error": "not_found"})

    def do_POST(self) -> None:
        state: _State = self.server.state
        length = int(self.headers.get("content-length") or 0)
        form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
        if self.path != f"/{TENANT}/oauth2/v2.0/token" or form.get("client_id") != CLIENT_ID:
            self._json(400, {"error": "invalid_request"})
            return
        assertion = form.get("client_assertion", "")
        if form.get("client_secret"):
            grant, ok = "secret", form["client_secret"] == state.secret
        elif state.certificate_key is not None and assertion.count(".") == 2:
            grant = "certificate"
            ok = form.get("client_assertion_type") == ASSERTION_TYPE and _signed_by(
                assertion, state.certificate_key
            )
        else:
            grant = "assertion"
            ok = (
                form.get("client_assertion_type") == ASSERTION_TYPE
                and form.get("client_assertion") == state.assertion
            )
        if not ok:
            with state.lock:
                state.refused += 1
            self._json(
                401,
                {"error": "invalid_client", "error_description": "AADSTS7000215: invalid client"},
            )
            return
        now = int(time.time())
        claims = {
            "aud": "https://storage.azure.com",
            "iss": f"https://sts.windows.net/{TENANT}/",
            "iat": now - 60,
            "nbf": now - 60,
            "exp": now + (state.jwt_lifetime_s or state.lifetime_s),
            "oid": CLIENT_ID,
            "n": len(state.issued),
        }
        token = f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(claims)}.c2ln"
        with state.lock:
            state.issued.append(Issued(grant, token, time.time()))
        self._json(
            200,
            {"token_type": "Bearer", "expires_in": state.lifetime_s, "access_token": token},
        )

    def _json(self, status: int, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _signed_by(jwt: str, public_pem: bytes) -> bool:
    """An RS256 JWT (MSAL's client assertion for a certificate) whose
    signature the certificate's public key verifies, addressed to this
    tenant's token endpoint."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    try:
        head, claims, sig = jwt.split(".")
        signature = base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4))
        key: Any = serialization.load_pem_public_key(public_pem)
        key.verify(signature, f"{head}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256())
        doc = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    except (ValueError, InvalidSignature):
        return False
    return bool(doc.get("sub") == CLIENT_ID and f"/{TENANT}/" in str(doc.get("aud")))


def certificate_file(path: Any, *, password: str | None = None) -> bytes:
    """A certificate service principal's PEM file (private key, then its
    self-signed certificate; the key encrypted with `password`), written
    to `path`; returns the public key's PEM for `FakeEntra.state`."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "llmkube-stager-test-sp")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    encryption: Any = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    ) + cert.public_bytes(serialization.Encoding.PEM)
    path.write_bytes(pem)
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


class FakeEntra(Lifecycle):
    def __init__(
        self, tls: ssl.SSLContext, *, secret: str, assertion: str, lifetime_s: int = 3600
    ) -> None:
        self._tls = tls
        self.state = _State(secret, assertion, lifetime_s)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.socket = self._tls.wrap_socket(server.socket, server_side=True)
        server.state = self.state  # type: ignore[attr-defined]
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def authority(self) -> str:
        assert self._server is not None
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    @property
    def issued(self) -> list[Issued]:
        with self.state.lock:
            return list(self.state.issued)


# -- managed identity (#41 item 3) ------------------------------------------------------------


def storage_token(lifetime_s: int, n: int) -> str:
    """A JWT Azurite's `--oauth basic` accepts, as the fake Entra ID issues."""
    now = int(time.time())
    claims = {
        "aud": "https://storage.azure.com",
        "iss": f"https://sts.windows.net/{TENANT}/",
        "iat": now - 60,
        "nbf": now - 60,
        "exp": now + lifetime_s,
        "oid": CLIENT_ID,
        "n": n,
    }
    return f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(claims)}.c2ln"


@dataclass
class ImdsRequest:
    path: str
    query: dict[str, str]
    headers: dict[str, str]


class _ImdsState(Clients):
    def __init__(self, identity_header: str, lifetime_s: int) -> None:
        super().__init__()
        self.identity_header = identity_header
        self.lifetime_s = lifetime_s
        self.requests: list[ImdsRequest] = []
        self.issued: list[str] = []


class _ImdsHandler(TrackedHandler):
    """Azure's instance metadata service (`Metadata: true`, api-version
    2018-02-01) and App Service's identity endpoint (`X-IDENTITY-HEADER`,
    api-version 2019-08-01), each for the user-assigned identity CLIENT_ID
    (or the system-assigned one, when no client_id is asked)."""

    def answer(self, method: str) -> None:
        state = self.server.state
        assert isinstance(state, _ImdsState)
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        headers = {k.lower(): v for k, v in self.headers.items()}
        with state.lock:
            state.requests.append(ImdsRequest(parts.path, query, headers))
        if parts.path == "/metadata/identity/oauth2/token":
            ok = headers.get("metadata") == "true" and query.get("api-version") == "2018-02-01"
        elif parts.path == "/msi/token":
            ok = (
                headers.get("x-identity-header") == state.identity_header
                and query.get("api-version") == "2019-08-01"
            )
        else:
            self._reply(404, {"error": "not_found"})
            return
        if not ok:
            self._reply(400, {"error": "invalid_request"})
            return
        if query.get("client_id", CLIENT_ID) != CLIENT_ID:
            self._reply(
                400, {"error": "invalid_request", "error_description": "Identity not found"}
            )
            return
        with state.lock:
            token = storage_token(state.lifetime_s, len(state.issued))
            state.issued.append(token)
        expires_on = str(int(time.time()) + state.lifetime_s)
        self._reply(
            200,
            {
                "access_token": token,
                "expires_on": expires_on,
                "expires_in": str(state.lifetime_s),
                "resource": query.get("resource", ""),
                "token_type": "Bearer",
            },
        )

    def _reply(self, status: int, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class FakeImds(LoopbackHTTP):
    """Azure's IMDS and App Service's identity endpoint on 127.0.0.1,
    plain http as theirs are; every request recorded."""

    _name = "fake-imds"

    def __init__(self, *, identity_header: str = "", lifetime_s: int = 3600) -> None:
        self.state = _ImdsState(identity_header, lifetime_s)
        super().__init__(self.state, _ImdsHandler)

    @property
    def requests(self) -> list[ImdsRequest]:
        with self.state.lock:
            return list(self.state.requests)

    @property
    def issued(self) -> list[str]:
        with self.state.lock:
            return list(self.state.issued)
