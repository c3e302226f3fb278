"""Publish a finished partial: rename, make it durable, check, record.

Publish is a rename, so a reader sees either the old file or the whole new
one, never a file being written (#1428, scenario 95). A published file whose
size is not the promised one is removed with its stamp before anyone can
accept it (seed-001: an existence-only reader would, scenario 17).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os

from llmkube_stager.cache.layout import PARTIAL_SUFFIX, partial_key
from llmkube_stager.cache.records import fsync_dir, write_size_record
from llmkube_stager.errors import CacheError, Reason, TransferError

_OUT_OF_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
_UNWRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def disk_error(exc: OSError, what: str, rel: str) -> Exception:
    """Translate a cache-side OSError into the contract's reasons."""
    if exc.errno in _OUT_OF_SPACE:
        return TransferError(
            f"no space left on device while {what} {rel}", reason=Reason.OUT_OF_SPACE, file=rel
        )
    if exc.errno in _UNWRITABLE:
        return CacheError(
            f"cannot write the cache while {what} {rel}: {os.strerror(exc.errno or 0)}",
            reason=Reason.CACHE_UNWRITABLE,
            file=rel,
        )
    return exc


def publish(partial: str, dest: str, expected_bytes: int | None, rel: str) -> int:
    """Rename `partial` onto `dest`, check the published size, write the record."""
    try:
        os.replace(partial, dest)
        fsync_dir(os.path.dirname(dest))
        published = os.stat(dest).st_size
    except OSError as exc:
        raise disk_error(exc, "publishing", rel) from exc
    if expected_bytes is not None and published != expected_bytes:
        for path in (dest, dest + ".sha256"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        raise TransferError(
            f"published {rel} has {published} bytes, the origin promised {expected_bytes}",
            reason=Reason.SIZE_MISMATCH,
            file=rel,
        )
    try:
        write_size_record(dest, published)
    except OSError as exc:
        raise disk_error(exc, "recording the size of", rel) from exc
    return published


def stale_partials(dest: str, keep: str) -> list[str]:
    """This file's partials for other origin validators, and the legacy
    `<dest>.tmp`: the keep-one sweep of spec §10, narrowed to ONE file so it
    can never delete another manifest file's partial (spec §10 hazard)."""
    pattern = glob.escape(dest) + ".*" + PARTIAL_SUFFIX
    found = [p for p in glob.glob(pattern) if _is_partial_of(dest, p) and p != keep]
    legacy = dest + PARTIAL_SUFFIX
    if os.path.exists(legacy):
        found.append(legacy)
    return found


def _is_partial_of(dest: str, path: str) -> bool:
    key = path[len(dest) + 1 : -len(PARTIAL_SUFFIX)]
    return len(key) == len(partial_key("")) and all(c in "0123456789abcdef" for c in key)
