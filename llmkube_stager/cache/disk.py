"""Cache-side OS errors and directories, shared by everything that writes
the cache (publish, the transfer engine, the executor)."""

from __future__ import annotations

import errno
import os

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


def ensure_dir(path: str, root: str, rel: str) -> None:
    """mkdir -p, refusing a directory that resolves outside the model root
    (a symlink planted in a shared cache must not redirect writes)."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise CacheError(
            f"cannot create {path}: {os.strerror(exc.errno or 0)}", file=rel or None
        ) from exc
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != real_root and not real.startswith(real_root + "/"):
        raise CacheError(f"{path} resolves outside the model directory", file=rel or None)
