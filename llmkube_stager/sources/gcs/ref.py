"""Where a gs:// source lives: its bucket, its object name or prefix, and
the endpoint its requests go to (#33 item 1). Pure: no I/O.

The endpoint is Google's, or STORAGE_EMULATOR_HOST's as Google's own
libraries read it (google-cloud-storage prepends `http://` to a bare
`host:port`), for an emulator or a private endpoint. URLs are the JSON
API's: `/storage/v1/b/<bucket>/o` lists and describes objects,
`/download/storage/v1/b/<bucket>/o/<name>?alt=media&generation=N` is one
generation's bytes, which a replaced object never changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, urlencode, urlsplit

from llmkube_stager.errors import ConfigError

GCS_ENDPOINT = "https://storage.googleapis.com"
# Read-only: the agent never writes to the bucket.
READ_ONLY_SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"
# The largest page the JSON API gives (objects.list maxResults).
PAGE_OBJECTS = 1000


@dataclass(frozen=True)
class GcsRef:
    bucket: str
    path: str  # an object name or a prefix ("" for the whole bucket)

    @property
    def display(self) -> str:
        return f"gs://{self.bucket}/{self.path}"


def parse_gs(source: str) -> GcsRef:
    """`gs://bucket[/name-or-prefix]`; ConfigError without a bucket."""
    if source[:5].lower() != "gs://":
        raise ConfigError("MODEL_SOURCE is not a gs:// URL")
    bucket, _, path = source[5:].partition("/")
    if not bucket or any(c in bucket for c in "?#@ "):
        raise ConfigError("MODEL_SOURCE gs:// URL has no valid bucket (gs://bucket/path)")
    return GcsRef(bucket, path)


def endpoint_of(emulator_host: str, override: str = "") -> str:
    """The JSON API's origin, in google-cloud-storage's order (Client.__init__):
    STORAGE_EMULATOR_HOST (host:port is http://), else API_ENDPOINT_OVERRIDE
    (host:port is https://), else Google's."""
    if emulator_host.strip():
        return _endpoint("STORAGE_EMULATOR_HOST", emulator_host.strip(), "http")
    if override.strip():
        return _endpoint("API_ENDPOINT_OVERRIDE", override.strip(), "https")
    return GCS_ENDPOINT


def is_emulator(emulator_host: str) -> bool:
    """google-cloud-storage sends an emulator no credentials (#33 review
    item 5): its Client gives STORAGE_EMULATOR_HOST AnonymousCredentials;
    only API_ENDPOINT_OVERRIDE, a custom endpoint, is sent them."""
    return bool(emulator_host.strip())


def _endpoint(name: str, text: str, scheme: str) -> str:
    url = text if "://" in text else f"{scheme}://{text}"
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name} must be host:port or an http(s):// URL")
    if "@" in parts.netloc or parts.query or parts.fragment:
        raise ConfigError(f"{name} must not carry credentials, a query or fragment")
    return f"{parts.scheme.lower()}://{parts.netloc}{parts.path.rstrip('/')}"


# host[:port] as google-auth's metadata variables take them: a DNS name, an
# IPv4 address or a bracketed IPv6 one; nothing that could bend the URL.
_HOSTPORT_RE = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


def check_hostport(name: str, value: str) -> str:
    """GCE_METADATA_HOST / GCE_METADATA_IP: host[:port], else ConfigError."""
    if not _HOSTPORT_RE.fullmatch(value):
        raise ConfigError(f"{name} must be host[:port] (google-auth's form)")
    return value


def object_name(ref: GcsRef, rel: str, multi: bool) -> str:
    """The object a file of the manifest is: the URI's own object for a
    single file, `<prefix>/<rel>` for a multi-file model."""
    if not multi:
        return ref.path
    stem = ref.path.strip("/")
    return f"{stem}/{rel}" if stem else rel


def _b(bucket: str) -> str:
    return quote(bucket, safe="")


def list_url(endpoint: str, bucket: str, prefix: str, page_token: str | None) -> str:
    query = {"prefix": prefix, "maxResults": str(PAGE_OBJECTS)}
    if page_token:
        query["pageToken"] = page_token
    # Only what the listing uses (smaller pages of a 100k-object bucket).
    query["fields"] = "items(name,size,generation,md5Hash,crc32c),nextPageToken"
    return f"{endpoint}/storage/v1/b/{_b(bucket)}/o?{urlencode(query)}"


def meta_url(endpoint: str, bucket: str, name: str) -> str:
    return f"{endpoint}/storage/v1/b/{_b(bucket)}/o/{quote(name, safe='')}"


def media_url(endpoint: str, bucket: str, name: str, generation: str) -> str:
    """One generation's bytes: a replaced object answers 404, never its new
    bytes in the middle of the old ones (#33 item 1)."""
    query = urlencode({"alt": "media", "generation": generation})
    return f"{endpoint}/download/storage/v1/b/{_b(bucket)}/o/{quote(name, safe='')}?{query}"
