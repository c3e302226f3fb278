"""The objects of a gs:// prefix without MODEL_FILES (#33 item 1), as
s3/listing.py lists a prefix: page after page (`pageToken`, 1,000 objects
each) until the listing is whole, once per run; each object's generation,
md5Hash and crc32c kept, so that no object needs a metadata request and
every byte is fetched at the generation listed (no run mixes generations).

The prefix is taken at a '/' boundary, as for s3://: `gs://b/models/iris`
stages `models/iris/...`, never `models/iris-v2/...`; an object whose name
is the URI's path itself is a single object (KServe's `gs://b/dir/model.pt`),
named by its last part. Relative paths are checked as MODEL_FILES entries
are (a hostile listing writes nothing).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.listing import ListedFile, Listing
from llmkube_stager.sources.gcs.errors import REMEDY_NOT_FOUND_GCS
from llmkube_stager.sources.gcs.objects import GcsObject, from_resource

# One page: (prefix, page token) -> the JSON answer.
ListPage = Callable[[str, str | None], Mapping[str, Any]]
MAX_PAGES = 100_000


def list_objects(source: str, bucket: str, path: str, page: ListPage) -> Listing:
    stem = path.strip("/")
    single = bool(stem) and not path.endswith("/")
    exact: GcsObject | None = None
    below: list[tuple[str, GcsObject]] = []
    for obj in _objects(stem if single else (stem + "/" if stem else ""), page, source):
        if single and obj.name == stem:
            exact = obj
        elif obj.name.startswith(stem + "/" if stem else "") and not obj.name.endswith("/"):
            below.append((obj.name[len(stem) + 1 :] if stem else obj.name, obj))
    if exact is not None and not below:
        listed = _listed(posixpath.basename(stem), exact)
        # Its name is checked as a prefix's are, by staging/listed.py after
        # the patterns (a KServe `gs://b/m.sha256` is one file, #31 item 4).
        return Listing(source, posixpath.dirname(stem), (listed,), exact=True)
    if not below:
        raise SourceError(
            f"no object under gs://{bucket}/{stem + '/' if stem else ''}",
            reason=Reason.SOURCE_NOT_FOUND,
            answered=True,
            remedy=REMEDY_NOT_FOUND_GCS,
        )
    return Listing(source, stem, tuple(_listed(rel, obj) for rel, obj in below))


def _objects(prefix: str, page: ListPage, source: str) -> Iterator[GcsObject]:
    token: str | None = None
    for _ in range(MAX_PAGES):
        answer = page(prefix, token)
        for item in answer.get("items") or ():
            if isinstance(item, Mapping):
                yield from_resource(item, f"the listing of {source}")
        next_token = answer.get("nextPageToken")
        if not isinstance(next_token, str) or not next_token:
            return
        token = next_token
    raise SourceError(
        f"the listing of {source} did not end after {MAX_PAGES} pages",
        reason=Reason.SOURCE_REJECTED,
        answered=True,
    )


def _listed(raw: str, obj: GcsObject) -> ListedFile:
    rel = "/".join(p for p in raw.split("/") if p not in ("", "."))
    key = raw if rel != raw and rel else ""
    return ListedFile(rel if rel else raw, obj.size_bytes, obj.validator, key)
