"""One table of scheme facts (#32 item 1): what the registry, config, the
remedy tables, KServe's URI parser and the kind checks know of each source.

Adding a scheme is its source package under sources/ plus one row here
(and its kind in `SourceKind`). Pure, standard library only, at the bottom
of the house: everything imports it, a warm start included, so the source
class is a dotted path the registry imports only when the scheme is used
(no boto3 or huggingface_hub on a warm start, ARCHITECTURE idea 4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

# A manifest's kind: the key of the remedy tables and of the kind checks.
SourceKind = Literal["http", "hf", "s3", "gcs", "local", "pvc", "azure", "oci"]

# spec/behavior.md §9.4: one constant per source kind. The http/hf text is the
# operator's (seed-000, TestCacheLockRemedyLogMatchesCondition).
REMEDY_LOCK_UNSUPPORTED_PREFETCH = (
    "set spec.modelCache.prefetch: true on every InferenceService using this claim, or use "
    "storage with cross-node flock support"
)
REMEDY_LOCK_UNSUPPORTED_S3 = (
    "s3:// sources cannot be prefetched: stage the model onto this claim from a pod on storage "
    "with cross-node flock support (NFSv4, CephFS), or use such storage for the model cache"
)
REMEDY_LOCK_UNSUPPORTED_LOCAL = (
    "local/hostPath sources cannot be prefetched: copy the model onto the claim from a single "
    "writer first, or use storage with cross-node flock support for the model cache"
)
REMEDY_RATE_LIMITED_HF = (
    "the origin is rate limiting this client; set HF_TOKEN (authenticated quotas are higher), "
    "prefetch the model once into a shared cache, or retry later"
)
REMEDY_RATE_LIMITED_S3 = (
    "S3 is throttling this client (SlowDown); lower LLMKUBE_CONNECTIONS and "
    "LLMKUBE_FILES_IN_FLIGHT, prefetch the model once into a shared cache, or retry later"
)
REMEDY_LOCK_UNSUPPORTED_GCS = (
    "gs:// sources cannot be prefetched: stage the model onto this claim from a pod on storage "
    "with cross-node flock support (NFSv4, CephFS), or use such storage for the model cache"
)
REMEDY_RATE_LIMITED_GCS = (
    "Google Cloud Storage is throttling this client (HTTP 429/503); lower LLMKUBE_CONNECTIONS "
    "and LLMKUBE_FILES_IN_FLIGHT, prefetch the model once into a shared cache, or retry later"
)
REMEDY_RATE_LIMITED_HTTP = (
    "the origin is rate limiting this client; lower LLMKUBE_CONNECTIONS and "
    "LLMKUBE_FILES_IN_FLIGHT, ask the origin's operator for a higher limit, prefetch the model "
    "once into a shared cache, or retry later"
)

REMEDY_LOCK_UNSUPPORTED_AZURE = (
    "Azure Blob sources cannot be prefetched: stage the model onto this claim from a pod on "
    "storage with cross-node flock support (Azure Files NFS, CephFS), or use such storage for "
    "the model cache"
)
REMEDY_RATE_LIMITED_AZURE = (
    "Azure Storage is throttling this client (503 ServerBusy); lower "
    "LLMKUBE_CONNECTIONS and LLMKUBE_FILES_IN_FLIGHT, prefetch the model once into a shared "
    "cache, or retry later (the account's scalability targets are per storage account)"
)

REMEDY_LOCK_UNSUPPORTED_OCI = (
    "oci:// artifacts cannot be prefetched: stage the model onto this claim from a pod on "
    "storage with cross-node flock support (NFSv4, CephFS), or use such storage for the model "
    "cache"
)
REMEDY_RATE_LIMITED_OCI = (
    "the registry is rate limiting this client (Docker Hub limits anonymous pulls); give its "
    "credentials in a docker config.json (LLMKUBE_OCI_DOCKER_CONFIG), lower "
    "LLMKUBE_CONNECTIONS, prefetch the model once into a shared cache, or retry later"
)

# How KServe's storage URI of a scheme becomes a pair (kserve/uris.py):
# a prefix the engine lists, a repo the engine lists, one URL's file, one
# local path's file; None: refused, KServe's own container stages it.
KserveForm = Literal["prefix", "repo", "url", "path"]


@dataclass(frozen=True)
class Scheme:
    kind: SourceKind
    # The URL schemes (lower case, no "://") MODEL_SOURCE is routed by.
    url_schemes: tuple[str, ...]
    # "module:Class", imported by the registry only when the scheme is used.
    source: str
    kserve: KserveForm | None
    # The remedies that depend on the kind (errors.REMEDIES_BY_KIND); a local
    # copy is never rate limited: it gets the plain origin's text.
    lock_remedy: str
    rate_limited_remedy: str = REMEDY_RATE_LIMITED_HTTP
    # Distributions the source module imports lazily (floors in sources/deps.py).
    libraries: tuple[str, ...] = ()
    # Whether its files are listed when MODEL_FILES is not given (#24 items 2, 5).
    lists: bool = False
    # Whether the origin has commits (a revision the run watches, spec §8.4).
    has_commits: bool = False
    # Whether the source is only verified where it is mounted (spec §3.5),
    # links followed: it is never downloaded.
    verify_only: bool = False
    # Whether the single-file lines say "copy" rather than "download" (spec §13).
    copies: bool = False
    # The single-file "starting" line when not the generic one (spec §13).
    starting_line: str | None = None
    # Whether the source logs what it decides (the hub mirror fallback).
    takes_log: bool = False
    # https hosts (full-match patterns, lower case) routed to this row rather
    # than to the plain origin's (#33 item 2: Azure Blob is an https URL).
    https_hosts: tuple[str, ...] = ()


# One row per source kind; what a row leaves out is the plain origin's.
SCHEMES: tuple[Scheme, ...] = (
    Scheme(
        "http",
        ("http", "https"),
        "llmkube_stager.sources.http:HttpSource",
        kserve="url",
        lock_remedy=REMEDY_LOCK_UNSUPPORTED_PREFETCH,
    ),
    Scheme(
        "hf",
        ("hf",),
        "llmkube_stager.sources.hf.source:HfSource",
        kserve="repo",
        lock_remedy=REMEDY_LOCK_UNSUPPORTED_PREFETCH,
        rate_limited_remedy=REMEDY_RATE_LIMITED_HF,
        libraries=("huggingface_hub",),
        lists=True,
        has_commits=True,
        takes_log=True,
    ),
    Scheme(
        "s3",
        ("s3",),
        "llmkube_stager.sources.s3.source:S3Source",
        kserve="prefix",
        lock_remedy=REMEDY_LOCK_UNSUPPORTED_S3,
        rate_limited_remedy=REMEDY_RATE_LIMITED_S3,
        libraries=("boto3", "botocore"),
        lists=True,
        starting_line="Downloading model from S3...",
    ),
    # #33 item 1: Google Cloud Storage, listed like s3://.
    Scheme(
        "gcs",
        ("gs",),
        "llmkube_stager.sources.gcs.source:GcsSource",
        kserve="prefix",
        lock_remedy=REMEDY_LOCK_UNSUPPORTED_GCS,
        rate_limited_remedy=REMEDY_RATE_LIMITED_GCS,
        libraries=("google-auth",),
        lists=True,
        starting_line="Downloading model from Google Cloud Storage...",
    ),
    Scheme(
        "local",
        ("file",),
        "llmkube_stager.sources.local:LocalSource",
        kserve="path",
        lock_remedy=REMEDY_LOCK_UNSUPPORTED_LOCAL,
        copies=True,
        starting_line="Copying model from local source...",
    ),
    Scheme(
        "pvc",
        ("pvc",),
        "llmkube_stager.sources.local:PvcSource",
        kserve=None,
        lock_remedy=REMEDY_LOCK_UNSUPPORTED_LOCAL,
        verify_only=True,
    ),
    # #33 item 2: KServe's two Azure Blob URL forms (kserve_storage.py _AZURE_BLOB_RE).
    Scheme(
        "azure",
        (),
        "llmkube_stager.sources.azure.source:AzureSource",
        kserve="prefix",
        lock_remedy=REMEDY_LOCK_UNSUPPORTED_AZURE,
        rate_limited_remedy=REMEDY_RATE_LIMITED_AZURE,
        # azure-identity only for token credentials: required where it is
        # imported (sources/azure/credentials.py), not for a key or a SAS.
        lists=True,
        starting_line="Downloading model from Azure Blob Storage...",
        https_hosts=(
            r"[a-z0-9]+\.blob\.core\.windows\.net",
            r"[a-z0-9]+\.z[0-9]{1,2}\.blob\.storage\.azure\.net",
        ),
    ),
    # #43: model artifacts in an OCI registry (ModelPack, Docker Model
    # Runner); KServe's `oci+fetch://` spelling is the same reference.
    Scheme(
        "oci",
        ("oci", "oci+fetch"),
        "llmkube_stager.sources.oci.source:OciSource",
        # KServe's initializer: every layer of the artifact under DEST_DIR.
        kserve="prefix",
        lock_remedy=REMEDY_LOCK_UNSUPPORTED_OCI,
        rate_limited_remedy=REMEDY_RATE_LIMITED_OCI,
        lists=True,
        starting_line="Downloading model from OCI registry...",
    ),
)

_BY_KIND: dict[str, Scheme] = {s.kind: s for s in SCHEMES}
_BY_URL_SCHEME: dict[str, Scheme] = {u: s for s in SCHEMES for u in s.url_schemes}
_BY_HOST: tuple[tuple[re.Pattern[str], Scheme], ...] = tuple(
    (re.compile(h), s) for s in SCHEMES for h in s.https_hosts
)


def of_kind(kind: str) -> Scheme | None:
    """The row of a manifest's kind (None: a kind no row has)."""
    return _BY_KIND.get(kind)


def of_url_scheme(scheme: str) -> Scheme | None:
    """The row routing this URL scheme (lower case, no "://"), else None."""
    return _BY_URL_SCHEME.get(scheme)


def of_source(source: str) -> Scheme | None:
    """The row a MODEL_SOURCE's own scheme names (`/path` is file://), or
    the row whose https hosts it names (Azure Blob), before any https URL is
    recognised as the hub's (sources/__init__)."""
    if source.startswith("/"):
        return _BY_URL_SCHEME["file"]
    head, sep, _ = source.partition("://")
    hosted = of_https_host(source)
    if hosted is not None:
        return hosted
    return _BY_URL_SCHEME.get(head.lower()) if sep else None


def of_https_host(source: str) -> Scheme | None:
    """The row an https URL's host routes to (#33 item 2), else None: a
    plain https URL stays the plain origin's."""
    head, sep, rest = source.partition("://")
    if not sep or head.lower() != "https":
        return None
    host = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0].rpartition("@")[2]
    host = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    host = host.lower().rstrip(".")
    for pattern, row in _BY_HOST:
        if pattern.fullmatch(host):
            return row
    return None


def has_commits(kind: str) -> bool:
    row = _BY_KIND.get(kind)
    return row is not None and row.has_commits


def verify_only(kind: str) -> bool:
    row = _BY_KIND.get(kind)
    return row is not None and row.verify_only
