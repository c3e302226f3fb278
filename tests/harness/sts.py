"""The credential side of a pod, on loopback: an OIDC issuer for web
identity (IRSA) tokens, and a container credentials endpoint (EKS Pod
Identity).

STS itself is SeaweedFS's (`seaweed.SeaweedS3(issuer=...)`): its
`AssumeRoleWithWebIdentity` verifies the token against this issuer's JWKS
(signature, `iss`, `aud`, `exp`), applies the role's trust policy and issues
temporary credentials (`ASIA...` key, secret, session token) that its S3 API
then checks on every request, presigned ones included, until they expire.
Nothing about those credentials is faked: the issuer only plays the
Kubernetes API server's part (it signs the projected service account token).

SeaweedFS (4.48) issues every session for its configured `tokenDuration`
(the token's own `exp` does not shorten it, and a request's DurationSeconds
must be at least 900 s), so a server started with `session_s=3` gives
credentials that really expire during a test, and botocore really has to
refresh them (it re-reads the token file each time, like the kubelet's
rotated projection: `rotating_token`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from tests.harness.lifecycle import Lifecycle

_HOST = "127.0.0.1"
AUDIENCE = "sts.amazonaws.com"  # what EKS puts in projected IRSA tokens
ROLE_ARN = "arn:aws:iam::role/llmkube-reader"
SUBJECT = "system:serviceaccount:models:llmkube-stager"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(n: int) -> bytes:
    return n.to_bytes((n.bit_length() + 7) // 8, "big")


class _JsonServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def server_bind(self) -> None:
        import socketserver

        socketserver.TCPServer.server_bind(self)  # no reverse-DNS lookup
        self.server_name = _HOST
        self.server_port = self.server_address[1]


class _Loopback(Lifecycle):
    """A small JSON-over-HTTP server on 127.0.0.1 with a request log."""

    def __init__(self) -> None:
        self._server: _JsonServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # ("GET /path", lower-cased headers)
        self.log: list[tuple[str, dict[str, str]]] = []

    def answer(self, request: str, headers: dict[str, str]) -> tuple[int, Any]:
        """(status, a JSON document or text) for "METHOD /path"."""
        raise NotImplementedError

    def start(self) -> Self:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                self._answer("GET")

            def do_PUT(self) -> None:
                self._answer("PUT")

            def _answer(self, method: str) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                with owner._lock:
                    owner.log.append((f"{method} {self.path}", headers))
                status, doc = owner.answer(f"{method} {self.path}", headers)
                body = doc.encode() if isinstance(doc, str) else json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = _JsonServer((_HOST, 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("not started")
        return f"http://{_HOST}:{self._server.server_address[1]}"

    def requests(self) -> list[tuple[str, dict[str, str]]]:
        with self._lock:
            return list(self.log)


class OidcIssuer(_Loopback):
    """Signs RS256 service account tokens and publishes their key (JWKS)."""

    def __init__(self) -> None:
        super().__init__()
        from cryptography.hazmat.primitives.asymmetric import rsa

        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    @property
    def issuer(self) -> str:
        return self.url

    def answer(self, request: str, headers: dict[str, str]) -> tuple[int, Any]:
        if request.endswith("/jwks"):
            numbers = self._key.public_key().public_numbers()
            key = {
                "kty": "RSA",
                "kid": "llmkube-test",
                "use": "sig",
                "alg": "RS256",
                "n": _b64(_uint(numbers.n)),
                "e": _b64(_uint(numbers.e)),
            }
            return 200, {"keys": [key]}
        if request.endswith("/.well-known/openid-configuration"):
            return 200, {"issuer": self.issuer, "jwks_uri": f"{self.issuer}/jwks"}
        return 404, {}

    def mint(self, *, ttl_s: float = 3600, subject: str = SUBJECT, audience: str = AUDIENCE) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": "llmkube-test"}
        claims = {
            "iss": self.issuer,
            "sub": subject,
            "aud": audience,
            "iat": now,
            "nbf": now,
            "exp": now + max(1, round(ttl_s)),
        }
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"

    def write_token(self, path: str | os.PathLike[str], *, ttl_s: float = 3600) -> str:
        """Write a token file the way the kubelet projects one (atomically)."""
        token = self.mint(ttl_s=ttl_s)
        tmp = f"{os.fspath(path)}.tmp"
        with open(tmp, "w") as handle:
            handle.write(token)
        os.replace(tmp, path)
        return token

    @contextlib.contextmanager
    def rotating_token(
        self, path: str | os.PathLike[str], *, ttl_s: float, every_s: float
    ) -> Iterator[None]:
        """Keep `path` holding a fresh short-lived token, like the kubelet."""
        stop = threading.Event()
        self.write_token(path, ttl_s=ttl_s)

        def rotate() -> None:
            while not stop.wait(every_s):
                self.write_token(path, ttl_s=ttl_s)

        thread = threading.Thread(target=rotate, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(2.0)


def sts_iam_config(
    issuer: str, *, session_s: int = 3600, role_arn: str = ROLE_ARN
) -> dict[str, Any]:
    """SeaweedFS's advanced IAM configuration (`-s3.iam.config`): its STS
    trusts `issuer` for AssumeRoleWithWebIdentity into a read-only role, for
    sessions of `session_s` (its S3 API refuses them afterwards)."""
    return {
        "sts": {
            "tokenDuration": f"{session_s}s",
            "maxSessionLength": "12h",
            "issuer": "seaweedfs-sts",
            # Any 32 bytes: SeaweedFS signs its session tokens with it.
            "signingKey": base64.b64encode(os.urandom(32)).decode(),
        },
        "providers": [
            {
                "name": "kubernetes",
                "type": "oidc",
                "enabled": True,
                "config": {"issuer": issuer, "clientId": AUDIENCE, "jwksUri": f"{issuer}/jwks"},
            }
        ],
        "policy": {"defaultEffect": "Deny"},
        "roles": [
            {
                "roleName": role_arn.rsplit("/", 1)[1],
                "roleArn": role_arn,
                "trustPolicy": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Federated": "kubernetes"},
                            "Action": ["sts:AssumeRoleWithWebIdentity"],
                        }
                    ],
                },
                "attachedPolicies": ["ModelReader"],
            }
        ],
        "policies": [
            {
                "name": "ModelReader",
                "document": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Action": ["s3:GetObject", "s3:ListBucket"],
                            "Resource": ["arn:aws:s3:::*", "arn:aws:s3:::*/*"],
                        }
                    ],
                },
            }
        ],
    }


@dataclass(frozen=True)
class TemporaryCredentials:
    access_key_id: str
    secret_access_key: str
    session_token: str
    expiration: str  # ISO 8601, as STS and container endpoints give it


class ContainerCredentials(_Loopback):
    """The EKS Pod Identity agent / ECS credentials endpoint: answers a GET
    carrying `Authorization: <token>` with temporary credentials."""

    def __init__(self, credentials: TemporaryCredentials, token: str) -> None:
        super().__init__()
        self._credentials = credentials
        self._token = token

    def answer(self, request: str, headers: dict[str, str]) -> tuple[int, Any]:
        if headers.get("authorization") != self._token:
            return 403, {"Message": "bad authorization token"}
        return 200, _credentials_doc(self._credentials)


def _credentials_doc(c: TemporaryCredentials) -> dict[str, str]:
    return {
        "Code": "Success",
        "Type": "AWS-HMAC",
        "AccessKeyId": c.access_key_id,
        "SecretAccessKey": c.secret_access_key,
        "Token": c.session_token,
        "Expiration": c.expiration,
    }


class InstanceMetadata(_Loopback):
    """EC2's instance metadata service (IMDSv2: a session token first) with
    an instance profile role."""

    ROLE = "llmkube-node"

    def __init__(self, credentials: TemporaryCredentials) -> None:
        super().__init__()
        self._credentials = credentials
        self._token = f"imds-{os.urandom(8).hex()}"

    def answer(self, request: str, headers: dict[str, str]) -> tuple[int, Any]:
        if request == "PUT /latest/api/token":
            return 200, self._token
        if headers.get("x-aws-ec2-metadata-token") != self._token:
            return 401, ""
        base = "GET /latest/meta-data/iam/security-credentials/"
        if request == base:
            return 200, self.ROLE
        if request == base + self.ROLE:
            return 200, _credentials_doc(self._credentials)
        return 404, ""
