"""A service SAS signed with the storage account key (#33 item 2), made
per request, as S3's URLs are presigned per request (s3/source.py).

Why a SAS and not SharedKey's Authorization header: SharedKey signs the
request's headers (Range, If-Match, x-ms-date), which the agent's engine
sets per request below the fetcher; a SAS signs only what it grants (read
and list on one container, until a minute-scale expiry), so the engine's
ranged, resumed, parallel requests go out unchanged with it in the query.
Stdlib HMAC-SHA256 over the string-to-sign of version API_VERSION, the one
azure-storage-blob's `BlobSharedAccessSignature.add_resource_signature`
builds (tests/sources/test_azure_sas.py compares the two byte for byte).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from urllib.parse import parse_qs, quote

from llmkube_stager.errors import ConfigError
from llmkube_stager.sources.azure.ref import API_VERSION

# A SAS is made just before each request: minutes are plenty, and a leaked
# one (it is never logged) is useless soon.
SAS_LIFETIME_S = 900
# The service's clock may run behind ours (Azure: up to 15 minutes).
CLOCK_SKEW_S = 300


# The query fields of a SAS, as azure-storage-blob lists them
# (_shared/shared_access_signature.py `QueryStringConstants.to_list`,
# 12.31): a string of only these is a SAS.
SAS_FIELDS = frozenset(
    [
        "sig",
        "sp",
        "st",
        "se",
        "sr",
        "si",
        "sip",
        "spr",
        "sv",
        "rscc",
        "rscd",
        "rsce",
        "rscl",
        "rsct",
        "spk",
        "srk",
        "epk",
        "erk",
        "srt",
        "ss",
        "skoid",
        "sktid",
        "skt",
        "ske",
        "sks",
        "skv",
        "ses",
        "srh",
        "srq",
        "skdutid",
        "sduoid",
        "saoid",
        "suoid",
        "scid",
        "sdd",
    ]
)


def is_sas(text: str) -> bool:
    """Whether a string credential is a SAS, as azure-storage-blob tells
    (`_shared_access_signature._is_credential_sastoken`): a query (a leading
    '?' allowed) with at least one field, every field a SAS field; anything
    else is an account key (#41 item 2). An account key's base64 is never
    one: its '=' padding makes it a single field named by the key's own
    characters, so a key ending in `sig==` is a key, where a search for
    `sig=` took 1 key in 16,384 for a SAS."""
    fields = parse_qs(text.lstrip("?"))
    return bool(fields) and all(name in SAS_FIELDS for name in fields)


def decode_key(key: str, variable: str) -> bytes:
    """The account key as bytes; ConfigError naming the variable (never
    the value) when it is not base64."""
    try:
        return base64.b64decode(key.strip(), validate=True)
    except ValueError:
        raise ConfigError(f"{variable} is not a storage account key (base64)") from None


def container_sas(account: str, key: bytes, container: str, now_s: float | None = None) -> str:
    """A query granting read and list on `container`, valid from a little
    before now for SAS_LIFETIME_S."""
    now = time.time() if now_s is None else now_s
    start = _iso(now - CLOCK_SKEW_S)
    expiry = _iso(now + SAS_LIFETIME_S)
    permissions, resource = "rl", "c"
    to_sign = "\n".join(
        (
            permissions,
            start,
            expiry,
            f"/blob/{account}/{container}",
            "",  # signed identifier
            "",  # signed IP
            "https,http",  # signed protocol: the endpoint decides
            API_VERSION,
            resource,
            "",  # snapshot time
            "",  # encryption scope
            "",  # rscc
            "",  # rscd
            "",  # rsce
            "",  # rscl
            "",  # rsct
        )
    )
    signature = base64.b64encode(hmac.new(key, to_sign.encode(), hashlib.sha256).digest()).decode()
    fields = (
        ("st", start),
        ("se", expiry),
        ("sp", permissions),
        ("sv", API_VERSION),
        ("spr", "https,http"),
        ("sr", resource),
        ("sig", signature),
    )
    return "&".join(f"{name}={quote(value, safe='')}" for name, value in fields)


def _iso(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))
