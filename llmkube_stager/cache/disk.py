"""Cache-side OS errors and directories, shared by everything that writes
the cache (publish, the transfer engine, the acting layer).

`disk_error` is the one translation of a cache-side OSError into the
contract's reasons; `storage_fault` its part for faults of the volume itself
(#21 item 7), which the boundary also applies to an OSError that reached it
untranslated: EIO (an XFS shutdown, a failing disk) is `ModelCacheFailing`,
ENOTCONN/ESTALE (a FUSE daemon that died, a stale NFS handle) is
`ModelCacheDisconnected`, ENOSPC with no free inode left is
`ModelTransferOutOfSpace` with the inode remedy, EROFS from a filesystem
mounted read-write that turned itself read-only (#29 item 7) is
`ModelCacheFailing`: never an internal error with a traceback, nor the
fsGroup remedy of an unwritable volume."""

from __future__ import annotations

import contextlib
import errno
import os

from llmkube_stager.errors import (
    REMEDY_CACHE_TURNED_READ_ONLY,
    REMEDY_LEADS_OUTSIDE,
    REMEDY_OUT_OF_INODES,
    CacheError,
    Reason,
    StagerError,
    TransferError,
)

_OUT_OF_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
# The volume failed the I/O (EUCLEAN: XFS's EFSCORRUPTED).
_FAILING = frozenset({errno.EIO, errno.EUCLEAN})
# The mount is dead: FUSE without its daemon (ENOTCONN; ECONNABORTED once the
# connection was aborted), NFS's stale handle.
_DISCONNECTED = frozenset({errno.ENOTCONN, errno.ECONNABORTED, errno.ESTALE})


def is_volume_fault(exc: OSError) -> bool:
    """EIO or a dead mount: the volume failed, not a file or a permission.
    The readers of the cache (safeio, state) raise such an error as it is,
    never judge a file "unreadable" by it (#21 item 7)."""
    return exc.errno in _FAILING or exc.errno in _DISCONNECTED


_UNWRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
# A name the agent writes through turned out to be a symlink (O_NOFOLLOW) or a
# file where a directory belongs: it would lead outside the cache (#11).
_LEADS_OUTSIDE = frozenset({errno.ELOOP, errno.ENOTDIR})
# A directory sits where the agent writes a file (a record, the destination).
_TAKEN_BY_A_DIRECTORY = frozenset({errno.EISDIR, errno.ENOTEMPTY})
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def storage_fault(
    exc: OSError, what: str, rel: str | None = None, where: str | None = None
) -> StagerError | None:
    """The reason of a fault of the volume itself, or None for any other
    errno. `where` (a path on the volume, else the error's own filename)
    tells an inode shortage from a byte shortage."""
    shown = f"{what} {rel}" if rel else what
    why = os.strerror(exc.errno or 0)
    if exc.errno in _OUT_OF_SPACE:
        if _out_of_inodes(where or _filename(exc)):
            return TransferError(
                f"no free inode left on the cache volume while {shown}",
                reason=Reason.OUT_OF_SPACE,
                file=rel,
                remedy=REMEDY_OUT_OF_INODES,
            )
        return TransferError(
            f"no space left on device while {shown}", reason=Reason.OUT_OF_SPACE, file=rel
        )
    if exc.errno in _FAILING:
        return CacheError(
            f"the cache volume failed an I/O while {shown}: {why}",
            reason=Reason.CACHE_FAILING,
            file=rel,
        )
    if exc.errno in _DISCONNECTED:
        return CacheError(
            f"the cache volume's mount is gone while {shown}: {why}",
            reason=Reason.CACHE_DISCONNECTED,
            file=rel,
        )
    if exc.errno == errno.EROFS:
        return _turned_read_only(where or _filename(exc), shown, rel)
    return None


def _turned_read_only(where: str | None, shown: str, rel: str | None) -> StagerError | None:
    """EROFS from a filesystem mounted read-write that turned itself
    read-only (ext4 `errors=remount-ro` after an error, #29 item 7): the
    volume is failing, and the access-mode and fsGroup remedy of an
    unwritable cache would send the user the wrong way. A mount made
    read-only stays ModelCacheUnwritable (None here)."""
    from llmkube_stager.cache.fs import turned_read_only

    # A name relative to a directory descriptor (write_atomic's temp) says
    # nothing of where it is: the access mode's reason, as before.
    if where is None or not os.path.isabs(where) or not turned_read_only(where):
        return None
    return CacheError(
        f"the cache volume's filesystem turned read-only (after an error) while {shown}",
        reason=Reason.CACHE_FAILING,
        file=rel,
        remedy=REMEDY_CACHE_TURNED_READ_ONLY,
    )


def _filename(exc: OSError) -> str | None:
    name = exc.filename
    return name if isinstance(name, str) and name else None


def _out_of_inodes(where: str | None) -> bool:
    """The filesystem of `where` (or of its nearest existing parent) counts
    inodes and has none left for us. A filesystem that does not count them
    (f_files 0: btrfs, many FUSE mounts) never is."""
    path = where
    while path:
        try:
            st = os.statvfs(path)
        except OSError:
            parent = os.path.dirname(path)
            path = None if parent == path else parent
            continue
        return st.f_files > 0 and st.f_favail == 0
    return False


def disk_error(exc: OSError, what: str, rel: str, where: str | None = None) -> Exception:
    """Translate a cache-side OSError into the contract's reasons; an errno
    it does not know stays the OSError (a bug, with its traceback)."""
    fault = storage_fault(exc, what, rel, where)
    if fault is not None:
        return fault
    if exc.errno in _UNWRITABLE:
        return CacheError(
            f"cannot write the cache while {what} {rel}: {os.strerror(exc.errno or 0)}",
            reason=Reason.CACHE_UNWRITABLE,
            file=rel,
        )
    if exc.errno in _LEADS_OUTSIDE or exc.errno in _TAKEN_BY_A_DIRECTORY:
        return CacheError(
            f"a path in the cache leads outside it or is taken by a directory while {what} "
            f"{rel}: {os.strerror(exc.errno or 0)}",
            reason=Reason.CACHE_UNWRITABLE,
            file=rel,
            remedy=REMEDY_LEADS_OUTSIDE,
        )
    return exc


def ensure_dir(path: str, root: str, rel: str) -> None:
    """mkdir -p of `path` (the model root or a directory under it), refusing
    first and creating nothing when the way leads outside (#11 item 3): the
    model root must not be a symlink, and every component under it is opened
    with O_NOFOLLOW before the next one is created. The root's own parents
    are the volume's (the operator's) and are created as before."""
    shown = rel or None
    real_root = os.path.normpath(root)
    below = os.path.relpath(os.path.normpath(path), real_root)
    if below == ".":
        below = ""
    if below.startswith(".."):
        raise CacheError(f"{path} is not inside the model directory {root}", file=shown)
    fd = _open_root(real_root, shown)
    current = real_root
    try:
        for part in (p for p in below.split("/") if p):
            current = f"{current}/{part}"
            nxt = _step(fd, part, current, shown)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)


def _open_root(root: str, shown: str | None) -> int:
    parent = os.path.dirname(root)
    try:
        if parent:
            os.makedirs(parent, exist_ok=True)
        _mkdir(root)
        return os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise _refusal(exc, root, shown) from None


def _step(fd: int, part: str, shown_path: str, shown: str | None) -> int:
    """Open one directory under `fd`, creating it first if it is missing."""
    try:
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            _mkdir(part, fd)
            return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        raise _refusal(exc, shown_path, shown) from None


def _mkdir(name: str, dir_fd: int | None = None) -> None:
    # Existing: a directory (the O_NOFOLLOW open that follows checks it) or the refusal.
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o775, dir_fd=dir_fd)


def _refusal(exc: OSError, path: str, shown: str | None) -> StagerError:
    reason = os.strerror(exc.errno or 0)
    if exc.errno in _LEADS_OUTSIDE or exc.errno == errno.EEXIST:
        return CacheError(
            f"{path} is a symlink or not a directory: it would lead outside the model directory",
            file=shown,
            remedy=REMEDY_LEADS_OUTSIDE,
        )
    fault = storage_fault(exc, f"creating {path}", None, path)
    if fault is not None:
        return fault.amended(file=shown)
    return CacheError(f"cannot create {path}: {reason}", file=shown)
