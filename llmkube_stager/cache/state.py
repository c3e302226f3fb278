"""What the cache holds for a manifest: local reads only, never the network.

Each file's size against its own size record and, where pinned, its bytes
against the pin (a stamp hit skips the read, spec §7).
"""

from __future__ import annotations

import hashlib
import os
import stat

from llmkube_stager.cache.records import (
    has_marker,
    read_size_record,
    stamp_matches,
)
from llmkube_stager.model import CacheState, LocalFile, LocalState, Manifest, PinState


def read_local_file(
    rel: str, dest: str, pin: str | None = None, validator: str | None = None
) -> LocalFile:
    marker = pin is not None and has_marker(dest, pin)
    absent = PinState.ABSENT if pin is not None else PinState.UNPINNED
    try:
        st = os.stat(dest)
    except (FileNotFoundError, NotADirectoryError):
        return LocalFile(rel, LocalState.MISSING, pin=absent, marker=marker)
    if not stat.S_ISREG(st.st_mode):
        return LocalFile(rel, LocalState.NOT_A_FILE, pin=absent, marker=marker)
    record = read_size_record(dest)
    if record is None:
        state = LocalState.LEGACY
    else:
        state = LocalState.COMPLETE if record == st.st_size else LocalState.MISMATCH
    pin_state, hashed_as = _pin_state(dest, pin, st)
    return LocalFile(
        rel,
        state,
        size_bytes=st.st_size,
        record_bytes=record,
        pin=pin_state,
        marker=marker,
        validator=validator,
        hashed_as=hashed_as,
    )


def _pin_state(
    dest: str, pin: str | None, st: os.stat_result
) -> tuple[PinState, tuple[int, int, int, float] | None]:
    """The pin's verdict, and for bytes hashed and found right the identity
    of the inode hashed (dev, ino, size, mtime: its descriptor's fstat), the
    only thing a stamp may vouch for (#10 defect 3)."""
    if pin is None:
        return PinState.UNPINNED, None
    if stamp_matches(dest, pin, st):
        return PinState.STAMP_HIT, None
    try:
        digest, hashed = hash_file(dest)
    except PermissionError:
        # Unprovable here: a writer replaces it, a reader refuses, and pvc
        # verify names it "not readable" (stat_source).
        return PinState.MISMATCH, None
    if digest != pin:
        return PinState.MISMATCH, None
    return PinState.HASHED, (hashed.st_dev, hashed.st_ino, hashed.st_size, hashed.st_mtime)


def read_cache_state(manifest: Manifest) -> CacheState:
    from llmkube_stager.cache.shardrec import read_merged

    validators = read_merged(manifest.root)
    return CacheState(
        root_exists=os.path.isdir(manifest.root),
        files={
            f.rel: read_local_file(f.rel, f.dest, f.sha256, validators.get(f.rel))
            for f in manifest.files
        },
        validators=validators,
    )


def sha256_of(path: str) -> str:
    return hash_file(path)[0]


def hash_file(path: str) -> tuple[str, os.stat_result]:
    """sha256 of a file and its descriptor's fstat, taken after the read;
    a file written while it was read (size or mtime moved) is reported with
    the fstat of before, which no longer matches the file: never stamped."""
    with open(path, "rb") as handle:
        before = os.fstat(handle.fileno())
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
        after = os.fstat(handle.fileno())
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        return digest, os.stat_result((0,) * 10)
    return digest, after
