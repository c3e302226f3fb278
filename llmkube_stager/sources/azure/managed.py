"""Azure managed identity (#41 item 3): a storage token from the instance
metadata service (IMDS) or from App Service's identity endpoint, asked only
when the environment asks for it (credentials.py `choose`): AZURE_CLIENT_ID
with no secret, certificate or federated token file (a user-assigned
identity, as DefaultAzureCredential's ManagedIdentityCredential takes it),
or LLMKUBE_AZURE_MANAGED_IDENTITY=true (the system-assigned one, or the
user-assigned AZURE_CLIENT_ID). With neither, nothing here runs: no probe.

The request is one GET, made here with http.client rather than through
azure-identity, whose ManagedIdentityCredential picks its flavour and its
addresses from os.environ itself; the endpoints are link-local or the
pod's own (App Service's `localhost`), so never through a proxy, as
botocore's container credentials. Where the two flavours are told apart:
IDENTITY_ENDPOINT + IDENTITY_HEADER (App Service, api-version 2019-08-01)
as azure-identity does, else IMDS (`Metadata: true`, api-version
2018-02-01) at 169.254.169.254 or AZURE_POD_IDENTITY_AUTHORITY_HOST
(azure-identity's name for another IMDS address). Azure Arc
(IMDS_ENDPOINT), Service Fabric and Cloud Shell (MSI_ENDPOINT) are not
supported.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

from llmkube_stager.errors import ConfigError, Reason, SourceError, token_refused

IMDS_ADDRESS = "http://169.254.169.254"
IMDS_PATH = "/metadata/identity/oauth2/token"
RESOURCE = "https://storage.azure.com"
_MAX_ANSWER_BYTES = 64 * 1024
# A token whose answer gives no expiry is asked for again after this long.
_UNSTATED_LIFETIME_S = 300.0
REMEDY_MANAGED_IDENTITY = (
    "the managed identity endpoint gave no token for this identity: assign the user-assigned "
    "identity named by AZURE_CLIENT_ID to the node pool or VM (or the system-assigned one, with "
    "LLMKUBE_AZURE_MANAGED_IDENTITY=true and no AZURE_CLIENT_ID), or give another credential "
    "(AZURE_CLIENT_SECRET, AZURE_CLIENT_CERTIFICATE_PATH, workload identity's "
    "AZURE_FEDERATED_TOKEN_FILE, AZURE_STORAGE_ACCESS_KEY)"
)


@dataclass(frozen=True)
class IdentityToken:
    token: str = field(repr=False)
    expires_on: float


@dataclass(frozen=True)
class ManagedIdentity:
    """One managed identity endpoint; `get_token` as azure-identity's
    credentials (credentials.Bearer caches and renews it)."""

    url: str
    headers: Mapping[str, str] = field(repr=False)
    where: str
    connect_s: float
    stall_s: float

    def get_token(self, scope: str) -> IdentityToken:
        status, body = self._ask()
        if status != 200:
            raise _refused(self.where, status)
        try:
            doc = json.loads(body)
            token = doc["access_token"]
        except (ValueError, KeyError, TypeError):
            raise SourceError(
                f"{self.where} answered without an access token",
                reason=Reason.SOURCE_REJECTED,
                answered=True,
            ) from None
        if not isinstance(token, str) or not token:
            raise SourceError(
                f"{self.where} answered without an access token",
                reason=Reason.SOURCE_REJECTED,
                answered=True,
            )
        return IdentityToken(token, _expiry(doc))

    def _ask(self) -> tuple[int, bytes]:
        import http.client

        parts = urlsplit(self.url)
        conn_type = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        conn = conn_type(parts.hostname or "", parts.port, timeout=self.connect_s)
        try:
            conn.connect()
            if conn.sock is not None:
                conn.sock.settimeout(self.stall_s)
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            conn.request("GET", target, headers=dict(self.headers))
            answer = conn.getresponse()
            return answer.status, answer.read(_MAX_ANSWER_BYTES)
        except (OSError, http.client.HTTPException) as exc:
            raise SourceError(
                f"{self.where} could not be reached ({type(exc).__name__})",
                reason=Reason.SOURCE_UNREACHABLE,
                transient=True,
            ) from None
        finally:
            conn.close()

    def close(self) -> None:
        """Nothing is kept open between tokens."""


def _expiry(doc: Mapping[str, object]) -> float:
    """`expires_on` (seconds since the epoch, a string in both APIs), else
    `expires_in` from now, else a short lifetime."""
    for key, base in (("expires_on", 0.0), ("expires_in", time.time())):
        try:
            return base + float(str(doc[key]))
        except (KeyError, ValueError):
            continue
    return time.time() + _UNSTATED_LIFETIME_S


def _refused(where: str, status: int) -> SourceError:
    # IMDS answers 410 while it is updated, 429 when throttled.
    transient = status == 429 or status == 410 or status >= 500
    said = f"{where} answered HTTP {status}"
    if not transient:
        said += " (no such identity on this host, or not assigned to it)"
    return token_refused(said, REMEDY_MANAGED_IDENTITY, transient=transient)


def wanted(env: Mapping[str, str], client_id: str, has_key: bool) -> bool:
    """Whether the environment asks for a managed identity (module
    docstring); an explicit LLMKUBE_AZURE_MANAGED_IDENTITY decides."""
    setting = env.get("LLMKUBE_AZURE_MANAGED_IDENTITY", "").strip().lower()
    if setting in ("true", "1", "yes"):
        return True
    if setting in ("false", "0", "no"):
        return False
    if setting:
        raise ConfigError("LLMKUBE_AZURE_MANAGED_IDENTITY is neither true nor false")
    return bool(client_id) and not has_key


def managed_identity(
    env: Mapping[str, str], client_id: str, connect_s: float, stall_s: float
) -> ManagedIdentity:
    """The endpoint the environment names, checked before any request."""
    endpoint = env.get("IDENTITY_ENDPOINT", "").strip()
    query = {"resource": RESOURCE, **({"client_id": client_id} if client_id else {})}
    if endpoint:
        header = env.get("IDENTITY_HEADER", "")
        if not header:
            raise ConfigError("IDENTITY_ENDPOINT is set without IDENTITY_HEADER (App Service)")
        _check_url("IDENTITY_ENDPOINT", endpoint)
        url = f"{endpoint}?{urlencode({'api-version': '2019-08-01', **query})}"
        where = "App Service's identity endpoint (IDENTITY_ENDPOINT)"
        return ManagedIdentity(url, {"X-IDENTITY-HEADER": header}, where, connect_s, stall_s)
    base = env.get("AZURE_POD_IDENTITY_AUTHORITY_HOST", "").strip().rstrip("/") or IMDS_ADDRESS
    _check_url("AZURE_POD_IDENTITY_AUTHORITY_HOST", base)
    url = f"{base}{IMDS_PATH}?{urlencode({'api-version': '2018-02-01', **query})}"
    where = "the instance metadata service (managed identity)"
    return ManagedIdentity(url, {"Metadata": "true"}, where, connect_s, stall_s)


def _check_url(name: str, url: str) -> None:
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ConfigError(f"{name} has a bad port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username:
        raise ConfigError(f"{name} {url[:128]!r} is not an http(s) URL of a host")
