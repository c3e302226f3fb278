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
    read_validators,
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
    return LocalFile(
        rel,
        state,
        size_bytes=st.st_size,
        record_bytes=record,
        pin=_pin_state(dest, pin, st),
        marker=marker,
        validator=validator,
    )


def _pin_state(dest: str, pin: str | None, st: os.stat_result) -> PinState:
    if pin is None:
        return PinState.UNPINNED
    if stamp_matches(dest, pin, st):
        return PinState.STAMP_HIT
    try:
        return PinState.HASHED if sha256_of(dest) == pin else PinState.MISMATCH
    except PermissionError:
        # Unprovable here: a writer replaces it, a reader refuses, and pvc
        # verify names it "not readable" (stat_source).
        return PinState.MISMATCH


def read_cache_state(manifest: Manifest) -> CacheState:
    validators = read_validators(manifest.root)
    return CacheState(
        root_exists=os.path.isdir(manifest.root),
        files={
            f.rel: read_local_file(f.rel, f.dest, f.sha256, validators.get(f.rel))
            for f in manifest.files
        },
    )


def sha256_of(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
