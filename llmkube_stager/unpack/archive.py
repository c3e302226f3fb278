"""Archives unpacked into DEST_DIR as KServe does (#24 item 2), safely.

KServe's initializer unpacks a .tar (.tar.gz/.tgz, .tar.bz2/.tbz2,
.tar.xz/.txz) or .zip it downloaded (one file of an s3:// prefix, an
http(s) URL, a local file) into the model directory and deletes it. Here
the archive is first staged by the engine like any file (resumable,
size-checked, sha256-verified where pinned), then read member by member
with every buffer bounded (reading.py, #31 item 6):

- a member lands inside DEST_DIR or the run fails: no absolute name, no
  '..' part, nothing under the agent's own dot directory; every directory
  on the way is opened with O_NOFOLLOW (cache/disk.ensure_dir), so a member
  can never write through a symlink the archive made earlier;
- regular files and directories (empty ones too: a Triton ensemble's
  `1/`, #31 item 2), symlinks with a relative target without '..' (they
  point down, so they stay inside), and tar hard links to a regular member
  unpacked before; device files, FIFOs, sockets, and links pointing out are
  refused;
- at most `ArchiveLimits.max_files` members and `max_bytes` unpacked bytes,
  counted as they are written (a zip's stated sizes are not trusted);
- modes are 0644, or 0755 where the owner could execute (#31 item 2); no
  setuid/setgid, no world-writable file, no ownership from the archive.

A refused archive fails with ModelSourceRejected (exit 4) and leaves
DEST_DIR as it was. Members are written into a private directory of the
volume (DEST_DIR/.llmkube-stager/unpack.<random>) without an fsync each;
when all are there, one syncfs(2) makes them durable (#31 item 8), an
intent names the finished directory, and its top-level entries are renamed
into DEST_DIR. A container killed while publishing finishes the same
publish from the intent (#31 item 7: the volume never needs room for a
second copy of the part already published). Then the record of the set
(`unpacked.list`: a header line, then `<size> <name>` per file, read and
written as a stream) is renamed into place and the archive is deleted (as
KServe does: the volume holds the model once). A warm restart finds the
record and every file at its recorded size, and moves no byte.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmkube_stager.cache.records import write_atomic
from llmkube_stager.cache.safeio import read_regular
from llmkube_stager.errors import CacheError
from llmkube_stager.layout import KSERVE_MODEL_SUBDIR as MODEL_SUBDIR
from llmkube_stager.layout import KSERVE_PRIVATE_NAME as PRIVATE_DIR
from llmkube_stager.layout import record_path, stamp_path
from llmkube_stager.unpack.members import ArchiveLimits, ArchiveRefused, Writer

if TYPE_CHECKING:
    from llmkube_stager.unpack.reading import Member

# tarfile, zipfile, zlib, shutil and json are imported where an archive is
# unpacked: every KServe-form start reads the record, a warm one nothing else
# (#16: a warm start is what a restarted pod waits for).
RECORD_NAME = "unpacked.list"
_RECORD_VERSION = 2
_INTENT_NAME = "publishing"
_HEADER_MAX_BYTES = 64 << 10
# What KServe unpacks (mimetypes: application/x-tar or application/zip).
ARCHIVE_SUFFIXES = (
    ".tar",
    ".tar.gz",
    ".tgz",
    ".taz",
    ".tz",
    ".tar.bz2",
    ".tbz2",
    ".tar.xz",
    ".txz",
    ".zip",
)


@dataclass(frozen=True)
class Unpacked:
    files: int
    size_bytes: int
    archive: str  # the staged archive's path, deleted once the set is recorded


def archive_kind(name: str) -> str | None:
    """ "tar" or "zip" for a name KServe unpacks (mimetypes' application/x-tar
    or application/zip), else None."""
    lower = name.lower()
    if not lower.endswith(ARCHIVE_SUFFIXES):
        return None
    return "zip" if lower.endswith(".zip") else "tar"


def unpacked_record(private: str, source: str, dest: str) -> Unpacked | None:
    """A finished unpack of `source` whose files are all in DEST_DIR at
    their sizes; None otherwise (the archive is unpacked again)."""
    files = 0
    total = 0
    archive: list[str] = []
    try:
        for size, rel in _record_lines(posixpath.join(private, RECORD_NAME), source, archive):
            st = os.stat(posixpath.join(dest, rel), follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or st.st_size != size:
                return None
            files += 1
            total += size
    except (OSError, ValueError):
        return None
    return Unpacked(files, total, archive[0])


def _record_lines(path: str, source: str, archive: list[str]) -> Iterator[tuple[int, str]]:
    """(size, rel) of each file of a record of `source` (its archive's path
    appended to `archive`); ValueError for a record of another source or
    version, OSError when there is none."""
    import json

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    with open(fd, encoding="utf-8", errors="surrogateescape") as lines:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a file")
        head = json.loads(lines.readline(_HEADER_MAX_BYTES))
        if head.get("v") != _RECORD_VERSION or head.get("source") != source:
            raise ValueError("another record")
        archive.append(str(head.get("archive", "")))
        for line in lines:
            size, sep, rel = line.rstrip("\n").partition(" ")
            if not sep:
                raise ValueError("a broken line")
            yield int(size), rel


def unpack(
    archive: str, name: str, kind: str, source: str, dest: str, limits: ArchiveLimits
) -> Unpacked:
    """Unpack the staged `archive` (file name `name`, `kind` tar or zip) into `dest`, or finish
    the publish a killed container left (#31 item 7)."""
    private = posixpath.join(dest, PRIVATE_DIR)
    work = _pending_publish(private, source)
    if work is None:
        _clear_stale_work(private)
        work = _unpack_to_work(archive, name, kind, source, private, limits)
        intend(private, work, source)
    done = publish_work(private, work, source, dest, name)
    tidy(private, done)
    return done


def intend(private: str, work: str, source: str) -> None:
    """The finished work directory made durable and named by the intent."""
    # One sync for every member's bytes and names, where KServe's
    # initializer syncs none and #24 synced each file (#31 item 8).
    sync_filesystem(private)
    write_atomic(posixpath.join(private, _INTENT_NAME), f"{work}\n{source}".encode())


def publish_work(private: str, work: str, source: str, dest: str, name: str) -> Unpacked:
    """The intended work directory's entries renamed into `dest`, then its
    record into place (again after a kill: entries leave as published)."""
    _publish(posixpath.join(private, work), dest, "")
    sync_filesystem(dest)
    os.replace(posixpath.join(private, f"{work}.list"), posixpath.join(private, RECORD_NAME))
    _fsync_dir(private)
    done = unpacked_record(private, source, dest)
    if done is None:
        raise CacheError(f"the files unpacked from {name} changed in {dest} while publishing")
    return done


def _staged_here(private: str, archive: str) -> bool:
    """Whether the record's archive path is a file the engine staged in the
    pair's model directory: a record is read from the volume, and one that
    names anything else (corrupted, another writer) deletes nothing."""
    model = posixpath.join(private, MODEL_SUBDIR) + "/"
    return archive.startswith(model) and posixpath.normpath(archive) == archive


def tidy(private: str, done: Unpacked) -> None:
    """The set is recorded: its work directory, the intent, the archive and
    its records go (the volume holds the model once, as with KServe's
    initializer). Also on a warm start, for a container killed in between."""
    import shutil

    if _staged_here(private, done.archive):
        for path in (done.archive, record_path(done.archive), stamp_path(done.archive)):
            with contextlib.suppress(OSError):
                os.unlink(path)
    if os.path.lexists(posixpath.join(private, _INTENT_NAME)):
        with contextlib.suppress(OSError):
            os.unlink(posixpath.join(private, _INTENT_NAME))
        with contextlib.suppress(OSError), os.scandir(private) as entries:
            for entry in entries:
                if entry.name.startswith("unpack.") and entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)


def _pending_publish(private: str, source: str) -> str | None:
    """The finished work directory of `source` an intent names (a container
    killed while publishing it), or None."""
    raw = read_regular(posixpath.join(private, _INTENT_NAME), _HEADER_MAX_BYTES)
    if raw is None:
        return None
    work, _, intended = raw.decode("utf-8", "surrogateescape").partition("\n")
    if (
        intended == source
        and work.startswith("unpack.")
        and "/" not in work
        and os.path.isdir(posixpath.join(private, work))
        and os.path.isfile(posixpath.join(private, f"{work}.list"))
    ):
        return work
    with contextlib.suppress(OSError):
        os.unlink(posixpath.join(private, _INTENT_NAME))
    return None


def _clear_stale_work(private: str) -> None:
    """A killed container's half unpack: never published, removed."""
    import shutil

    with contextlib.suppress(OSError), os.scandir(private) as entries:
        for entry in entries:
            if not entry.name.startswith("unpack."):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def _unpack_to_work(
    archive: str, name: str, kind: str, source: str, private: str, limits: ArchiveLimits
) -> str:
    work = f"unpack.{os.urandom(6).hex()}"
    os.mkdir(posixpath.join(private, work), 0o700)
    try:
        _write_work(archive, name, kind, source, posixpath.join(private, work), limits)
    except BaseException:
        _clear_stale_work(private)
        raise
    return work


def _write_work(
    archive: str, name: str, kind: str, source: str, work: str, limits: ArchiveLimits
) -> None:
    """Every member under `work`, its record beside it (`<work>.list`)."""
    import json

    from llmkube_stager.unpack.reading import Bound

    listing = f"{work}.list"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with open(
        os.open(listing, flags, 0o644), "w", encoding="utf-8", errors="surrogateescape"
    ) as record:
        head = {"v": _RECORD_VERSION, "source": source, "archive": archive}
        record.write(json.dumps(head) + "\n")
        writer = Writer(work, name, limits, record)
        try:
            with _bad_bytes(name, kind):
                for member in _members(archive, kind, limits):
                    writer.add(member)
        except Bound as bound:
            raise ArchiveRefused(name, str(bound)) from None


def _members(archive: str, kind: str, limits: ArchiveLimits) -> Iterator[Member]:
    from llmkube_stager.unpack.reading import tar_members, zip_members

    if kind == "zip":
        return zip_members(archive, limits.max_files)
    return tar_members(archive)


@contextlib.contextmanager
def _bad_bytes(name: str, kind: str) -> Iterator[None]:
    """The archive's own bytes are bad: ArchiveRefused. An OSError with an
    errno is the volume's failure (ENOSPC, EROFS...) and passes; one without
    (gzip.BadGzipFile, bz2's "Invalid data stream") is the bytes again."""
    import lzma
    import tarfile
    import zipfile
    import zlib

    why = f"it is not a valid {kind} archive"
    # An encrypted zip member (zipfile asks for a password: RuntimeError), a
    # bad bzip2 or lzma stream: the bytes, not a bug (#24 review).
    bad: tuple[type[BaseException], ...] = (tarfile.TarError, zipfile.BadZipFile, EOFError)
    bad += (zipfile.LargeZipFile, NotImplementedError, RuntimeError, lzma.LZMAError, zlib.error)
    try:
        yield
    except bad as exc:
        raise ArchiveRefused(name, f"{why} ({type(exc).__name__})") from None
    except OSError as exc:
        if exc.errno is not None:
            raise
        raise ArchiveRefused(name, f"{why} ({type(exc).__name__})") from None


def _publish(work: str, dest: str, rel: str) -> None:
    """Every entry of the finished work directory renamed into DEST_DIR:
    a whole subtree in one rename where DEST_DIR has no such name (the
    first publish), merged where it has the directory (a publish a killed
    container began, or an archive unpacked over an older tree). Entries
    leave `work` as they are published, so running it again finishes it."""
    here = posixpath.join(work, rel)
    with os.scandir(here) as entries:
        for entry in entries:
            sub = f"{rel}/{entry.name}" if rel else entry.name
            target = posixpath.join(dest, sub)
            try:
                current = os.lstat(target)
            except FileNotFoundError:
                current = None
            if current is None:
                os.rename(entry.path, target)
            elif entry.is_dir(follow_symlinks=False) and stat.S_ISDIR(current.st_mode):
                _publish(work, dest, sub)
            elif entry.is_dir(follow_symlinks=False) or stat.S_ISDIR(current.st_mode):
                raise CacheError(
                    f"{sub[:200]!r} in {dest} is a directory where the archive has a file, "
                    "or the other way round: empty DEST_DIR",
                    file=sub,
                )
            else:
                os.rename(entry.path, target)  # replaces the older tree's file


def sync_filesystem(path: str) -> None:
    """syncfs(2) of the filesystem holding `path`: every file written there
    durable at once (sync(2) where libc has no syncfs)."""
    import ctypes

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            syncfs = ctypes.CDLL(None, use_errno=True).syncfs
        except (OSError, AttributeError):
            os.sync()
            return
        if syncfs(fd) != 0:
            code = ctypes.get_errno()
            if code == errno.ENOSYS:
                os.sync()
                return
            raise OSError(code, os.strerror(code), path)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
