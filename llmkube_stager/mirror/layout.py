"""Where a model version lives in the mirror and what its manifest says:
pure, no I/O (docs/mirror.md "Layout").

    <prefix>/<origin-key>/refs/<ref>.json
    <prefix>/<origin-key>/<version-key>/files/<name>
    <prefix>/<origin-key>/<version-key>/manifest.json   (written last)
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MANIFEST_VERSION = 1
# A manifest or ref is small; a bigger answer is not one of ours.
MAX_DOC_BYTES = 4 * 1024 * 1024
# Hex characters of the sha256 that name an origin or a version.
KEY_HEX = 24
# The name of a single-file model's one file: the origin's identity names
# the file already, and MODEL_PATH's basename differs from pod to pod.
SINGLE_NAME = "model"
LATEST = "latest"

_HEX64 = re.compile(r"[0-9a-f]{64}")
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_HEX]


def hf_identity(repo: str, folder: str) -> str:
    """A commit names the same bytes on every hub mirror: the endpoint is
    not part of it."""
    return f"hf:{repo}/{folder.strip('/')}".rstrip("/")


def url_identity(kind: str, url: str) -> str:
    """The origin's URL without credentials, query or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return f"{kind}:" + urlunsplit((parts.scheme.lower(), host.lower(), parts.path, "", ""))


def origin_key(identity: str) -> str:
    return f"{identity.partition(':')[0]}-{_digest(identity)}"


def version_key(answers: Iterable[tuple[str, int | None, str | None]]) -> str:
    """A version of an origin without commits: every file's name, size and
    validator as the origin answered them."""
    lines = sorted(f"{name}\t{size}\t{validator or ''}" for name, size, validator in answers)
    return _digest("\n".join(lines))


def ref_name(revision: str | None) -> str:
    if revision and _REF.fullmatch(revision):
        return revision
    return LATEST if not revision else _digest(revision)


@dataclass(frozen=True)
class Place:
    """One origin's place in the mirror."""

    origin: str  # origin key

    def ref(self, ref: str) -> str:
        return f"{self.origin}/refs/{ref}.json"

    def manifest(self, version: str) -> str:
        return f"{self.origin}/{version}/manifest.json"

    def file(self, version: str, name: str) -> str:
        return f"{self.origin}/{version}/files/{name}"


@dataclass(frozen=True)
class Entry:
    """One file of a mirrored version: its bytes' size and sha256, and the
    origin's validators, recorded as if the bytes came from the origin."""

    size_bytes: int
    sha256: str
    etag: str | None = None
    last_modified: str | None = None


@dataclass(frozen=True)
class MirrorManifest:
    identity: str
    version: str
    files: Mapping[str, Entry]


class BadDocument(ValueError):
    """A manifest or ref that is not of the form this agent writes."""


def encode_manifest(manifest: MirrorManifest) -> bytes:
    files = {
        name: {
            "size": e.size_bytes,
            "sha256": e.sha256,
            "etag": e.etag,
            "last_modified": e.last_modified,
        }
        for name, e in sorted(manifest.files.items())
    }
    doc = {
        "v": MANIFEST_VERSION,
        "origin": manifest.identity,
        "version": manifest.version,
        "files": files,
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _doc(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_DOC_BYTES:
        raise BadDocument(f"{len(data)} bytes, more than {MAX_DOC_BYTES}")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadDocument(f"not JSON ({exc.__class__.__name__})") from None
    if not isinstance(doc, dict) or doc.get("v") != MANIFEST_VERSION:
        raise BadDocument("not a version-1 document")
    return doc


def _optional_text(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise BadDocument("a validator is not text")


def _entry(value: object) -> Entry:
    if not isinstance(value, dict):
        raise BadDocument("a file entry is not an object")
    size, digest = value.get("size"), value.get("sha256")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise BadDocument("a file size is not a count of bytes")
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        raise BadDocument("a file sha256 is not 64 lowercase hex")
    return Entry(
        size, digest, _optional_text(value.get("etag")), _optional_text(value.get("last_modified"))
    )


def decode_manifest(data: bytes) -> MirrorManifest:
    doc = _doc(data)
    identity, version, files = doc.get("origin"), doc.get("version"), doc.get("files")
    if not isinstance(identity, str) or not isinstance(version, str):
        raise BadDocument("origin or version is not text")
    if not isinstance(files, dict):
        raise BadDocument("files is not an object")
    return MirrorManifest(identity, version, {str(k): _entry(v) for k, v in files.items()})


def encode_ref(version: str) -> bytes:
    return json.dumps({"v": MANIFEST_VERSION, "version": version}).encode()


def decode_ref(data: bytes) -> str:
    version = _doc(data).get("version")
    if not isinstance(version, str) or not re.fullmatch(r"[0-9a-f]{24,64}", version):
        raise BadDocument("the version is not a key")
    return version
