"""Pure path logic: file-list validation and every on-disk name (spec §4.2).

No I/O here. The names are the shell scripts' names so that a cache written by
either can be read by the other (CONTRACT §4).
"""

from __future__ import annotations

import posixpath
import string

from llmkube_stager.errors import InvalidFileSet

SIZE_RECORD_SUFFIX = ".llmkube-size"
STAMP_SUFFIX = ".sha256"
MARKER_SUFFIX = ".sha256-rejected"
ATOMIC_TMP_INFIX = ".llmkube-tmp."
# The old scripts' resumable partial `<dest>.<key>.tmp` (adopted, never written).
LEGACY_PARTIAL_SUFFIX = ".tmp"
# The agent's own partials: `<dest>.<key>.<writer>.llmkube-part`, one per
# writer, so that two writers never share an inode (#2158, see partials.py).
PART_SUFFIX = ".llmkube-part"
# Parallel ranged transfers write a sparse `<...>.llmkube-segs` file whose
# progress lives in a sibling `<...>.llmkube-journal`: its size proves nothing,
# so the sequential logic never adopts it (transfer/parallel.py).
SEGS_SUFFIX = ".llmkube-segs"
JOURNAL_SUFFIX = ".llmkube-journal"
LOCK_NAME = ".llmkube.lock"
# Per model directory: the origin validator (ETag, HF blob id / LFS sha256)
# each file was staged from, so OnChange sees a same-size change.
VALIDATORS_NAME = ".llmkube-validators"
# A sharded prefetch (#16): the share count, and each share's own
# `.llmkube-validators.<i>-of-<n>` (cache/shardrec.py).
SHARDS_NAME = ".llmkube-shards"
# Names the agent derives from a manifest file; a repository file carrying one
# of them would collide with the agent's own bookkeeping.
_RESERVED_MARKERS = (
    SIZE_RECORD_SUFFIX,
    ATOMIC_TMP_INFIX,
    MARKER_SUFFIX,
    PART_SUFFIX,
    SEGS_SUFFIX,
    JOURNAL_SUFFIX,
    VALIDATORS_NAME + ".",
)
_RESERVED_NAMES = frozenset({LOCK_NAME, VALIDATORS_NAME, SHARDS_NAME})
_TMP_ALPHABET = string.ascii_letters + string.digits


def parse_file_list(text: str) -> tuple[str, ...]:
    """MODEL_FILES -> validated relative paths, order kept (first = primary).

    Leading/trailing blank lines are tolerated (the operator joins with "\\n");
    any other defect is `InvalidFileSet` before any request or write.
    """
    body = text.strip("\n")
    if not body.strip():
        return ()
    entries = body.split("\n")
    seen: set[str] = set()
    for rel in entries:
        _check_rel(rel)
        if rel in seen:
            raise InvalidFileSet(f"MODEL_FILES lists {rel!r} twice")
        seen.add(rel)
    _check_no_dir_clash(entries)
    return tuple(entries)


def _check_rel(rel: str) -> None:
    shown = repr(rel)[:200]
    if not rel.strip():
        raise InvalidFileSet("MODEL_FILES has an empty entry")
    if rel != rel.strip():
        raise InvalidFileSet(f"MODEL_FILES entry {shown} has leading or trailing whitespace")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in rel):
        raise InvalidFileSet(f"MODEL_FILES entry {shown} contains a control or NUL character")
    if rel.startswith("/"):
        raise InvalidFileSet(f"MODEL_FILES entry {shown} is an absolute path")
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise InvalidFileSet(f"MODEL_FILES entry {shown} has an empty, '.' or '..' path part")
    if parts[-1] in _RESERVED_NAMES or any(m in parts[-1] for m in _RESERVED_MARKERS):
        raise InvalidFileSet(f"MODEL_FILES entry {shown} uses a name reserved for cache records")


def _check_no_dir_clash(entries: list[str]) -> None:
    """`a` and `a/b` cannot both be files."""
    names = set(entries)
    for rel in entries:
        parent = posixpath.dirname(rel)
        while parent:
            if parent in names:
                raise InvalidFileSet(f"MODEL_FILES entry {parent!r} is also a directory of {rel!r}")
            parent = posixpath.dirname(parent)


def validator_of(size_bytes: int | None, etag: str | None) -> str:
    """The shell's `CL<content-length>ET<etag>` validator (spec §4.2)."""
    return f"CL{'' if size_bytes is None else size_bytes}ET{etag or ''}"


def partial_key(validator: str) -> str:
    """First 12 hex of sha256 of the validator, as `partialKey` in the scripts."""
    import hashlib

    return hashlib.sha256(validator.encode()).hexdigest()[:12]


def legacy_partial_path(dest: str, validator: str) -> str:
    """The shell's `<dest>.<key>.tmp`: a changed upstream gets a different
    partial, so old and new bytes never splice (scenario 80)."""
    return f"{dest}.{partial_key(validator)}{LEGACY_PARTIAL_SUFFIX}"


def private_partial_path(dest: str, validator: str, writer_id: str) -> str:
    """`<dest>.<key>.<writer>.llmkube-part`: keyed on the validator like the
    shell's name, and private to one writer."""
    return f"{dest}.{partial_key(validator)}.{writer_id}{PART_SUFFIX}"


def segmented_paths(dest: str, validator: str, writer_id: str) -> tuple[str, str]:
    """(data, journal) of a parallel ranged transfer."""
    stem = f"{dest}.{partial_key(validator)}.{writer_id}"
    return stem + SEGS_SUFFIX, stem + JOURNAL_SUFFIX


def journal_of(segs_path: str) -> str:
    return segs_path[: -len(SEGS_SUFFIX)] + JOURNAL_SUFFIX


def parse_partial(dest: str, path: str) -> tuple[str, str] | None:
    """(validator key, kind) of a partial of `dest`; kind is "part",
    "segs", "journal" or "legacy" (the shell's `<dest>.<key>.tmp`)."""
    if not path.startswith(dest + "."):
        return None
    rest = path[len(dest) + 1 :]
    for suffix, kind in ((PART_SUFFIX, "part"), (SEGS_SUFFIX, "segs"), (JOURNAL_SUFFIX, "journal")):
        if rest.endswith(suffix):
            key, _, writer = rest[: -len(suffix)].partition(".")
            return (key, kind) if _is_hex(key, 12) and _is_hex(writer, 8) else None
    if rest.endswith(LEGACY_PARTIAL_SUFFIX):
        key = rest[: -len(LEGACY_PARTIAL_SUFFIX)]
        return (key, "legacy") if _is_hex(key, 12) else None
    return None


def key_of_partial(dest: str, path: str) -> str | None:
    """The validator key of any partial (or journal) of `dest`, else None."""
    parsed = parse_partial(dest, path)
    return parsed[0] if parsed else None


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and all(c in "0123456789abcdef" for c in text)


def record_path(dest: str) -> str:
    return dest + SIZE_RECORD_SUFFIX


def stamp_path(dest: str) -> str:
    """`<file>.sha256`: `<digest> <size> <mtime-seconds>`, shared with the
    metal agent's writeSHA256Stamp (spec §4.2)."""
    return dest + STAMP_SUFFIX


def marker_path(dest: str, expected_digest: str) -> str:
    """`<file>.<expected>.sha256-rejected`: keyed on the EXPECTED digest, so
    correcting the pin makes an old marker inert (spec §4.2)."""
    return f"{dest}.{expected_digest}{MARKER_SUFFIX}"


def atomic_tmp_path(target: str) -> str:
    """`<target>.llmkube-tmp.XXXXXX`, the L4 `llmkube_atomic_write` temp that
    the 10-minute sweep recognises (scenario 63)."""
    import secrets

    suffix = "".join(secrets.choice(_TMP_ALPHABET) for _ in range(6))
    return f"{target}{ATOMIC_TMP_INFIX}{suffix}"


def dest_path(root: str, rel: str) -> str:
    """The published path of a validated relative path under the model root."""
    return posixpath.join(root, rel)


def destinations(
    cache_dir: str, model_path: str, files: tuple[str, ...]
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(model root, ((rel, dest), ...)): multi-file under CACHE_DIR, single
    file at MODEL_PATH (CACHE_DIR may be empty for an emptyDir, spec §2.1)."""
    if files:
        return cache_dir, tuple((rel, dest_path(cache_dir, rel)) for rel in files)
    return posixpath.dirname(model_path), ((posixpath.basename(model_path), model_path),)


def parse_size_record(text: str) -> int | None:
    """A record is valid when it is non-empty and all digits (seed-001)."""
    value = text.strip()
    if not value or not value.isascii() or not value.isdigit():
        return None
    return int(value)
