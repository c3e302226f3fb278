"""A listed model: the files a source listed for a model directory that
has no MODEL_FILES (#24 item 5: an s3:// prefix). Pure value and codec.

The listing is the run record of such a directory (`.llmkube-listing`,
cache/listrec.py), written before the run publishes its first file, as a
Hugging Face run records its commit (#10 defect 11): an IfNotPresent start
builds its manifest from it (no request at all when every file is there),
an interrupted run finishes the same set, each GET pinned to the listed
validator, and OnChange lists anew and compares the validators of the whole
set (acting/recorder.py records them per file).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property

LISTING_VERSION = 1


# Slots: a listing holds up to MAX_LISTED_OBJECTS of them (sources/prefix.py);
# without a __dict__ each is ~80 bytes smaller (#41 item 5).
@dataclass(frozen=True, slots=True)
class ListedFile:
    rel: str  # relative to `Listing.base`
    size_bytes: int
    validator: str  # the S3 ETag as listed (quoted)
    # The object's key below `Listing.base` where it is not `rel`: a key
    # `prefix//model.joblib` or `prefix/./config.json` is staged at the clean
    # path, as KServe writes it, and fetched by its own key (#31 item 4).
    key: str = ""


@dataclass(frozen=True)
class Listing:
    # The MODEL_SOURCE this answers: a record of another source is not used.
    source: str
    # Where the relative paths start (S3: the key prefix, "" for the bucket).
    base: str
    files: tuple[ListedFile, ...]
    # The one object the URI names (s3://b/dir/model.onnx), not a prefix:
    # KServe never filters it by STORAGE_*_PATTERNS (#31 item 4).
    exact: bool = False

    @cached_property
    def by_rel(self) -> dict[str, ListedFile]:
        return {f.rel: f for f in self.files}


def encode_listing(listing: Listing) -> bytes:
    doc = {
        "v": LISTING_VERSION,
        "source": listing.source,
        "base": listing.base,
        "files": [
            [f.rel, f.size_bytes, f.validator, *([f.key] if f.key else [])] for f in listing.files
        ],
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_listing(raw: bytes) -> Listing | None:
    """None for anything that is not a listing of this version."""
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("v") != LISTING_VERSION:
            return None
        files = tuple(
            ListedFile(str(rel), int(size), str(validator), *(str(k) for k in key[:1]))
            for rel, size, validator, *key in doc["files"]
            if isinstance(rel, str) and isinstance(size, int) and size >= 0
        )
        return Listing(str(doc["source"]), str(doc["base"]), files)
    except (ValueError, TypeError, KeyError, RecursionError):
        return None
