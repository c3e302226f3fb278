"""What authorises an Azure Blob request (#33 item 2), chosen once, in the
order KServe's initializer takes them (kserve_storage.py
`_download_azure_blob`: a token credential when AZURE_CLIENT_ID is set,
else AZURE_STORAGE_ACCESS_KEY; a SAS in the URL), with the connection
string of emulators and private endpoints first:

1. a SAS in MODEL_SOURCE's query;
2. AZURE_STORAGE_CONNECTION_STRING's AccountKey or SharedAccessSignature;
3. a service principal: AZURE_CLIENT_ID + AZURE_CLIENT_SECRET + AZURE_TENANT_ID
   (KServe's legacy AZ_* names too), azure-identity's ClientSecretCredential;
   or, without a secret, AZURE_CLIENT_CERTIFICATE_PATH (+ its
   AZURE_CLIENT_CERTIFICATE_PASSWORD), CertificateCredential, as
   EnvironmentCredential takes them in that order (#41 item 3);
4. AKS workload identity: AZURE_CLIENT_ID + AZURE_FEDERATED_TOKEN_FILE +
   AZURE_TENANT_ID, azure-identity's WorkloadIdentityCredential;
5. a managed identity (managed.py), only when the environment asks for
   one: AZURE_CLIENT_ID with none of the above's secret, certificate or
   token file and no AZURE_STORAGE_ACCESS_KEY, or
   LLMKUBE_AZURE_MANAGED_IDENTITY=true (#41 item 3);
6. AZURE_STORAGE_ACCESS_KEY: the account key, or a SAS when it reads as one
   (azure-storage-blob takes a string credential that parses as a SAS as a
   SAS, which is how KServe users pass one; told apart by its rule,
   sas.is_sas, #41 item 2);
7. none: anonymous (a public container), and the log says so; no
   metadata service is asked.

The credentials are built explicitly, never through DefaultAzureCredential:
its chain would probe the instance metadata service (169.254.169.254) and
the developer tools of a workstation; a pod's credential is one of the
above, and a missing one is said, not searched for.

`name` is what the user set, for the remedy of a 403 (errors.py).
"""

from __future__ import annotations

import os
import string
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from llmkube_stager.errors import ConfigError, StagerError
from llmkube_stager.sources.azure.errors import ANONYMOUS_NAME
from llmkube_stager.sources.azure.ref import API_VERSION, AzureRef, ConnectionString
from llmkube_stager.sources.azure.sas import container_sas, decode_key, is_sas

# azure-identity's token scope for Blob storage.
STORAGE_SCOPE = "https://storage.azure.com/.default"
# A token is renewed this long before it expires (azure-core's
# BearerTokenCredentialPolicy refreshes 300 s ahead): a request never
# leaves with a token that expires on the way.
TOKEN_REFRESH_MARGIN_S = 300


class Credential(Protocol):
    # What the user set, named in a 403's remedy.
    name: str
    # Whether a 401/403 may be cured by renew() (a fresh SAS or token).
    renewable: bool

    def query(self) -> str:
        """The SAS to append to a request's URL ('' none)."""
        ...

    def headers(self) -> dict[str, str]:
        """Headers that authorise a request (a bearer token), {} none."""
        ...

    def renew(self) -> None:
        """After a 401/403: the next request carries a fresh SAS or token."""
        ...


@dataclass
class StaticSas:
    sas: str = field(repr=False)  # a credential: never in a repr
    name: str
    renewable: bool = False

    def query(self) -> str:
        return self.sas

    def headers(self) -> dict[str, str]:
        return {"x-ms-version": API_VERSION}

    def renew(self) -> None:
        """A given SAS cannot be renewed."""


class KeySigned:
    """A SAS signed with the account key, made anew for each request."""

    renewable = True

    def __init__(self, account: str, key: bytes, container: str, name: str) -> None:
        self._account = account
        self._key = key
        self._container = container
        self.name = name

    def query(self) -> str:
        return container_sas(self._account, self._key, self._container)

    def headers(self) -> dict[str, str]:
        return {"x-ms-version": API_VERSION}

    def renew(self) -> None:
        """Every request is signed anew already."""


@dataclass
class Anonymous:
    name: str = ANONYMOUS_NAME
    renewable: bool = False

    def query(self) -> str:
        return ""

    def headers(self) -> dict[str, str]:
        return {"x-ms-version": API_VERSION}

    def renew(self) -> None:
        """Nothing to renew."""


class Bearer:
    """An azure-identity token credential's bearer token, cached and asked
    for again TOKEN_REFRESH_MARGIN_S before it expires, and after a 401/403
    from a credential made anew: azure-identity's own cache would hand back
    the token the service just refused (revoked, or expired early)."""

    renewable = True

    def __init__(
        self,
        make: Callable[[], Any],
        name: str,
        clock: Callable[[], float] = time.time,
        bundle: str | None = None,
    ) -> None:
        self._make = make
        self._credential: Any = None
        self.name = name
        self._clock = clock
        self._bundle = bundle  # the CA bundle file written for azure-core, removed on close
        self._lock = threading.Lock()
        self._token = ""
        self._expires_on = 0.0

    def query(self) -> str:
        return ""

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._current()}", "x-ms-version": API_VERSION}

    def renew(self) -> None:
        with self._lock:
            self._token, self._expires_on = "", 0.0
            self._close_credential()

    def _current(self) -> str:
        with self._lock:
            if not self._token or self._clock() >= self._expires_on - TOKEN_REFRESH_MARGIN_S:
                if self._credential is None:
                    self._credential = self._make()
                self._token, self._expires_on = _token_of(self._credential)
            return self._token

    def _close_credential(self) -> None:
        import contextlib

        credential, self._credential = self._credential, None
        close = getattr(credential, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()

    def close(self) -> None:
        import contextlib
        import os

        with self._lock:
            self._close_credential()
        if self._bundle is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._bundle)


def _token_of(credential: Any) -> tuple[str, float]:
    from llmkube_stager.sources.azure.errors import translate_identity_error

    try:
        token = credential.get_token(STORAGE_SCOPE)
    except StagerError:
        raise  # already the agent's (a managed identity's refusal, #41 item 3)
    except Exception as exc:
        raise translate_identity_error(exc) from None
    return str(token.token), float(token.expires_on)


@dataclass(frozen=True)
class IdentitySettings:
    """What azure-identity is given besides the credential's own values."""

    ca_bundle: str | None
    proxy_for: Callable[[str], str | None]  # an URL -> its proxy URL, or None
    connect_s: float
    stall_s: float


def choose(
    ref: AzureRef,
    env: Mapping[str, str],
    connection: ConnectionString | None,
    identity: Callable[[], IdentitySettings],
) -> Credential:
    """The credential of this run, by the order of the module's docstring."""
    if ref.url_sas:
        return StaticSas(ref.url_sas, "the SAS in MODEL_SOURCE's query")
    if connection is not None and connection.account_key:
        name = "the AccountKey of AZURE_STORAGE_CONNECTION_STRING"
        secret = decode_key(connection.account_key, "AZURE_STORAGE_CONNECTION_STRING's AccountKey")
        return KeySigned(connection.account or ref.account, secret, ref.container, name)
    if connection is not None and connection.sas:
        name = "the SharedAccessSignature of AZURE_STORAGE_CONNECTION_STRING"
        return StaticSas(connection.sas, name)
    client_id = _either(env, "AZURE_CLIENT_ID", "AZ_CLIENT_ID")
    tenant_id = _either(env, "AZURE_TENANT_ID", "AZ_TENANT_ID")
    client_secret = _either(env, "AZURE_CLIENT_SECRET", "AZ_CLIENT_SECRET")
    token_file = env.get("AZURE_FEDERATED_TOKEN_FILE", "")
    certificate = "" if client_secret else env.get("AZURE_CLIENT_CERTIFICATE_PATH", "")
    if client_id and (client_secret or certificate or token_file):
        if not tenant_id:
            raise ConfigError("AZURE_CLIENT_ID is set without AZURE_TENANT_ID")
        check_identity_settings(env, tenant_id, "" if client_secret or certificate else token_file)
        if certificate:
            _check_certificate_file(certificate)
            return _certificate(env, client_id, tenant_id, certificate, identity())
        return _identity(env, client_id, tenant_id, client_secret, token_file, identity())
    key = env.get("AZURE_STORAGE_ACCESS_KEY", "")
    from llmkube_stager.sources.azure.managed import wanted

    if wanted(env, client_id, bool(key)):
        return _managed(env, client_id, identity())
    if key:
        if is_sas(key):
            return StaticSas(key.lstrip("?"), "the SAS in AZURE_STORAGE_ACCESS_KEY")
        bytes_key = decode_key(key, "AZURE_STORAGE_ACCESS_KEY")
        return KeySigned(ref.account, bytes_key, ref.container, "AZURE_STORAGE_ACCESS_KEY")
    return Anonymous()


# What azure-identity accepts as a tenant id (_internal/utils.py
# VALID_TENANT_ID_CHARACTERS); anything else is its ValueError at the first
# token, after the cache was touched.
_TENANT_ID_CHARACTERS = frozenset(string.ascii_letters + string.digits + "-.")


def authority_of(env: Mapping[str, str]) -> str:
    """AZURE_AUTHORITY_HOST as azure-identity normalises it: https:// when
    it names no scheme."""
    authority = env.get("AZURE_AUTHORITY_HOST", "").strip().rstrip("/")
    if not authority:
        return "https://login.microsoftonline.com"
    return authority if "://" in authority else "https://" + authority


def check_identity_settings(env: Mapping[str, str], tenant_id: str, token_file: str) -> None:
    """What azure-identity would refuse only when the first token is asked
    for, said now, before any cache I/O (#33 review items 2, 3): a tenant
    id of other characters, an authority that is not https, a workload
    identity's token file that is not there or is no bounded regular file
    (read and dropped, never shown: its content is a credential)."""
    tenant_var = "AZURE_TENANT_ID" if env.get("AZURE_TENANT_ID") else "AZ_TENANT_ID"
    if any(c not in _TENANT_ID_CHARACTERS for c in tenant_id):
        raise ConfigError(
            f"{tenant_var} is not a tenant id (letters, digits, '-' and '.' only: the "
            "directory's GUID or its domain name)"
        )
    authority = authority_of(env)
    scheme, _, rest = authority.partition("://")
    if scheme.lower() != "https" or not rest.split("/", 1)[0]:
        raise ConfigError(
            f"AZURE_AUTHORITY_HOST {authority[:128]!r} is not an https URL (azure-identity sends "
            "credentials to the authority over TLS only)"
        )
    if token_file and not os.path.lexists(token_file):
        raise ConfigError(
            f"AZURE_FEDERATED_TOKEN_FILE {token_file[:256]!r} is not a readable file (is the "
            "service account token projected into the pod? AKS workload identity mounts it "
            "when the pod's service account is annotated and the pod labelled "
            "azure.workload.identity/use=true)"
        )
    if token_file:
        # A bounded regular file, as every credential file (#41 item 4):
        # azure-identity reads it whole at every token.
        from llmkube_stager.sources.credfile import check_credential_file

        check_credential_file(token_file, "AZURE_FEDERATED_TOKEN_FILE")


def _managed(env: Mapping[str, str], client_id: str, settings: IdentitySettings) -> Bearer:
    """A managed identity's token, from IMDS or App Service (#41 item 3)."""
    from llmkube_stager.sources.azure.managed import managed_identity

    credential = managed_identity(env, client_id, settings.connect_s, settings.stall_s)
    flavour = "App Service" if env.get("IDENTITY_ENDPOINT") else "the instance metadata service"
    which = "user-assigned, AZURE_CLIENT_ID" if client_id else "system-assigned"
    name = f"the managed identity ({which}, from {flavour})"
    return Bearer(lambda: credential, name, bundle=settings.ca_bundle)


def _check_certificate_file(path: str) -> None:
    """The certificate file is a credential file like any (#41 items 3, 4):
    a bounded regular file, said before any request, never shown."""
    from llmkube_stager.sources.credfile import check_credential_file

    if not os.path.lexists(path):
        raise ConfigError(
            f"AZURE_CLIENT_CERTIFICATE_PATH {path[:256]!r} is not a readable file (is the "
            "Secret holding the service principal's certificate mounted there?)"
        )
    check_credential_file(path, "AZURE_CLIENT_CERTIFICATE_PATH")


def _certificate(
    env: Mapping[str, str], client_id: str, tenant_id: str, path: str, settings: IdentitySettings
) -> Bearer:
    """A certificate service principal: azure-identity's CertificateCredential
    signs the client assertion with the file's key (#41 item 3)."""
    from llmkube_stager.sources.deps import AZURE_IDENTITY, require

    require(AZURE_IDENTITY)
    _silence_library_logs()
    from azure.identity import CertificateCredential

    password = env.get("AZURE_CLIENT_CERTIFICATE_PASSWORD") or None

    def principal() -> Any:
        try:
            return CertificateCredential(
                tenant_id, client_id, path, password=password, **_pipeline(env, settings)
            )
        except (ValueError, TypeError, OSError) as exc:
            # The key does not load: its text is never shown (#41 item 3).
            raise ConfigError(
                f"AZURE_CLIENT_CERTIFICATE_PATH {path[:256]!r} holds no certificate with a "
                "private key that loads (a PEM or PKCS12 file; is "
                "AZURE_CLIENT_CERTIFICATE_PASSWORD the key's password?) "
                f"({type(exc).__name__})"
            ) from None

    name = "the certificate service principal (AZURE_CLIENT_ID, AZURE_CLIENT_CERTIFICATE_PATH)"
    return Bearer(principal, name, bundle=settings.ca_bundle)


def _either(env: Mapping[str, str], name: str, legacy: str) -> str:
    return env.get(name, "") or env.get(legacy, "")


def _identity(
    env: Mapping[str, str],
    client_id: str,
    tenant_id: str,
    secret: str,
    token_file: str,
    settings: IdentitySettings,
) -> Bearer:
    from llmkube_stager.sources.deps import AZURE_IDENTITY, require

    # Before the import: a missing or old azure-identity is the image's
    # configuration (InvalidConfiguration naming it), and only a token
    # credential needs it (#33 item 3).
    require(AZURE_IDENTITY)
    _silence_library_logs()
    from azure.identity import ClientSecretCredential, WorkloadIdentityCredential

    if secret:

        def principal() -> Any:
            return ClientSecretCredential(tenant_id, client_id, secret, **_pipeline(env, settings))

        name = "the service principal (AZURE_CLIENT_ID, AZURE_CLIENT_SECRET)"
        return Bearer(principal, name, bundle=settings.ca_bundle)

    def workload() -> Any:
        return WorkloadIdentityCredential(
            tenant_id=tenant_id,
            client_id=client_id,
            token_file_path=token_file,
            **_pipeline(env, settings),
        )

    name = "the workload identity (AZURE_FEDERATED_TOKEN_FILE)"
    return Bearer(workload, name, bundle=settings.ca_bundle)


def _silence_library_logs() -> None:
    """azure-identity, azure-core and msal log a failed token request
    themselves (WARNING, with the endpoint's text), to stderr through
    logging's last resort: plain text in a JSON log and outside the agent's
    redaction (#33 review item 4). The agent says the failure once, in its
    own words (errors.py); their loggers go nowhere."""
    import logging

    for name in ("azure", "msal"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
        logger.propagate = False


def _pipeline(env: Mapping[str, str], settings: IdentitySettings) -> dict[str, Any]:
    """azure-core's transport fed only what config/ collected: the CA bundle
    (system roots + LLMKUBE_CA_DIR), the agent's proxy decision for the
    authority (requests would read HTTPS_PROXY/NO_PROXY itself, without
    CIDR), the connect and stall timeouts, no retries of its own (the
    agent's budget retries the request that needed the token)."""
    import requests
    from azure.core.pipeline.transport import RequestsTransport

    authority = authority_of(env)
    session = requests.Session()
    session.trust_env = False  # never the process environment's proxies or netrc
    proxy = settings.proxy_for(authority)
    if proxy is not None:
        session.proxies = {"https": proxy, "http": proxy}
    transport = RequestsTransport(
        session=session,
        session_owner=True,
        connection_verify=settings.ca_bundle if settings.ca_bundle is not None else True,
        connection_timeout=settings.connect_s,
        read_timeout=settings.stall_s,
    )
    return {
        "authority": authority,
        "transport": transport,
        "retry_total": 0,
        # MSAL would ask login.microsoftonline.com which authorities exist:
        # the authority is the one the pod was given (AZURE_AUTHORITY_HOST).
        "disable_instance_discovery": True,
    }
