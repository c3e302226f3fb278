"""What a partial's bytes are, and where they come from.

`identity_of`: the origin validators a partial's bytes came from, recorded
in its name (#10 defect 4). With a strong ETag that is the old scripts'
`CL<size>ET<etag>` (their partials stay adoptable); without one the
Last-Modified the resume is conditioned on (If-Range) is part of it, so a
changed object of the same size never resumes an old partial.

`Target`: the fetcher, the file and the probe's answer, opened at an offset.
A signed redirect target (a CDN URL, a presigned S3 URL) that expired
answers 401/403: the probe is asked once more, from the original URL, for a
fresh one (#10 defect 9); that costs no retry.

`check_resumed`: a 206 must carry the validator the resume was conditioned
on; an origin that ignores If-Range/If-Match would otherwise splice another
version (#10 defect 5).
"""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.layout import validator_of
from llmkube_stager.model import RemoteFile
from llmkube_stager.sources.base import Body, Fetcher, RemoteMeta


def identity_of(meta: RemoteMeta) -> str:
    validator = validator_of(meta.size_bytes, meta.etag)
    if meta.if_range and meta.if_range != meta.etag:
        validator += f"LM{meta.if_range}"
    return validator


def resumable(meta: RemoteMeta) -> bool:
    """A partial may be continued only when a resumed response can be tied to
    its bytes: a known size, ranges, and a validator the origin checks
    (If-Range, If-Match) or a URL that names one version forever."""
    known = meta.size_bytes is not None and meta.accept_ranges
    return known and bool(meta.if_range or meta.if_match or meta.immutable)


def _opaque(tag: str) -> str:
    return tag.removeprefix("W/").strip()


def is_other_version(meta: RemoteMeta, body: Body) -> bool:
    """The response carries a validator other than the one the partial was
    keyed and conditioned on (If-Match, If-Range: an ETag or a date)."""
    etag, modified = body.etag, body.last_modified
    if meta.if_match and etag and _opaque(etag) != _opaque(meta.if_match):
        return True
    if not meta.if_range:
        return False
    if meta.if_range.startswith(('"', "W/")):
        return etag is not None and _opaque(etag) != _opaque(meta.if_range)
    return modified is not None and modified.strip() != meta.if_range.strip()


def check_resumed(meta: RemoteMeta, body: Body, rel: str) -> None:
    """Raise SourceChanged when a 206 carries another version's validator."""
    if is_other_version(meta, body):
        raise SourceError(
            f"the origin answered the resume of {rel} with another version's bytes "
            "(it ignored If-Range/If-Match)",
            reason=Reason.SOURCE_CHANGED,
            answered=True,
        )


def _signed_elsewhere(url: str, first_url: str) -> bool:
    """The bytes come from somewhere the probe was sent (a redirect, a
    presigned URL): a signed URL carries a query or lives on another host."""
    if url == first_url:
        return False
    parts, first = urlsplit(url), urlsplit(first_url)
    return bool(parts.query) or (parts.scheme, parts.netloc) != (first.scheme, first.netloc)


class Target:
    """Thread-safe: the parallel workers share one."""

    def __init__(self, fetcher: Fetcher, file: RemoteFile, meta: RemoteMeta) -> None:
        self.fetcher = fetcher
        self.file = file
        self.meta = meta
        self._refreshed = False
        self._lock = threading.Lock()

    def open(self, offset: int, end: int | None = None) -> Body:
        meta = self.meta
        try:
            return self.fetcher.open(self.file, meta, offset, end)
        except SourceError as err:
            if err.reason is not Reason.SOURCE_UNAUTHORIZED or not self._refresh(meta):
                raise
        return self.fetcher.open(self.file, self.meta, offset, end)

    def _refresh(self, used: RemoteMeta) -> bool:
        """Ask the probe again for where the bytes are; True when there is a
        fresh target to try (once per transfer)."""
        with self._lock:
            if self.meta is not used:
                return True  # another worker refreshed it meanwhile
            if self._refreshed or not _signed_elsewhere(used.url, self.file.url):
                return False
            self._refreshed = True
            fresh = self.fetcher.probe(self.file)
            if identity_of(fresh) != identity_of(used):
                raise SourceError(
                    f"{self.file.rel} changed while its signed download URL expired",
                    reason=Reason.SOURCE_CHANGED,
                    answered=True,
                )
            self.meta = fresh
            return True
