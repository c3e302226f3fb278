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
from llmkube_stager.cache.disk import is_volume_fault
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
# `<scheme> <64 hex> <size> <mtime> <64 hex> <inode> <ctime ns>`, likewise.
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
    triple: hashed again and rewritten), matches, stale, contradicted (it
    matches the file's size and mtime, but its evidence does not match the
    bytes: never trusted, #21 item 2) or replaced (it matches size, mtime
    and bytes, but was taken of another file: #29 item 2)."""
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
    return _judge(dest, stamp[0], st)


def _is_int(text: str) -> bool:
    digits = text.removeprefix("-")
    return digits.isascii() and digits.isdigit()


def stamp_matches(dest: str, digest: str, st: os.stat_result) -> bool:
    """Trust semantics of the scripts: a file whose stamp still matches its
    size and mtime is accepted without being hashed (`stamp hit`), and
    since #21 item 2 only if its evidence (when there is any) matches what
    an open of the file reads now: size and mtime come from a name, which
    a FUSE node's cache may still attribute to another writer's file.
    Since #29 item 2 only if the stamp was taken of this very file: a file
    of the same size renamed onto the name within the same mtime second,
    identical in the sampled blocks, matches everything else (see
    `_judge` for stamps that carry no binding)."""
    if read_stamp(dest) != (digest, st.st_size, int(st.st_mtime)):
        return False
    return _judge(dest, digest, st) == "matches"


@dataclass(frozen=True)
class _Evidence:
    triple: tuple[str, int, int]  # the stamp it belongs to: digest, size, mtime
    blocks: str  # evidence.py's digest of the sampled blocks
    # (inode, ctime ns) of the file the stamp was taken of; None in the
    # evidence of an agent before #29 (five fields).
    binding: tuple[int, int] | None


def _judge(dest: str, digest: str, st: os.stat_result) -> str:
    """A stamp whose triple matches `st`: matches, contradicted (not these
    bytes) or replaced (not this file).

    The binding (#29 item 2): the evidence names the inode and change time
    of the file the stamp was taken of, and where one kernel owns the
    filesystem (ext4, XFS, btrfs, tmpfs, overlay: their inode numbers and
    change times tell the truth) the file an open reaches now must be that
    one. The change time matters too: a file deleted frees its inode number,
    which the next file created there may get at once (ext4 does). A
    rename, a write, chmod or chown moves it: a re-hash, never a wrong file.
    Where inode numbers follow the path or a node's cache may lie (FUSE,
    NFS), the evidence decides, and publishers retire what they replace.

    A stamp without a binding (no evidence: the scripts', the metal
    agent's; evidence of five fields: an agent before #29) is trusted only
    when it was put in place at or after its file's last status change: a
    file renamed onto the name (or written) after the stamp is not the file
    it was taken of (a rename moves the renamed file's change time on ext4,
    XFS, btrfs and tmpfs). It costs nothing more than one lstat."""
    small = read_small(evidence_path(dest), _EVIDENCE_MAX_BYTES)
    if small.absent:
        return "matches" if _stamped_after_change(dest, st) else "replaced"
    recorded = _evidence(small)
    if recorded is None or recorded.triple != (digest, st.st_size, int(st.st_mtime)):
        return "contradicted"
    read = evidence.read_name(dest, st.st_size)
    if read is None or read[0] != recorded.blocks:
        return "contradicted"
    now = read[1]
    if recorded.binding is None:
        return "matches" if _stamped_after_change(dest, now) else "replaced"
    if recorded.binding != (now.st_ino, now.st_ctime_ns) and evidence.is_local(
        os.path.dirname(dest) or "."
    ):
        return "replaced"
    return "matches"


def _stamped_after_change(dest: str, st: os.stat_result) -> bool:
    """The stamp's name was last changed (its rename into place) at or
    after the file's: a stamp without a binding (#29 item 2)."""
    try:
        stamp = os.lstat(stamp_path(dest))
    except FileNotFoundError:
        return False
    return stamp.st_ctime_ns >= st.st_ctime_ns


def _evidence(small: Small) -> _Evidence | None:
    """`<scheme> <digest> <size> <mtime> <blocks>`, then since #29 item 2
    ` <inode> <ctime ns>`; anything else is no evidence of a stamp."""
    if small.data is None:
        return None
    parts = small.data.decode("ascii", errors="replace").split()
    if len(parts) not in (5, 7) or parts[0] != evidence.SCHEME:
        return None
    numbers = parts[2:4] + parts[5:]
    if not all(_is_int(p) for p in numbers):
        return None
    binding = (int(parts[5]), int(parts[6])) if len(parts) == 7 else None
    return _Evidence((parts[1].lower(), int(parts[2]), int(parts[3])), parts[4].lower(), binding)


def write_stamp(dest: str, digest: str, st: os.stat_result, seen: str) -> None:
    """The evidence `seen` first, bound to the file `st` describes (its
    inode and change time, #29 item 2), then the stamp (its format shared,
    spec §4.2): a stamp of ours never stands without the evidence it
    belongs to (a crash between the two leaves evidence for another
    triple: a re-hash). An agent before #29 reads the bound evidence as
    none that matches: it hashes the file again, never trusts more."""
    triple = f"{digest} {st.st_size} {int(st.st_mtime)}"
    line = f"{evidence.SCHEME} {triple} {seen} {st.st_ino} {st.st_ctime_ns}"
    write_atomic(evidence_path(dest), line.encode("ascii"))
    write_atomic(stamp_path(dest), triple.encode("ascii"))


def retire_stamp(dest: str) -> None:
    """Remove the stamp and evidence of the file at `dest`, which a publish
    is about to replace (#29 item 2): they vouch for that file, not for
    what takes its name. The stamp first (a reader looks at it first); no
    stamp, no evidence looked for: evidence alone vouches for nothing (a
    stamp of ours written later brings its own; the scripts' stamp meets
    evidence of another triple: a re-hash), and a cold stage pays one
    lookup per file, which on an object-store FUSE mount is a request."""
    for path in (stamp_path(dest), evidence_path(dest)):
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            if is_volume_fault(exc):
                raise
            # Not ours to remove (a directory, EACCES): the binding still
            # keeps it from vouching for the new file.


def has_marker(dest: str, expected_digest: str) -> bool:
    """Anything at the marker's name counts (its content is informative
    only): never opened, so a FIFO or a huge file there costs nothing."""
    return os.path.lexists(marker_path(dest, expected_digest))


def write_marker(dest: str, expected_digest: str, actual_digest: str) -> None:
    """Durable: no publish ever clears it; delete by hand to retry (spec §7)."""
    write_atomic(marker_path(dest, expected_digest), actual_digest.encode("ascii"))
