"""What the cache holds for a manifest: local reads only, never the network.

Each file's size against its own size record and, where pinned, its bytes
against the pin (a stamp hit skips the read, spec §7).

Nothing here trusts the cache (#11): the directories down to a file must be
real directories (a symlink among them leads outside), the file itself a
regular file (lstat: a symlink is not one), and bookkeeping files are opened
without following symlinks or blocking on FIFOs (cache/safeio.py). What this
uid cannot read is UNREADABLE, never absent.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat

from llmkube_stager.cache.records import (
    has_marker,
    read_record,
    read_validators,
    stamp_matches,
)
from llmkube_stager.cache.safeio import check_parents, kind_of, open_regular
from llmkube_stager.model import CacheState, LocalFile, LocalState, Manifest, PinState


def read_local_file(
    rel: str,
    dest: str,
    pin: str | None = None,
    validator: str | None = None,
    root: str | None = None,
    follow_symlinks: bool = False,
) -> LocalFile:
    """`root`: the model directory `dest` must stay inside (default: its own
    directory). `follow_symlinks`: pvc:// claims are verified where they are
    mounted and never written, so a symlinked model there is read through."""
    absent = PinState.ABSENT if pin is not None else PinState.UNPINNED
    base = root if root is not None else posixpath.dirname(dest)
    parents = check_parents(base, posixpath.relpath(dest, base)) if root is not None else None
    if parents is not None and not parents.ok:
        if parents.missing:
            return LocalFile(rel, LocalState.MISSING, pin=absent)
        state = LocalState.UNREADABLE if parents.unreadable else LocalState.NOT_A_FILE
        return LocalFile(rel, state, pin=absent, detail=parents.problem)
    marker = pin is not None and has_marker(dest, pin)
    try:
        st = os.stat(dest) if follow_symlinks else os.lstat(dest)
    except (FileNotFoundError, NotADirectoryError):
        return _without_file(rel, dest, absent, marker)
    except OSError as exc:
        detail = f"{rel}: {os.strerror(exc.errno or 0)}"
        return LocalFile(rel, LocalState.UNREADABLE, pin=absent, marker=marker, detail=detail)
    if not stat.S_ISREG(st.st_mode):
        detail = f"{rel} is {kind_of(st.st_mode)}"
        return LocalFile(rel, LocalState.NOT_A_FILE, pin=absent, marker=marker, detail=detail)
    return _with_file(rel, dest, st, pin, marker, validator)


def _without_file(rel: str, dest: str, absent: PinState, marker: bool) -> LocalFile:
    """No file: an unreadable record still says the cache is not ours to judge."""
    record = read_record(dest)
    if record.unreadable:
        detail = f"the size record of {rel}: {record.problem}"
        return LocalFile(rel, LocalState.UNREADABLE, pin=absent, marker=marker, detail=detail)
    return LocalFile(rel, LocalState.MISSING, pin=absent, marker=marker)


def _with_file(
    rel: str, dest: str, st: os.stat_result, pin: str | None, marker: bool, validator: str | None
) -> LocalFile:
    record = read_record(dest)
    detail = ""
    if record.unreadable:
        detail = f"the size record of {rel}: {record.problem}"
        absent = PinState.ABSENT if pin is not None else PinState.UNPINNED
        return LocalFile(
            rel, LocalState.UNREADABLE, st.st_size, pin=absent, marker=marker, detail=detail
        )
    if record.size_bytes is None:
        state = LocalState.LEGACY
        if record.problem:
            detail = f"the size record of {rel} is not valid ({record.problem})"
    else:
        state = LocalState.COMPLETE if record.size_bytes == st.st_size else LocalState.MISMATCH
    return LocalFile(
        rel,
        state,
        size_bytes=st.st_size,
        record_bytes=record.size_bytes,
        pin=_pin_state(dest, pin, st),
        marker=marker,
        validator=validator,
        detail=detail,
    )


def _pin_state(dest: str, pin: str | None, st: os.stat_result) -> PinState:
    if pin is None:
        return PinState.UNPINNED
    if stamp_matches(dest, pin, st):
        return PinState.STAMP_HIT
    try:
        return PinState.HASHED if sha256_of(dest, st) == pin else PinState.MISMATCH
    except OSError:
        # Unprovable here (unreadable, replaced meanwhile): a writer replaces
        # it, a reader refuses, and pvc verify names it "not readable".
        return PinState.MISMATCH


def read_cache_state(manifest: Manifest) -> CacheState:
    validators = read_validators(manifest.root)
    follow = manifest.kind == "pvc"
    return CacheState(
        root_exists=os.path.isdir(manifest.root),
        files={
            f.rel: read_local_file(
                f.rel, f.dest, f.sha256, validators.get(f.rel), manifest.root, follow
            )
            for f in manifest.files
        },
    )


def sha256_of(path: str, expected: os.stat_result | None = None) -> str:
    """The digest of a regular file, opened without following a symlink or
    blocking on a FIFO; `expected`: the stat it was judged by, which the
    opened file must still be (else it was replaced meanwhile: OSError)."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as handle:
        if expected is not None and not os.path.samestat(os.fstat(fd), expected):
            raise FileNotFoundError(f"{path} was replaced while it was being read")
        return hashlib.file_digest(handle, "sha256").hexdigest()
