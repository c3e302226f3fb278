"""One GCS object as the JSON API describes it, and as the run records it
(#33 item 1). Pure.

The validator is what a listing record keeps per file and what OnChange
compares: the generation (a new upload, even of the same bytes, is a new
generation) with the md5Hash and crc32c the service declared, so that a
run finished from its recorded listing still checks the bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmkube_stager.errors import Reason, SourceError

_GENERATION_RE = re.compile(r"[0-9]{1,20}")
_B64_RE = re.compile(r"[A-Za-z0-9+/]{1,64}={0,2}")
_CODING_RE = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~, -]{1,64}")


@dataclass(frozen=True)
class GcsObject:
    name: str
    size_bytes: int
    generation: str
    md5_b64: str | None  # absent for composite objects
    crc32c_b64: str | None
    # The stored Content-Encoding (`gsutil cp -z`: gzip), #41 item 6.
    content_encoding: str | None = None

    @property
    def validator(self) -> str:
        parts = [f"g{self.generation}"]
        if self.md5_b64:
            parts.append(f"md5={self.md5_b64}")
        if self.crc32c_b64:
            parts.append(f"crc32c={self.crc32c_b64}")
        if self.content_encoding:
            parts.append(f"ce={self.content_encoding}")
        return ";".join(parts)


def from_resource(item: Mapping[str, Any], where: str) -> GcsObject:
    """An `objects` resource (a listing item or an object's metadata); a
    resource without a sane size or generation is the service's error."""
    name = item.get("name")
    size = str(item.get("size", ""))
    generation = str(item.get("generation", ""))
    if not isinstance(name, str) or not size.isdigit() or len(size) > 20:
        raise _bad(where, "an object without a name or size")
    if not _GENERATION_RE.fullmatch(generation):
        raise _bad(where, f"the object {name[:200]!r} without a generation")
    return GcsObject(
        name,
        int(size),
        generation,
        _b64(item.get("md5Hash")),
        _b64(item.get("crc32c")),
        _coding(item.get("contentEncoding")),
    )


def from_validator(name: str, size_bytes: int, validator: str) -> GcsObject | None:
    """The object a recorded validator describes; None for another form."""
    fields = validator.split(";")
    generation = fields[0][1:] if fields[0].startswith("g") else ""
    if not _GENERATION_RE.fullmatch(generation):
        return None
    digests = dict(f.partition("=")[::2] for f in fields[1:])
    return GcsObject(
        name,
        size_bytes,
        generation,
        _b64(digests.get("md5")),
        _b64(digests.get("crc32c")),
        _coding(digests.get("ce")),
    )


def _b64(value: object) -> str | None:
    return value if isinstance(value, str) and _B64_RE.fullmatch(value) else None


def _coding(value: object) -> str | None:
    """A stored Content-Encoding as the validator can keep it (no `;`)."""
    if isinstance(value, str) and _CODING_RE.fullmatch(value.strip()):
        return value.strip()
    return None


def _bad(where: str, what: str) -> SourceError:
    return SourceError(
        f"{where} answered with {what}", reason=Reason.SOURCE_REJECTED, answered=True
    )
