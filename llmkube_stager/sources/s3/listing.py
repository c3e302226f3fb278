"""The objects of an s3:// prefix without MODEL_FILES (#24 items 2, 5).

ListObjectsV2, page after page (1,000 keys each) until the listing is
whole: keys relative to the prefix, "directory" markers (keys ending in '/')
left out, sizes and ETags kept so that no object needs a HEAD of its own.
The prefix is taken at a '/' boundary: `s3://b/models/iris` stages
`models/iris/...`, never `models/iris-v2/...` (KServe's string-prefix filter
would). An object whose key is the URI's key itself is a single object, as
in KServe (`s3://b/models/iris/model.joblib`): its name is the key's last
part. Every relative path is checked as MODEL_FILES entries are (InvalidFileSet
for '..', reserved record names, clashes: staging/listed.py, once the
patterns have filtered them): a hostile listing writes nothing.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.listing import ListedFile, Listing

# One page of ListObjectsV2: (prefix, continuation token) -> the answer.
ListPage = Callable[[str, str | None], Mapping[str, Any]]
MAX_PAGES = 100_000  # a server that never ends its listing is not followed forever


def list_objects(source: str, bucket: str, key: str, page: ListPage) -> Listing:
    """The listing for `s3://bucket/key`: the one object `key`, else every
    object under `key/` (the whole bucket for an empty key)."""
    stem = key.strip("/")
    exact: ListedFile | None = None
    below: list[tuple[str, Mapping[str, Any]]] = []
    ask = stem if stem and not key.endswith("/") else (stem + "/" if stem else "")
    for item in _pages(ask, page):
        name = str(item.get("Key", ""))
        if name == stem and stem and not key.endswith("/"):
            exact = _listed(posixpath.basename(stem), item)
        elif name.startswith(stem + "/" if stem else "") and not name.endswith("/"):
            below.append((name[len(stem) + 1 :] if stem else name, item))
    if exact is not None:
        # Its name is checked as a prefix's keys are (#24 review: a key
        # `.llmkube.lock` was staged onto the engine's lock file), by
        # staging/listed.py, which knows whether stamps live beside the
        # files (a KServe `s3://b/m.sha256` is one file, #31 item 4).
        return Listing(source, posixpath.dirname(stem), (exact,), exact=True)
    if not below:
        raise SourceError(
            f"no object under s3://{bucket}/{stem + '/' if stem else ''} (NoSuchKey)",
            reason=Reason.SOURCE_NOT_FOUND,
            answered=True,
        )
    # Checked (check_listed) once STORAGE_*_PATTERNS have filtered them
    # (staging/listed.py, #31 item 4).
    return Listing(source, stem, tuple(_listed(rel, item) for rel, item in below))


def _pages(prefix: str, page: ListPage) -> Iterator[Mapping[str, Any]]:
    token: str | None = None
    for _ in range(MAX_PAGES):
        answer = page(prefix, token)
        yield from answer.get("Contents") or ()
        token = answer.get("NextContinuationToken")
        if not answer.get("IsTruncated") or not token:
            return
    raise SourceError(
        f"the listing of {prefix!r} did not end after {MAX_PAGES} pages",
        reason=Reason.SOURCE_REJECTED,
        answered=True,
    )


def _listed(raw: str, item: Mapping[str, Any]) -> ListedFile:
    size = item.get("Size")
    # Empty and '.' parts dropped, as KServe's target path has them (#31
    # item 4); '..' stays, for check_listed to refuse.
    rel = "/".join(p for p in raw.split("/") if p not in ("", "."))
    key = raw if rel != raw and rel else ""
    return ListedFile(
        rel if rel else raw, size if isinstance(size, int) else 0, str(item.get("ETag") or ""), key
    )
