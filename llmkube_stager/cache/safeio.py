"""Reading a shared cache without trusting it (#11).

A cache volume is written by other pods, old scripts, people with `kubectl
exec` and sometimes by something hostile. Any name the agent reads may be a
symlink leading outside the cache, a FIFO on which open(2) blocks forever, a
directory, or a file this uid may not read. So bookkeeping files are opened
with O_NOFOLLOW | O_NONBLOCK and used only when fstat says they are regular
files; the directories between the model directory and a file are checked
one by one (no symlink, a real directory); and trees are walked without
recursion (a 1,100-deep tree broke `os.walk`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from llmkube_stager.cache.disk import is_volume_fault

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Errors that say "something is there, but not for this uid": never the
# same as absent (#11 item 5). A failing volume (EIO) or a dead mount is
# raised instead (disk.is_volume_fault, #21 item 7): its reason is the
# volume's, not the fsGroup remedy of an unreadable file.
_UNREADABLE = frozenset({errno.EACCES, errno.EPERM})


class NotRegularFile(OSError):
    """A name the agent reads holds a symlink, FIFO, device or directory."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({what})", path)
        self.what = what


def kind_of(mode: int) -> str:
    """A short name for a file type, for messages."""
    for test, name in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    ):
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def open_regular(path: str, dir_fd: int | None = None) -> int:
    """Open a file for reading that must be a regular file: never follows a
    final symlink (ELOOP), never blocks on a FIFO, refuses anything but a
    regular file after fstat. The caller closes the descriptor."""
    try:
        fd = os.open(path, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile(path, "a symlink") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, kind_of(mode))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str, limit: int) -> bytes | None:
    """At most `limit` bytes of a regular file, never following a symlink
    nor blocking on a FIFO; None for anything else (a journal or listing
    that cannot be read is none at all)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Small:
    """What a small bookkeeping file held: its bytes, or why not.

    `absent`: no such name (or a parent that is not a directory).
    `unreadable`: something is there that this uid cannot read.
    `problem`: why the name holds nothing usable (not a regular file, too large).
    `too_large`: a regular file over the limit (its own words to the caller).
    """

    data: bytes | None = None
    absent: bool = False
    unreadable: bool = False
    problem: str = ""
    too_large: bool = False


def read_small(path: str, limit_bytes: int, dir_fd: int | None = None) -> Small:
    """Read a record-sized file whole; larger than `limit_bytes` is invalid
    (a prefix of a huge file is not its content)."""
    try:
        fd = open_regular(path, dir_fd)
    except NotRegularFile as exc:
        return Small(problem=f"it is {exc.what}")
    except (FileNotFoundError, NotADirectoryError):
        return Small(absent=True)
    except OSError as exc:
        return _unreadable(exc)
    try:
        data = os.read(fd, limit_bytes + 1)
    except OSError as exc:
        return _unreadable(exc)
    finally:
        os.close(fd)
    if len(data) > limit_bytes:
        return Small(problem=f"it is larger than {limit_bytes} bytes", too_large=True)
    return Small(data=data)


def _unreadable(exc: OSError) -> Small:
    if is_volume_fault(exc):
        raise exc
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno in _UNREADABLE:
        return Small(unreadable=True, problem=f"it is not readable ({reason})")
    return Small(problem=f"it cannot be opened ({reason})")


@dataclass(frozen=True)
class PathCheck:
    """Whether the directories from the model directory down to a file are
    real directories this uid may search."""

    ok: bool
    missing: bool = False  # a directory on the way does not exist (yet)
    unreadable: bool = False
    problem: str = ""


def check_parents(root: str, rel: str) -> PathCheck:
    """Walk the directory components of `rel` under `root` with O_NOFOLLOW:
    a symlink or a non-directory on the way leads outside the cache (or
    nowhere); EACCES is unreadable, not absent."""
    parts = [p for p in rel.split("/")[:-1] if p]
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return PathCheck(ok=False, missing=True)
    except OSError as exc:
        if is_volume_fault(exc):
            raise
        why = os.strerror(exc.errno or 0)
        return PathCheck(ok=False, unreadable=True, problem=f"{root}: {why}")
    try:
        for i, part in enumerate(parts):
            shown = "/".join(parts[: i + 1])
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                return PathCheck(ok=False, missing=True)
            except OSError as exc:
                return _bad_component(exc, shown)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)
    return PathCheck(ok=True)


def _bad_component(exc: OSError, shown: str) -> PathCheck:
    if is_volume_fault(exc):
        raise exc
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return PathCheck(ok=False, problem=f"{shown} is a symlink or not a directory")
    if exc.errno in _UNREADABLE:
        return PathCheck(
            ok=False, unreadable=True, problem=f"{shown}: {os.strerror(exc.errno or 0)}"
        )
    return PathCheck(ok=False, problem=f"{shown}: {os.strerror(exc.errno or 0)}")


def walk_files(root: str) -> Iterator[tuple[str, list[os.DirEntry[str]]]]:
    """(directory, its non-directory entries) for every directory under
    `root`, without recursion and without following symlinks. A directory
    that cannot be listed (gone, EACCES, a path too long) is skipped."""
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as listing:
                entries = list(listing)
        except OSError:
            continue
        files = []
        for entry in entries:
            if _is_real_dir(entry):
                stack.append(entry.path)
            else:
                files.append(entry)
        yield directory, files


def _is_real_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False
