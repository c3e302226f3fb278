"""An Azure Blob MODEL_SOURCE and its endpoint (#33 item 2). Pure.

KServe's forms (kserve_storage.py `_AZURE_BLOB_RE`, `_parse_azure_uri`):
`https://<account>.blob.core.windows.net/<container>/<path>` and the DNS
zone form `https://<account>.z<N>.blob.storage.azure.net/...`; a query is a
SAS (KServe hands it to BlobServiceClient as the account URL's). The
requests go to that host, or, when AZURE_STORAGE_CONNECTION_STRING names a
`BlobEndpoint` (an emulator, a private endpoint), there, the blob's path
below it (path-style for Azurite: `http://127.0.0.1:10000/devstoreaccount1`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlsplit

from llmkube_stager.errors import ConfigError
from llmkube_stager.logs import display_url

# The REST version every request names (x-ms-version) and every SAS the
# account key signs (sv): the string-to-sign of sas.py is this version's.
API_VERSION = "2021-08-06"


# Azure's connection string settings (lower case); any other part is refused,
# never guessed at (a pasted key is not a connection string).
_SETTINGS = frozenset(
    {
        "defaultendpointsprotocol",
        "accountname",
        "accountkey",
        "sharedaccesssignature",
        "endpointsuffix",
        "blobendpoint",
        "blobsecondaryendpoint",
        "queueendpoint",
        "tableendpoint",
        "fileendpoint",
        "usedevelopmentstorage",
        "developmentstorageproxyuri",
    }
)


@dataclass(frozen=True)
class ConnectionString:
    """AZURE_STORAGE_CONNECTION_STRING's parts (Azure's `k=v;k=v` form)."""

    account: str = ""
    account_key: str = field(default="", repr=False)
    sas: str = field(default="", repr=False)
    blob_endpoint: str = ""
    protocol: str = "https"
    suffix: str = "core.windows.net"


def parse_connection_string(text: str) -> ConnectionString | None:
    """None when unset; ConfigError naming the variable (never its value,
    which holds the key) when it is not Azure's form."""
    if not text.strip():
        return None
    parts: dict[str, str] = {}
    for piece in text.strip().strip(";").split(";"):
        name, sep, value = piece.partition("=")
        if not sep or not name.strip():
            raise ConfigError(
                "AZURE_STORAGE_CONNECTION_STRING is not a list of name=value pairs separated by ';'"
            )
        if name.strip().lower() not in _SETTINGS:
            # Not named: the part may be a key pasted on its own.
            raise ConfigError(
                "AZURE_STORAGE_CONNECTION_STRING has a part that is not one of Azure's "
                "connection string settings (AccountName, AccountKey, BlobEndpoint, "
                "SharedAccessSignature, ...)"
            )
        parts[name.strip().lower()] = value.strip()
    if parts.get("usedevelopmentstorage", "").lower() == "true":
        # Azure's well-known emulator account (Azurite's defaults).
        parts.setdefault("accountname", "devstoreaccount1")
        parts.setdefault("blobendpoint", "http://127.0.0.1:10000/devstoreaccount1")
    endpoint = parts.get("blobendpoint", "").rstrip("/")
    if endpoint:
        scheme = urlsplit(endpoint).scheme.lower()
        if scheme not in ("http", "https") or not urlsplit(endpoint).hostname:
            raise ConfigError(
                "AZURE_STORAGE_CONNECTION_STRING's BlobEndpoint must be an http(s) URL with a host"
            )
    return ConnectionString(
        account=parts.get("accountname", ""),
        account_key=parts.get("accountkey", ""),
        sas=parts.get("sharedaccesssignature", "").lstrip("?"),
        blob_endpoint=endpoint,
        protocol=parts.get("defaultendpointsprotocol", "https").lower() or "https",
        suffix=parts.get("endpointsuffix", "core.windows.net") or "core.windows.net",
    )


@dataclass(frozen=True)
class AzureRef:
    account: str
    container: str
    # The blob name or prefix below the container, as written (no leading '/').
    path: str
    # Where requests go: scheme://host[:port][/base path], no trailing '/'.
    endpoint: str
    # The host the user wrote (what the display shows).
    host: str = ""
    # The SAS the URL carried (its query, without '?'): a credential.
    url_sas: str = field(default="", repr=False)

    def display(self, path: str | None = None) -> str:
        """The source as the user wrote it, without its query."""
        shown = self.path if path is None else path
        return f"https://{self.host}/{self.container}/{shown}"

    def blob_url(self, blob: str) -> str:
        """The request URL of a blob (no query): its name percent-encoded,
        '/' kept, as Azure's SDK quotes it."""
        return f"{self.endpoint}/{self.container}/{quote(blob, safe='/~')}"

    def container_url(self) -> str:
        return f"{self.endpoint}/{self.container}"


def parse_azure_ref(source: str, connection: ConnectionString | None) -> AzureRef:
    parts = urlsplit(source)
    host = (parts.hostname or "").lower()
    account = host.split(".", 1)[0]
    path = unquote(parts.path).lstrip("/")
    container, _, blob_path = path.partition("/")
    if not container:
        raise ConfigError(
            f"MODEL_SOURCE {display_url(source)!r} names no container: "
            "https://<account>.blob.core.windows.net/<container>/<path>"
        )
    endpoint = f"https://{parts.netloc.rpartition('@')[2]}"
    if connection is not None and connection.blob_endpoint:
        if connection.account and connection.account.lower() != account:
            raise ConfigError(
                f"AZURE_STORAGE_CONNECTION_STRING is for the account {connection.account!r}, "
                f"MODEL_SOURCE names the account {account!r}"
            )
        endpoint = connection.blob_endpoint
    return AzureRef(account, container, blob_path, endpoint, host, parts.query)
