"""Google's identity endpoints, faked on loopback for the credential files
a GOOGLE_APPLICATION_CREDENTIALS may name besides a service-account key
(#41 item 1): one server answers, by path,

- `/sts/v1/token`: Security Token Service, the token exchange of an
  `external_account` file (Workload Identity Federation); it accepts exactly
  the subject token of the test;
- `/subject`: a URL-sourced subject token (an identity provider's endpoint
  the file's credential_source.url names), text or JSON;
- `/token`: the refresh-token grant of an `authorized_user` file (and of
  the source credentials of an `impersonated_service_account`);
- `/v1/projects/-/serviceAccounts/<email>:generateAccessToken`: the IAM
  Credentials API (service-account impersonation), accepting only tokens
  this server issued.

`refuse` answers every token request 400 (or 401) as Google does;
`requests` is what was asked, `issued` every token handed out. The files
each type needs are written by `*_file` with this server's URLs in them.
A TLS context makes it the hosts google-auth pins (oauth2.googleapis.com
for user credentials, whatever token_uri the file says; and
iamcredentials.googleapis.com for impersonation) behind the suite's
proxy's `routes`.
"""

from __future__ import annotations

import json
import secrets
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.harness.loopback import Clients, LoopbackHTTP, TrackedHandler

STS_PATH = "/sts/v1/token"
SUBJECT_PATH = "/subject"
OAUTH_PATH = "/token"
OAUTH_HOST = "oauth2.googleapis.com"
IAM_HOST = "iamcredentials.googleapis.com"
_IAM_PREFIX = "/v1/projects/-/serviceAccounts/"
TARGET_ACCOUNT = "model-reader@proj.iam.gserviceaccount.com"
AUDIENCE = (
    "//iam.googleapis.com/projects/123456789012/locations/global/"
    "workloadIdentityPools/eks-pool/providers/eks"
)


@dataclass(frozen=True)
class IdentityRequest:
    method: str
    path: str
    form: dict[str, str]
    headers: dict[str, str]  # lower-case names


class _State(Clients):
    def __init__(self, subject_token: str, refresh_token: str) -> None:
        super().__init__()
        self.subject_token = subject_token
        self.refresh_token = refresh_token
        self.refuse: int | None = None
        self.log: list[IdentityRequest] = []
        self.issued: list[str] = []
        self.on_issue: Any = None  # Callable[[str], None] | None

    def issue(self, kind: str) -> str:
        token = f"ya29.{kind}-" + secrets.token_urlsafe(24)
        with self.lock:
            self.issued.append(token)
        if self.on_issue is not None:
            self.on_issue(token)
        return token


class _Handler(TrackedHandler):
    @property
    def state(self) -> _State:
        state = self.server.state
        assert isinstance(state, _State)
        return state

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode()
        if self.path.startswith(_IAM_PREFIX):
            form = json.loads(raw or "{}")
        else:
            form = {k: v[0] for k, v in parse_qs(raw).items()}
        self._record("POST", form)
        if self.state.refuse is not None:
            doc = {"error": "invalid_grant", "error_description": "The credential was refused."}
            self._json(self.state.refuse, doc)
        elif self.path == STS_PATH:
            self._sts(form)
        elif self.path == OAUTH_PATH:
            self._oauth(form)
        elif self.path.startswith(_IAM_PREFIX) and self.path.endswith(":generateAccessToken"):
            self._impersonate()
        else:
            self._json(404, {"error": "not_found"})

    def answer(self, method: str) -> None:
        self._record(method, {})
        path = urlsplit(self.path)
        if path.path != SUBJECT_PATH:
            self._json(404, {"error": "not_found"})
        elif "json" in parse_qs(path.query):
            self._json(200, {"id_token": self.state.subject_token})
        else:
            self._reply(200, self.state.subject_token.encode(), "text/plain")

    def _sts(self, form: dict[str, str]) -> None:
        subject, audience = form.get("subject_token"), form.get("audience")
        if subject != self.state.subject_token or audience != AUDIENCE:
            self._json(400, {"error": "invalid_grant", "error_description": "bad subject"})
            return
        doc = {
            "access_token": self.state.issue("sts"),
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "token_type": "Bearer",
            "expires_in": 3600,
        }
        self._json(200, doc)

    def _oauth(self, form: dict[str, str]) -> None:
        if form.get("grant_type") != "refresh_token" or (
            form.get("refresh_token") != self.state.refresh_token
        ):
            self._json(400, {"error": "invalid_grant", "error_description": "Bad Request"})
            return
        doc = {"access_token": self.state.issue("user"), "expires_in": 3600, "token_type": "Bearer"}
        self._json(200, doc)

    def _impersonate(self) -> None:
        bearer = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        with self.state.lock:
            known = bearer in self.state.issued
        if not known:
            self._json(401, {"error": {"code": 401, "status": "UNAUTHENTICATED"}})
            return
        expire = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
        self._json(200, {"accessToken": self.state.issue("imp"), "expireTime": expire})

    def _record(self, method: str, form: dict[str, Any]) -> None:
        entry = IdentityRequest(
            method,
            self.path,
            {k: str(v) for k, v in form.items()},
            {k.lower(): v for k, v in self.headers.items()},
        )
        with self.state.lock:
            self.state.log.append(entry)

    def _json(self, status: int, doc: Any) -> None:
        self._reply(status, json.dumps(doc).encode(), "application/json")

    def _reply(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class GoogleIdentity(LoopbackHTTP):
    """STS, a subject-token URL, the OAuth refresh grant and IAM Credentials;
    its secrets (subject token, refresh token, client secret) are canaries."""

    _name = "google-identity"

    def __init__(self, *, tls: ssl.SSLContext | None = None) -> None:
        self.subject_token = "CANARYSUBJ" + secrets.token_hex(16)
        self.refresh_token = "1//CANARYRT" + secrets.token_hex(16)
        self.client_secret = "CANARYCS" + secrets.token_hex(12)
        self.state = _State(self.subject_token, self.refresh_token)
        super().__init__(self.state, _Handler, tls=tls)

    @property
    def canaries(self) -> dict[str, str]:
        return {
            "subject-token": self.subject_token,
            "refresh-token": self.refresh_token,
            "client-secret": self.client_secret,
        }

    def refuse(self, status: int) -> None:
        with self.state.lock:
            self.state.refuse = status

    @property
    def requests(self) -> list[IdentityRequest]:
        with self.state.lock:
            return list(self.state.log)

    @property
    def issued(self) -> list[str]:
        with self.state.lock:
            return list(self.state.issued)

    # -- the files ------------------------------------------------------------------------

    def external_account_file(
        self,
        path: Path,
        *,
        source: str,
        subject_file: Path | None = None,
        impersonate: bool = False,
        token_url: str | None = None,
    ) -> Path:
        """Workload Identity Federation's file (`gcloud iam
        workload-identity-pools create-cred-config`): the subject token from
        `subject_file` (source="file") or this server's /subject
        (source="url", text; "url-json", a JSON field)."""
        if source == "file":
            assert subject_file is not None
            subject_file.write_text(self.subject_token)
            credential_source: dict[str, Any] = {"file": str(subject_file)}
        else:
            query = "?json=1" if source == "url-json" else ""
            credential_source = {
                "url": f"{self.url}{SUBJECT_PATH}{query}",
                "headers": {"Metadata": "True"},
            }
            if source == "url-json":
                fmt = {"type": "json", "subject_token_field_name": "id_token"}
                credential_source["format"] = fmt
        doc: dict[str, Any] = {
            "type": "external_account",
            "audience": AUDIENCE,
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
            "token_url": token_url or f"{self.url}{STS_PATH}",
            "credential_source": credential_source,
        }
        if impersonate:
            doc["service_account_impersonation_url"] = (
                f"{self.url}{_IAM_PREFIX}{TARGET_ACCOUNT}:generateAccessToken"
            )
        path.write_text(json.dumps(doc))
        return path

    def authorized_user_file(self, path: Path) -> Path:
        """`gcloud auth application-default login`'s file."""
        path.write_text(json.dumps(self._authorized_user()))
        return path

    def impersonated_file(self, path: Path) -> Path:
        """`gcloud auth application-default login --impersonate-service-account`'s
        file: the IAM host in it is google-auth's pinned one, not this server."""
        doc = {
            "type": "impersonated_service_account",
            "service_account_impersonation_url": (
                f"https://{IAM_HOST}{_IAM_PREFIX}{TARGET_ACCOUNT}:generateAccessToken"
            ),
            "source_credentials": self._authorized_user(),
            "delegates": [],
        }
        path.write_text(json.dumps(doc))
        return path

    def _authorized_user(self) -> dict[str, str]:
        return {
            "type": "authorized_user",
            "client_id": "764086051850-example.apps.googleusercontent.com",
            "client_secret": self.client_secret,
            "refresh_token": self.refresh_token,
            # google-auth ignores it and asks OAUTH_HOST (its pinned endpoint).
            "token_uri": f"https://{OAUTH_HOST}{OAUTH_PATH}",
        }
