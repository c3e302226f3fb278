"""Publish a finished partial: rename, make it durable, check, record.

Publish is a rename, so a reader sees either the old file or the whole new
one, never a file being written (#1428, scenario 95). A published file whose
size is not the promised one is removed with its stamp before anyone can
accept it (seed-001: an existence-only reader would, scenario 17).
"""

from __future__ import annotations

import contextlib
import os

from llmkube_stager.cache.disk import disk_error
from llmkube_stager.cache.records import fsync_dir, write_size_record
from llmkube_stager.errors import Reason, TransferError


class PartialLost(Exception):
    """Our private partial was adopted by another writer (it looked idle):
    never publish it; start over (see partials.py)."""


def publish(partial: str, dest: str, expected_bytes: int | None, rel: str) -> int:
    """Rename `partial` onto `dest`, check the published size, write the record."""
    try:
        inode = os.stat(partial).st_ino
        os.replace(partial, dest)
    except FileNotFoundError as exc:
        raise PartialLost(partial) from exc
    except OSError as exc:
        raise disk_error(exc, "publishing", rel) from exc
    try:
        fsync_dir(os.path.dirname(dest))
        st = os.stat(dest)
    except OSError as exc:
        raise disk_error(exc, "publishing", rel) from exc
    published = st.st_size
    # Only judge (and remove) what we published: a racing writer may already
    # have renamed its own complete file over ours.
    if st.st_ino == inode and expected_bytes is not None and published != expected_bytes:
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
