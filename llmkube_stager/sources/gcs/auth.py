"""The credentials of a gs:// source, as KServe users provide them (#33
item 1), through google-auth (imported here only: a warm start never loads
it):

1. GOOGLE_APPLICATION_CREDENTIALS: a credentials file (KServe's GCS
   credential builder mounts the service account's key there), read-only
   scope: a key, user or impersonation credentials loaded by google-auth;
   Workload Identity Federation's `external_account` built by us from
   google-auth's classes, without the loader's project-id lookup (#41
   item 1). Every token request goes through the `Request` it is given
   (transport.py), never google-auth's `requests` stack;
2. else the metadata server when one answers (GKE Workload Identity),
   asked as google-auth asks it, at google-auth's GCE_METADATA_IP (the
   ping) and GCE_METADATA_HOST (the token), by MetadataServer below;
3. else anonymous, for a public bucket (KServe's
   `create_anonymous_client`), and the log says so.

`Tokens` hands every request the current bearer token, refreshing it
before it expires (google-auth's `valid`, which counts its refresh margin)
and at once when GCS answers 401 (a token revoked or rotated in flight):
a transfer longer than a token's hour goes on. A refusal is
ModelSourceUnauthorized naming GOOGLE_APPLICATION_CREDENTIALS; the token
endpoint's answer and google-auth's text are never shown (they may echo
the assertion or the key's id), only what failed.
"""

from __future__ import annotations

import importlib
import json
import threading
import time
from typing import TYPE_CHECKING, Any

from llmkube_stager.config import Config
from llmkube_stager.errors import ConfigError, Reason, SourceError, token_refused
from llmkube_stager.sources.gcs.errors import REMEDY_UNAUTHORIZED_GCS
from llmkube_stager.sources.gcs.ref import READ_ONLY_SCOPE

if TYPE_CHECKING:
    import ssl

# google-auth's: a token is refreshed this long before it expires
# (google.auth._helpers.REFRESH_THRESHOLD), and the bound of each of its
# metadata requests, connection and answer.
REFRESH_MARGIN_S = 225.0
PING_TIMEOUT_S = 3.0
_FLAVOR = {"Metadata-Flavor": "Google"}
_TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
# google-auth's marker of an AWS-sourced external account (_default.py).
_AWS_SUBJECT_TOKEN_TYPE = "urn:ietf:params:aws:token-type:aws4_request"
# The bound of each token request of a credentials file (STS, OAuth, IAM
# Credentials, a subject-token URL), connection and answer: Google's token
# endpoints answer in well under a second; an endpoint that accepts and
# never answers is left after this, not after LLMKUBE_STALL_TIMEOUT.
TOKEN_TIMEOUT_S = 10.0


def load_credentials(config: Config, request: Any) -> tuple[Any | None, str]:
    """(credentials or None for anonymous, where they came from)."""
    if config.gcs_credentials_file:
        return _from_file(config.gcs_credentials_file, request), "GOOGLE_APPLICATION_CREDENTIALS"
    metadata = MetadataServer(config)
    if metadata.present():
        return MetadataCredentials(metadata), "the metadata server (Workload Identity)"
    return None, "anonymous"


def _from_file(path: str, request: Any) -> Any:
    """The key file read by the agent as a bounded regular file (a
    directory, a FIFO or /dev/zero is InvalidConfiguration naming the
    variable, #41 item 4), its contents handed to google-auth
    (`load_credentials_from_dict`, google-auth >= 2.20.0; older ones are
    given the path the agent just read)."""
    from llmkube_stager.sources.credfile import read_credential_file

    data = read_credential_file(path, "GOOGLE_APPLICATION_CREDENTIALS")
    auth: Any = importlib.import_module("google.auth")
    exceptions: Any = importlib.import_module("google.auth.exceptions")
    unknown = ConfigError(
        f"GOOGLE_APPLICATION_CREDENTIALS {path[:256]!r} is not a credentials file google-auth knows"
    )
    try:
        info = json.loads(data)
    except ValueError:
        raise unknown from None
    if not isinstance(info, dict):
        raise unknown
    try:
        if info.get("type") == "external_account":
            return _external_account(info, path)
        if hasattr(auth, "load_credentials_from_dict"):
            creds, _ = auth.load_credentials_from_dict(
                info, scopes=[READ_ONLY_SCOPE], request=request
            )
        else:
            creds, _ = auth.load_credentials_from_file(
                path, scopes=[READ_ONLY_SCOPE], request=request
            )
    except (exceptions.DefaultCredentialsError, ValueError, TypeError, AttributeError):
        # Its text may quote the file; the cause is said by type only.
        raise unknown from None
    return creds


def _external_account(info: dict[str, Any], path: str) -> Any:
    """Workload Identity Federation's file (#41 item 1), its credentials
    made by the class google-auth's loader picks, without the loader:
    `load_credentials_from_dict` asks cloudresourcemanager.googleapis.com
    for the pool's project id right away (a token exchange, then a request
    the storage-only egress of most clusters refuses), through `requests`
    unless given a transport, and the agent needs no project id. Sources
    the agent's wire cannot serve are refused by name: an executable
    (google-auth runs a program) and an X.509 certificate (mutual TLS on
    the token exchange)."""
    source = info.get("credential_source")
    source = source if isinstance(source, dict) else {}
    for key, what in (("executable", "an executable"), ("certificate", "an X.509 certificate")):
        if key in source:
            raise ConfigError(
                f"GOOGLE_APPLICATION_CREDENTIALS {path[:256]!r} takes its subject token from "
                f"{what} (credential_source.{key}), which llmkube-stager does not support: use "
                "a file- or URL-sourced (or AWS) Workload Identity Federation configuration"
            )
    module = "aws" if info.get("subject_token_type") == _AWS_SUBJECT_TOKEN_TYPE else "identity_pool"
    kind: Any = importlib.import_module(f"google.auth.{module}")
    return kind.Credentials.from_info(info, scopes=[READ_ONLY_SCOPE])


class MetadataServer:
    """GKE's metadata server as google-auth asks it (the same variables,
    paths and header), on connections of our own that never go through a
    proxy: google-auth's compute_engine module imports `requests` at
    import time (google-auth 2.4x), which the agent does not carry."""

    def __init__(self, config: Config) -> None:
        from llmkube_stager.sources.wire.connection import ConnectionPool

        self._host = config.gcs_metadata_host
        self._ip = config.gcs_metadata_ip
        # A host that is no GCE/GKE node blackholes 169.254.169.254: bounded
        # as google-auth bounds its ping (3 s), not by LLMKUBE_CONNECT_TIMEOUT.
        # The answer too: an address that accepts and never answers is
        # left after google-auth's bound of every metadata request
        # (_metadata.py `_METADATA_DEFAULT_TIMEOUT`, ping and token alike),
        # not after LLMKUBE_STALL_TIMEOUT, paid on every cold start (#41 item 5).
        connect_s = min(config.timeouts.connect_s, PING_TIMEOUT_S)
        read_s = min(config.timeouts.stall_s, PING_TIMEOUT_S)
        self._pool = ConnectionPool(connect_s, read_s, _no_tls)

    def present(self) -> bool:
        """One ping of GCE_METADATA_IP: a metadata server answers with its flavor."""
        from llmkube_stager.sources.wire.control import ControlError, call

        try:
            answer = call(self._pool, "GET", f"http://{self._ip}/", dict(_FLAVOR))
        except ControlError:
            return False
        return answer.status == 200 and answer.get("metadata-flavor") == "Google"

    def token(self) -> tuple[str, float]:
        """(an access token, its lifetime in seconds) of the pod's account."""
        from llmkube_stager.sources.wire.control import ControlError, call, json_of

        where = "the metadata server"
        try:
            answer = call(self._pool, "GET", f"http://{self._host}{_TOKEN_PATH}", dict(_FLAVOR))
        except ControlError as err:
            raise SourceError(
                f"no token from {where}: {err.error.detail}",
                reason=Reason.SOURCE_UNREACHABLE,
                transient=True,
            ) from None
        if answer.status != 200:
            transient = answer.status == 429 or answer.status >= 500
            raise SourceError(
                f"{where} answered HTTP {answer.status} to the token request (is a Google "
                "service account bound to the pod's Kubernetes service account?)",
                reason=Reason.SOURCE_UNAVAILABLE if transient else Reason.SOURCE_UNAUTHORIZED,
                transient=transient,
                answered=True,
                remedy=None if transient else REMEDY_UNAUTHORIZED_GCS,
            )
        doc = json_of(answer, where)
        token, lifetime = doc.get("access_token"), doc.get("expires_in")
        if not isinstance(token, str) or not token or not isinstance(lifetime, int | float):
            raise SourceError(
                f"{where} answered the token request without a token",
                reason=Reason.SOURCE_REJECTED,
                answered=True,
            )
        return token, float(lifetime)


class MetadataCredentials:
    """Workload Identity's token, refreshed as google-auth's credentials
    are: `valid` turns false REFRESH_MARGIN_S before the expiry."""

    def __init__(self, server: MetadataServer) -> None:
        self._server = server
        self.token: str | None = None
        self._expires_at = 0.0

    @property
    def valid(self) -> bool:
        return self.token is not None and time.monotonic() < self._expires_at - REFRESH_MARGIN_S

    def refresh(self, request: Any) -> None:
        self.token, lifetime_s = self._server.token()
        self._expires_at = time.monotonic() + lifetime_s


def _no_tls() -> ssl.SSLContext:
    raise AssertionError("the metadata server is asked over http only")


class Tokens:
    """The run's bearer token, shared by every request (thread-safe)."""

    def __init__(self, credentials: Any | None, request: Any, where: str) -> None:
        self._creds = credentials
        self._request = request
        self._where = where
        self._lock = threading.Lock()
        self.refreshes = 0

    @property
    def anonymous(self) -> bool:
        return self._creds is None

    def header(self) -> dict[str, str]:
        """Authorization for the next request; refreshed first when the
        token is missing or within google-auth's margin of its expiry."""
        if self._creds is None:
            return {}
        with self._lock:
            if not self._creds.valid:
                self._refresh()
            return {"Authorization": f"Bearer {self._creds.token}"}

    def current(self) -> str | None:
        return None if self._creds is None else self._creds.token

    def refresh_after_refusal(self, used: str | None) -> bool:
        """GCS refused `used` (401): refresh unless another request already
        did. False when there is nothing to refresh (anonymous)."""
        if self._creds is None:
            return False
        with self._lock:
            if self._creds.token == used:
                self._refresh()
        return True

    def _refresh(self) -> None:
        from google.auth import exceptions

        creds: Any = self._creds
        try:
            creds.refresh(self._request)
        except exceptions.TransportError:
            # Its text may hold the endpoint's answer: not shown.
            raise SourceError(
                f"no token from {self._where}: the token request failed on the way",
                reason=Reason.SOURCE_UNREACHABLE,
                transient=True,
            ) from None
        except (exceptions.GoogleAuthError, ValueError, KeyError, TypeError):
            # RefreshError, and STS's OAuthError (no RefreshError); the
            # others are an answer google-auth could not read. Told apart by
            # the status the token endpoint gave, never by google-auth's text.
            raise self._refused(getattr(self._request, "last_status", None)) from None
        self.refreshes += 1

    def _refused(self, status: int | None) -> SourceError:
        said = f" (HTTP {status})" if status is not None else ""
        if status is not None and (status == 429 or status >= 500):
            detail = f"the token endpoint of {self._where} is unavailable{said}"
            return token_refused(detail, REMEDY_UNAUTHORIZED_GCS, transient=True)
        detail = f"the credentials from {self._where} were refused when asking for a token{said}"
        return token_refused(detail, REMEDY_UNAUTHORIZED_GCS, transient=False)
