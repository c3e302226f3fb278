"""The objects of a gs:// prefix without MODEL_FILES (#33 item 1), as
every cloud lists a prefix (sources/prefix.py): page after page (`pageToken`, 1,000 objects
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

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from llmkube_stager.listing import Listing
from llmkube_stager.sources.gcs.errors import REMEDY_NOT_FOUND_GCS
from llmkube_stager.sources.gcs.objects import GcsObject, from_resource
from llmkube_stager.sources.prefix import list_prefix, paged

# One page: (prefix, page token) -> the JSON answer.
ListPage = Callable[[str, str | None], Mapping[str, Any]]


def list_objects(source: str, bucket: str, path: str, page: ListPage) -> Listing:
    def objects(prefix: str) -> Iterable[GcsObject]:
        return paged(lambda token: _page(page(prefix, token), source), source)

    return list_prefix(
        source,
        path,
        objects,
        lambda under: f"no object under gs://{bucket}/{under}",
        remedy=REMEDY_NOT_FOUND_GCS,
        # The object the path names counts only where nothing lies under it.
        exact_first=False,
    )


def _page(answer: Mapping[str, Any], source: str) -> tuple[Iterable[GcsObject], str | None]:
    items = answer.get("items") or ()
    objects = (
        from_resource(item, f"the listing of {source}")
        for item in items
        if isinstance(item, Mapping)
    )
    token = answer.get("nextPageToken")
    return objects, token if isinstance(token, str) else None
