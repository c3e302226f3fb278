"""The staged files appear in DEST_DIR (#24 item 4).

The engine stages into DEST_DIR/.llmkube-stager/model, where its size
records, stamps, journals and partials live beside the files as everywhere
else. Once the whole set is staged, each file is hard-linked into DEST_DIR
under its name (link to a private temp name, then one rename onto the final
name): the same inode, no byte copied, and DEST_DIR shows the model's files
and one dot directory, which neither `ls` nor a model server's glob lists.
Where the filesystem refuses hard links, a relative symlink is made instead.

The model server starts only after the init container exits 0, so it never
sees a half-exposed set; a container killed while exposing is run again by
the kubelet and links what is missing (a name that is already the staged
inode is left as it is: a warm restart changes nothing).
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
from collections.abc import Iterable

from llmkube_stager.cache.disk import disk_error, ensure_dir
from llmkube_stager.errors import CacheError, InvalidFileSet, Reason
from llmkube_stager.kserve.uris import PRIVATE_DIR
from llmkube_stager.layout import exposed_rel

# A hard link is refused (filesystem, quota of links, FUSE): a symlink then.
_NO_HARD_LINK = frozenset({errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP})
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def expose(dest: str, private: str, files: Iterable[tuple[str, str]]) -> int:
    """Link each (rel, staged path) to DEST_DIR/rel; returns how many names
    were (re)linked."""
    files = list(files)
    for rel, _ in files:
        if rel.split("/", 1)[0] == PRIVATE_DIR:
            # DEST_DIR/.llmkube-stager/... is the agent's own: a model file
            # there would replace a staged file's name (a hostile listing).
            raise InvalidFileSet(
                f"the model file {rel[:200]!r} would land in DEST_DIR's private {PRIVATE_DIR}/"
            )
    linked = 0
    for rel, staged in files:
        try:
            linked += _expose_one(dest, private, rel, staged)
        except OSError as exc:
            translated = disk_error(exc, "exposing", rel)
            if isinstance(translated, OSError):
                raise CacheError(
                    f"cannot link {rel} into {dest}: {os.strerror(exc.errno or 0)}",
                    reason=Reason.CACHE_UNWRITABLE,
                    file=rel,
                ) from None
            raise translated from None
    return linked


def _expose_one(dest: str, private: str, rel: str, staged: str) -> int:
    target = posixpath.join(dest, rel)
    # Every directory on the way is a real directory inside DEST_DIR (never
    # a symlink leading out, cache/disk.py).
    ensure_dir(posixpath.dirname(target), dest, rel)
    source = os.stat(staged, follow_symlinks=False)
    try:
        current = os.stat(target, follow_symlinks=False)
        if (current.st_dev, current.st_ino) == (source.st_dev, source.st_ino):
            return 0
    except FileNotFoundError:
        pass
    temp = posixpath.join(private, f"link.{os.urandom(8).hex()}.llmkube-tmp")
    try:
        os.link(staged, temp, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINK:
            raise
        os.symlink(posixpath.relpath(staged, posixpath.dirname(target)), temp)
    try:
        os.rename(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return 1


def drop_stale(dest: str, root: str, keep: Iterable[str]) -> int:
    """#24 review: after an OnChange refresh the engine keeps the staged
    copy of a file the source no longer has; the name this agent exposed
    for it (the same inode, or the fallback symlink to it) is unlinked from
    DEST_DIR, so the server never sees the old set's file beside the new
    set. Any other name is left as it is; no symlink is followed."""
    kept = set(keep)
    dropped = 0
    for dirpath, _, filenames in os.walk(root):
        below = posixpath.relpath(dirpath, root)
        for name in filenames:
            # The name it was exposed under (a `x.sha256` is staged apart
            # from any stamp, layout.staged_rel, #31 item 4).
            rel = exposed_rel(name if below == "." else f"{below}/{name}")
            if rel not in kept:
                dropped += _drop_if_ours(dest, rel, posixpath.join(dirpath, name))
    return dropped


def _drop_if_ours(dest: str, rel: str, staged: str) -> int:
    *parents, name = rel.split("/")
    try:
        source = os.stat(staged, follow_symlinks=False)
        fd = os.open(dest, _DIR_FLAGS)
    except OSError:
        return 0
    try:
        for part in parents:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        current = os.stat(name, dir_fd=fd, follow_symlinks=False)
        ours = (current.st_dev, current.st_ino) == (source.st_dev, source.st_ino) or (
            stat.S_ISLNK(current.st_mode)
            and os.readlink(name, dir_fd=fd)
            == posixpath.relpath(staged, posixpath.dirname(posixpath.join(dest, rel)))
        )
        if not ours:
            return 0
        os.unlink(name, dir_fd=fd)
        return 1
    except OSError:
        return 0  # missing, or a way through a symlink: not ours to touch
    finally:
        os.close(fd)
