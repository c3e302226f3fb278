"""What a HEAD's answer says (size, ETag, Accept-Ranges, an If-Range
validator): the probe itself goes through http.client (`exchange.py`
`head`, #16); the httpx probe that was here had no caller left.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from llmkube_stager.logs import display_url
from llmkube_stager.sources.base import RemoteMeta
from llmkube_stager.sources.wire.bounded import AbsurdNumber
from llmkube_stager.sources.wire.status import content_length, status_error

# HEAD refused where GET may work: method not allowed / not implemented, or a
# presigned URL signed for GET only (403 on HEAD). The GET then decides.
_HEAD_UNSUPPORTED = frozenset({405, 501})


def unknown_meta(url: str) -> RemoteMeta:
    return RemoteMeta(url=url, size_bytes=None, etag=None, accept_ranges=False)


def strong(etag: str | None) -> str | None:
    """Only a strong validator may go into If-Range (RFC 9110 §13.1.5)."""
    return etag if etag and not etag.startswith("W/") else None


def root_cause(exc: BaseException) -> BaseException:
    """httpx wraps the socket/ssl error; classify by the innermost one."""
    current = exc
    for _ in range(10):
        inner = current.__cause__ or current.__context__
        if inner is None:
            break
        current = inner
    return current


def meta_from(status: int, headers: Mapping[str, str], url: str) -> RemoteMeta:
    """What a HEAD's answer says (headers: case-insensitive or lowercase)."""
    if 200 <= status < 300:
        etag = headers.get("etag")
        try:
            size = content_length(headers.get)
        except AbsurdNumber as err:
            raise err.at(display_url(url)) from None  # #29 item 8
        return RemoteMeta(
            url=url,
            size_bytes=size,
            etag=etag,
            accept_ranges=headers.get("accept-ranges", "").strip().lower() == "bytes",
            if_range=strong(etag) or headers.get("last-modified"),
            last_modified=(headers.get("last-modified") or "").strip() or None,
        )
    if status in _HEAD_UNSUPPORTED or (status == 403 and urlsplit(url).query):
        return unknown_meta(url)
    raise status_error(status, headers.get, display_url(url))
