"""The per-file records beside a model's files: size records, sha256
stamps with their evidence, rejection markers, read without trusting the
cache and written atomically (`write_atomic`, CONTRACT §4).

Every on-disk format has one owner in this package: these per-file records
here, the run record (`.llmkube-validators*`, `.llmkube-shards`, the Job's
commit claim) in runrecord.py, the parallel transfer's resume journal in
journal.py, the listing record in listrec.py, the evidence's hash in
evidence.py, and the names of them all in layout.py.
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass

from llmkube_stager.cache import evidence
from llmkube_stager.cache.safeio import Small, read_small
from llmkube_stager.layout import (
    atomic_tmp_path,
    evidence_path,
    marker_path,
    parse_size_record,
    record_path,
    stamp_path,
)

# Group-writable: the cache is shared by pods of one fsGroup (spec §1).
FILE_MODE = 0o664
_RECORD_MAX_BYTES = 64
# `<64 hex> <size> <mtime>` fits easily; a larger file is not a stamp.
_STAMP_MAX_BYTES = 256
# `<scheme> <64 hex> <size> <mtime> <64 hex>`, likewise.
_EVIDENCE_MAX_BYTES = 256


@dataclass(frozen=True)
class RecordRead:
    """A size record as read: its value, or why there is none. Only a
    missing or invalid record means "legacy"; an unreadable one makes the
    file unusable and is never overwritten (#11 item 5)."""

    size_bytes: int | None
    unreadable: bool = False
    problem: str = ""  # why a record that exists is not valid (or not readable)


def read_record(dest: str) -> RecordRead:
    small = read_small(record_path(dest), _RECORD_MAX_BYTES)
    if small.unreadable:
        return RecordRead(None, unreadable=True, problem=small.problem)
    if small.data is None:
        return RecordRead(None, problem=small.problem)
    value = parse_size_record(small.data.decode("ascii", errors="replace"))
    if value is None:
        return RecordRead(None, problem="it holds no decimal byte count")
    return RecordRead(value)


def read_size_record(dest: str) -> int | None:
    return read_record(dest).size_bytes


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


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_atomic(target: str, data: bytes) -> None:
    """`llmkube_atomic_write`: temp `<target>.llmkube-tmp.XXXXXX` + rename, the
    temp removed on any failure (scenario 62); a concurrent reader never sees a
    partial record (scenario 39). Everything happens relative to the parent
    directory opened with O_NOFOLLOW, so a symlinked directory cannot send
    the temp outside the cache (ELOOP), and a target this uid cannot read is
    never replaced (#11 item 5)."""
    directory, name = os.path.split(target)
    dir_fd = os.open(directory or ".", _DIR_FLAGS)
    try:
        _refuse_unreadable(name, dir_fd, target)
        tmp = os.path.basename(atomic_tmp_path(target))
        fd = os.open(tmp, _CREATE_FLAGS, FILE_MODE, dir_fd=dir_fd)
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        with contextlib.suppress(OSError):
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _refuse_unreadable(name: str, dir_fd: int, target: str) -> None:
    """Something this uid cannot read is somebody's evidence, not ours to replace."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise PermissionError(
                exc.errno, "exists but is not readable by this uid; not replaced", target
            ) from None
        return  # absent, or a symlink/FIFO/dir name: replacing the name is safe
    os.close(fd)


def write_size_record(dest: str, size_bytes: int) -> None:
    """Decimal byte count, no newline, as the shell's printf wrote it."""
    write_atomic(record_path(dest), str(size_bytes).encode("ascii"))


def read_stamp(dest: str) -> tuple[str, int, int] | None:
    """(digest, size, mtime) of a stamp triple; a legacy bare-digest stamp or
    anything malformed is a miss (re-hashed once and rewritten, spec §4.2)."""
    return _stamp(read_small(stamp_path(dest), _STAMP_MAX_BYTES))


def _stamp(small: Small) -> tuple[str, int, int] | None:
    if small.data is None:
        return None
    parts = small.data.decode("ascii", errors="replace").split()
    if len(parts) != 3 or not all(_is_int(p) for p in parts[1:]):
        return None
    return parts[0].lower(), int(parts[1]), int(parts[2])


def stamp_status(dest: str, st: os.stat_result) -> str:
    """For `inspect`: absent, unreadable, legacy (present but not a valid
    triple: hashed again and rewritten), matches, stale, or contradicted
    (it matches the file's size and mtime, but its evidence does not match
    the bytes: never trusted, #21 item 2)."""
    small = read_small(stamp_path(dest), _STAMP_MAX_BYTES)
    if small.absent:
        return "absent"
    if small.unreadable:
        return "unreadable"
    stamp = _stamp(small)
    if stamp is None:
        return "legacy"
    if stamp[1:] != (st.st_size, int(st.st_mtime)):
        return "stale"
    return "matches" if stamp_matches(dest, stamp[0], st) else "contradicted"


def _is_int(text: str) -> bool:
    digits = text.removeprefix("-")
    return digits.isascii() and digits.isdigit()


def stamp_matches(dest: str, digest: str, st: os.stat_result) -> bool:
    """Trust semantics of the scripts: a file whose stamp still matches its
    size and mtime is accepted without being hashed (`stamp hit`), and
    since #21 item 2 only if its evidence (when there is any) matches what
    an open of the file reads now: size and mtime come from a name, which
    a FUSE node's cache may still attribute to another writer's file. A
    stamp without evidence was written by the scripts, the metal agent or
    an older agent (spec §4.2): trusted as they trust it."""
    triple = (digest, st.st_size, int(st.st_mtime))
    if read_stamp(dest) != triple:
        return False
    small = read_small(evidence_path(dest), _EVIDENCE_MAX_BYTES)
    if small.absent:
        return True
    recorded = _evidence(small)
    if recorded is None or recorded[0] != triple:
        return False
    return evidence.of_name(dest, st.st_size) == recorded[1]


def _evidence(small: Small) -> tuple[tuple[str, int, int], str] | None:
    """((digest, size, mtime) of the stamp it belongs to, evidence)."""
    if small.data is None:
        return None
    parts = small.data.decode("ascii", errors="replace").split()
    if len(parts) != 5 or parts[0] != evidence.SCHEME or not all(_is_int(p) for p in parts[2:4]):
        return None
    return (parts[1].lower(), int(parts[2]), int(parts[3])), parts[4].lower()


def write_stamp(dest: str, digest: str, st: os.stat_result, seen: str) -> None:
    """The evidence `seen` first, then the stamp (its format shared, spec
    §4.2): a stamp of ours never stands without the evidence it belongs to
    (a crash between the two leaves evidence for another triple: a re-hash)."""
    triple = f"{digest} {st.st_size} {int(st.st_mtime)}"
    write_atomic(evidence_path(dest), f"{evidence.SCHEME} {triple} {seen}".encode("ascii"))
    write_atomic(stamp_path(dest), triple.encode("ascii"))


def has_marker(dest: str, expected_digest: str) -> bool:
    """Anything at the marker's name counts (its content is informative
    only): never opened, so a FIFO or a huge file there costs nothing."""
    return os.path.lexists(marker_path(dest, expected_digest))


def write_marker(dest: str, expected_digest: str, actual_digest: str) -> None:
    """Durable: no publish ever clears it; delete by hand to retry (spec §7)."""
    write_atomic(marker_path(dest, expected_digest), actual_digest.encode("ascii"))
