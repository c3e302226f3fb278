"""The only owner of the small on-disk formats: size records, sha256 stamps
and rejection markers, read and written atomically (CONTRACT §4).
"""

from __future__ import annotations

import contextlib
import os

from llmkube_stager.layout import (
    VALIDATORS_NAME,
    atomic_tmp_path,
    marker_path,
    parse_size_record,
    record_path,
    stamp_path,
)

# Group-writable: the cache is shared by pods of one fsGroup (spec §1).
FILE_MODE = 0o664
_RECORD_MAX_BYTES = 64


def read_size_record(dest: str) -> int | None:
    try:
        with open(record_path(dest), "rb") as handle:
            raw = handle.read(_RECORD_MAX_BYTES)
    except OSError:
        return None
    return parse_size_record(raw.decode("ascii", errors="replace"))


def fsync_dir(path: str) -> None:
    """Make a rename durable. Some FUSE drivers refuse fsync on a directory."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(target: str, data: bytes) -> None:
    """`llmkube_atomic_write`: temp `<target>.llmkube-tmp.XXXXXX` + rename, the
    temp removed on any failure (scenario 62); a concurrent reader never sees a
    partial record (scenario 39)."""
    tmp = atomic_tmp_path(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(os.path.dirname(target) or ".")


def write_size_record(dest: str, size_bytes: int) -> None:
    """Decimal byte count, no newline, as the shell's printf wrote it."""
    write_atomic(record_path(dest), str(size_bytes).encode("ascii"))


def read_stamp(dest: str) -> tuple[str, int, int] | None:
    """(digest, size, mtime) of a stamp triple; a legacy bare-digest stamp or
    anything malformed is a miss (re-hashed once and rewritten, spec §4.2)."""
    try:
        with open(stamp_path(dest), "rb") as handle:
            parts = handle.read(256).decode("ascii", errors="replace").split()
    except OSError:
        return None
    if len(parts) != 3 or not all(_is_int(p) for p in parts[1:]):
        return None
    return parts[0].lower(), int(parts[1]), int(parts[2])


def _is_int(text: str) -> bool:
    digits = text.removeprefix("-")
    return digits.isascii() and digits.isdigit()


def stamp_matches(dest: str, digest: str, st: os.stat_result) -> bool:
    """Trust semantics of the scripts: a file whose stamp still matches its
    size and mtime is accepted without being read (`stamp hit`)."""
    return read_stamp(dest) == (digest, st.st_size, int(st.st_mtime))


def write_stamp(dest: str, digest: str, st: os.stat_result) -> None:
    write_atomic(stamp_path(dest), f"{digest} {st.st_size} {int(st.st_mtime)}".encode("ascii"))


def has_marker(dest: str, expected_digest: str) -> bool:
    return os.path.exists(marker_path(dest, expected_digest))


def write_marker(dest: str, expected_digest: str, actual_digest: str) -> None:
    """Durable: no publish ever clears it; delete by hand to retry (spec §7)."""
    write_atomic(marker_path(dest, expected_digest), actual_digest.encode("ascii"))


_VALIDATORS_MAX_BYTES = 1 << 20


def read_validators(root: str, name: str = VALIDATORS_NAME) -> dict[str, str]:
    """rel -> origin validator of the staged copy; {} when absent or bad.
    `name`: a share's own record in a sharded prefetch (cache/shardrec.py)."""
    import json

    try:
        with open(os.path.join(root, name), "rb") as handle:
            doc = json.loads(handle.read(_VALIDATORS_MAX_BYTES))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {str(k): str(v) for k, v in doc.items() if isinstance(v, str)}


def write_validators(root: str, updates: dict[str, str], name: str = VALIDATORS_NAME) -> None:
    """Merge and write atomically (a concurrent reader sees old or new).
    Not a merge between writers: one file per writer of a sharded prefetch
    (cache/shardrec.py), whose pods would otherwise lose each other's keys."""
    import json

    merged = {**read_validators(root, name), **updates}
    data = json.dumps(merged, sort_keys=True, separators=(",", ":")).encode()
    write_atomic(os.path.join(root, name), data)
