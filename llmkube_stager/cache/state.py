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

import os
import posixpath
import stat
from collections.abc import Callable, Mapping

from llmkube_stager.cache.disk import is_volume_fault
from llmkube_stager.cache.records import (
    has_marker,
    read_record,
    stamp_matches,
)
from llmkube_stager.cache.runrecord import read_run_record
from llmkube_stager.cache.safeio import PathCheck, check_parents, kind_of, open_regular
from llmkube_stager.model import CacheState, LocalFile, LocalState, Manifest, PinState
from llmkube_stager.schemes import verify_only

ParentsCheck = Callable[[str, str], PathCheck]


def read_local_file(
    rel: str,
    dest: str,
    pin: str | None = None,
    validator: str | None = None,
    root: str | None = None,
    follow_symlinks: bool = False,
    parents_check: ParentsCheck = check_parents,
) -> LocalFile:
    """`root`: the model directory `dest` must stay inside (default: its own
    directory). `follow_symlinks`: pvc:// claims are verified where they are
    mounted and never written, so a symlinked model there is read through.
    `parents_check(root, rel)`: check_parents, or its answers per directory
    for one read of the whole cache (read_cache_state)."""
    absent = PinState.ABSENT if pin is not None else PinState.UNPINNED
    parents = parents_check(root, _below(dest, root)) if root is not None else None
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
        if is_volume_fault(exc):
            raise  # the volume's reason, not this file's (#21 item 7)
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
    pin_state, hashed_as, hashed_evidence = _pin_state(dest, pin, st)
    return LocalFile(
        rel,
        state,
        size_bytes=st.st_size,
        record_bytes=record.size_bytes,
        pin=pin_state,
        marker=marker,
        validator=validator,
        hashed_as=hashed_as,
        hashed_evidence=hashed_evidence,
        detail=detail,
    )


def _pin_state(
    dest: str, pin: str | None, st: os.stat_result
) -> tuple[PinState, tuple[int, int, int, float] | None, str | None]:
    """The pin's verdict, and for bytes hashed and found right the identity
    of the inode hashed (dev, ino, size, mtime: its descriptor's fstat), the
    only thing a stamp may vouch for (#10 defect 3), with the evidence of
    its bytes that stamp will carry."""
    if pin is None:
        return PinState.UNPINNED, None, None
    if stamp_matches(dest, pin, st):
        return PinState.STAMP_HIT, None, None
    try:
        digest, hashed, seen = hash_seen(dest, st)
    except OSError:
        # Unprovable here (unreadable, replaced meanwhile): a writer replaces
        # it, a reader refuses, and pvc verify names it "not readable".
        return PinState.MISMATCH, None, None
    if digest != pin:
        return PinState.MISMATCH, None, None
    identity = (hashed.st_dev, hashed.st_ino, hashed.st_size, hashed.st_mtime)
    return PinState.HASHED, identity, seen


def read_cache_state(manifest: Manifest, validators: Mapping[str, str] | None = None) -> CacheState:
    """`validators`: the run record's (cache/runrecord.py), when the caller
    read it already; else it is read here."""
    if validators is None:
        validators = read_run_record(manifest.root).validators
    follow = verify_only(manifest.kind)
    parents = _per_directory(check_parents)
    return CacheState(
        root_exists=os.path.isdir(manifest.root),
        files={
            f.rel: read_local_file(
                f.rel, f.dest, f.sha256, validators.get(f.rel), manifest.root, follow, parents
            )
            for f in manifest.files
        },
    )


def _per_directory(check: ParentsCheck) -> ParentsCheck:
    """`check` asked once per directory of one read of the cache: the files
    of a directory share its parents, and walking them again per file was
    a fifth of a 2,000-file warm start (#16). Like the walk itself, the
    answer is as of the moment it was taken; the file's own lstat and the
    publish still see what is there later."""
    answers: dict[tuple[str, str], PathCheck] = {}

    def checked(root: str, rel: str) -> PathCheck:
        key = (root, rel[: rel.rfind("/") + 1])  # its directory part
        found = answers.get(key)
        if found is None:
            found = answers[key] = check(root, rel)
        return found

    return checked


def _below(dest: str, root: str) -> str:
    """`dest` relative to `root`; the manifest builds `dest` as `root/rel`,
    so a prefix cut, where posixpath.relpath (abspath of both) cost a tenth
    of a 2,000-file warm start (#16)."""
    prefix = root.rstrip("/") + "/"
    if dest.startswith(prefix) and "/./" not in dest and "/../" not in dest:
        return dest[len(prefix) :]
    return posixpath.relpath(dest, root)


def holds_version(path: str, sha256: str | None, blob_id: str | None) -> bool:
    """Whether the file holds the bytes a Hugging Face commit names: its LFS
    sha256, else its git blob id (#10 defect 12, #29 item 1). Unreadable,
    replaced meanwhile, or nothing to compare with: no."""
    try:
        if sha256 is not None:
            return hash_file(path)[0] == sha256
        if blob_id:
            return git_blob_id(path) == blob_id.strip('"')
    except OSError:
        return False
    return False


def git_blob_id(path: str) -> str:
    import hashlib

    fd = open_regular(path)
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(fd).st_size
        sha = hashlib.sha1(b"blob %d\x00" % size, usedforsecurity=False)
        while chunk := handle.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


def hash_file(path: str, expected: os.stat_result | None = None) -> tuple[str, os.stat_result]:
    """sha256 of a regular file and its descriptor's fstat (`hash_seen`)."""
    digest, after, _seen = hash_seen(path, expected)
    return digest, after


def hash_seen(
    path: str, expected: os.stat_result | None = None
) -> tuple[str, os.stat_result, str | None]:
    """sha256 of a regular file (opened without following a symlink or
    blocking on a FIFO), its descriptor's fstat taken after the read, and
    the evidence of those bytes a stamp will carry, read through the same
    descriptor (#21 item 2, cache/evidence.py; handed to the stamp by the
    caller, #32 item 5). `expected`: the stat it was judged by, which the
    opened file must still be (else it was replaced meanwhile: OSError). A
    file written while it was read (size or mtime moved) is reported with
    an empty stat, which matches nothing: never stamped (#10 defect 3)."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as handle:
        before = os.fstat(fd)
        if expected is not None and not os.path.samestat(before, expected):
            raise FileNotFoundError(f"{path} was replaced while it was being read")
        import hashlib  # not on the warm path: a stamp hit reads no bytes

        digest = hashlib.file_digest(handle, "sha256").hexdigest()
        after = os.fstat(fd)
        if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            return digest, os.stat_result((0,) * 10), None
        from llmkube_stager.cache import evidence

        seen = evidence.of_descriptor(fd, after.st_size)
    return digest, after, seen
