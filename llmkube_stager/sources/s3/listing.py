"""The objects of an s3:// prefix without MODEL_FILES (#24 items 2, 5).

ListObjectsV2, page after page (1,000 keys each) until the listing is
whole: keys relative to the prefix, "directory" markers (keys ending in '/')
left out, sizes and ETags kept so that no object needs a HEAD of its own.
The pages, the '/' boundary, the single object a URI's key names and the
relative paths are the listing every cloud shares (sources/prefix.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from llmkube_stager.listing import Listing
from llmkube_stager.sources.prefix import PrefixObject, list_prefix, paged

# One page of ListObjectsV2: (prefix, continuation token) -> the answer.
ListPage = Callable[[str, str | None], Mapping[str, Any]]


def list_objects(source: str, bucket: str, key: str, page: ListPage) -> Listing:
    """The listing for `s3://bucket/key`: the one object `key`, else every
    object under `key/` (the whole bucket for an empty key)."""

    def objects(prefix: str) -> Iterable[PrefixObject]:
        return paged(lambda token: _page(page(prefix, token)), repr(prefix))

    return list_prefix(
        source, key, objects, lambda under: f"no object under s3://{bucket}/{under} (NoSuchKey)"
    )


def _page(answer: Mapping[str, Any]) -> tuple[Iterable[PrefixObject], str | None]:
    """A page's objects, and the token of the next page while it is truncated."""
    token = answer.get("NextContinuationToken") if answer.get("IsTruncated") else None
    return (_object(item) for item in answer.get("Contents") or ()), token


def _object(item: Mapping[str, Any]) -> PrefixObject:
    size = item.get("Size")
    return PrefixObject(
        str(item.get("Key", "")), size if isinstance(size, int) else 0, str(item.get("ETag") or "")
    )
