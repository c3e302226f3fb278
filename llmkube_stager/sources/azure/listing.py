"""The blobs of an Azure prefix without MODEL_FILES (#33 item 2), as
every cloud lists a prefix (sources/prefix.py): List Blobs page after page (NextMarker)
until the listing is whole, one listing per run, each blob's ETag kept so
that every GET is pinned to it (If-Match) and no blob needs a HEAD, with
its Content-MD5 where the service declares one (a blob put whole; one put
in blocks has none unless its uploader set it): the validator recorded is
`<ETag>;md5=<base64>`, so that a run finished from its recorded listing
still checks the bytes (transfer/declared.py).

The prefix is taken at a '/' boundary (`.../models/iris` stages
`models/iris/...`, never `models/iris-v2/...`); a blob whose name is the
URI's path itself is a single blob, its name the path's last part. Blobs
of size 0 are left out, as KServe's `_download_azure_blob` does (the
directory entries of a hierarchical namespace are empty blobs), and so
are names ending in '/'.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import quote, unquote

from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.listing import Listing
from llmkube_stager.sources.prefix import list_prefix, paged

# One page: (prefix, marker) -> the XML of List Blobs.
ListPage = Callable[[str, str], bytes]
# A page of 1,000 blobs, as S3 and GCS page (the service allows 5,000):
# a page's XML tree is held while it is read, and at 5,000 blobs it cost
# ~8 MiB of the listing's 64 (#41 item 5); it may answer fewer with a NextMarker.
PAGE_BLOBS = 1000


# A Content-MD5: base64 of 16 bytes.
_MD5_RE = re.compile(r"[A-Za-z0-9+/]{22}==")
_MD5_FIELD = ";md5="


@dataclass(frozen=True)
class Blob:
    name: str
    size_bytes: int
    etag: str  # quoted, as the ETag header carries it
    md5_b64: str | None = None  # the Content-MD5 property, where set

    @property
    def validator(self) -> str:
        return f"{self.etag}{_MD5_FIELD}{self.md5_b64}" if self.md5_b64 else self.etag


def content_md5(value: str | None) -> str | None:
    """A Content-MD5 as the service gives it, else None (none, or not one)."""
    value = (value or "").strip()
    return value if _MD5_RE.fullmatch(value) else None


def split_validator(validator: str) -> tuple[str, str | None]:
    """A recorded validator's ETag (the If-Match pin) and Content-MD5."""
    etag, sep, md5 = validator.rpartition(_MD5_FIELD)
    if sep and etag and content_md5(md5) is not None:
        return etag, md5
    return validator, None


def page_query(prefix: str, marker: str) -> str:
    parts = ["restype=container", "comp=list", f"maxresults={PAGE_BLOBS}"]
    if prefix:
        parts.append(f"prefix={quote(prefix, safe='')}")
    if marker:
        parts.append(f"marker={quote(marker, safe='')}")
    return "&".join(parts)


def list_blobs(source: str, where: str, path: str, page: ListPage) -> Listing:
    def blobs(prefix: str) -> Iterator[Blob]:
        return paged(lambda marker: parse_page(page(prefix, marker or "")), repr(prefix))

    return list_prefix(
        source,
        path,
        blobs,
        lambda under: (
            f"no blob under {where}{'/' if under else ''} (an empty prefix, or no such blob)"
        ),
        keep=_kept,
    )


def _kept(blob: Blob) -> bool:
    return not blob.name.endswith("/") and blob.size_bytes != 0


def parse_page(xml: bytes) -> tuple[list[Blob], str]:
    """The blobs of one page and its NextMarker ('' at the end)."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        raise SourceError(
            "an Azure listing page is not XML", reason=Reason.SOURCE_REJECTED, answered=True
        ) from None
    blobs = [_blob(item) for item in root.iterfind("Blobs/Blob")]
    return [b for b in blobs if b is not None], (root.findtext("NextMarker") or "").strip()


def _blob(item: ET.Element) -> Blob | None:
    name_el = item.find("Name")
    if name_el is None or name_el.text is None:
        return None
    name = name_el.text
    if name_el.get("Encoded", "").lower() == "true":
        name = unquote(name)
    size_text = (item.findtext("Properties/Content-Length") or "").strip()
    etag = (item.findtext("Properties/Etag") or "").strip()
    if not size_text.isascii() or not size_text.isdigit():
        return None
    if etag and not etag.startswith('"'):
        etag = f'"{etag}"'
    md5 = content_md5(item.findtext("Properties/Content-MD5"))
    return Blob(name, int(size_text), etag, md5)
