"""Archives unpacked into DEST_DIR as KServe does (#24 item 2), safely.

KServe's initializer unpacks a .tar, .tar.gz/.tgz or .zip it downloaded
(one file of an s3:// prefix, an http(s) URL, a local file) into the model
directory and deletes it. Here the archive is first staged by the engine
like any file (resumable, size-checked, sha256-verified where pinned),
then read member by member:

- a member lands inside DEST_DIR or the run fails: no absolute name, no
  '..' part, nothing under the agent's own dot directory; every directory
  on the way is opened with O_NOFOLLOW (cache/disk.ensure_dir), so a member
  can never write through a symlink the archive made earlier;
- regular files and directories only, plus symlinks with a relative
  target without '..' (they point down, so they stay inside), and tar hard
  links to a regular member unpacked before; device files, FIFOs, sockets, and links pointing
  out are refused;
- at most `ArchiveLimits.max_files` members and `max_bytes` unpacked bytes,
  counted as they are written (a zip's stated sizes are not trusted);
- modes are 0644 / 0755 (no setuid, no world-writable files).

A refused archive fails with ModelSourceRejected (exit 4) and leaves
DEST_DIR as it was. Publishing is atomic per run: members are written into a
private directory of the volume (DEST_DIR/.llmkube-stager/unpack.<random>),
and only when all are there are they renamed into DEST_DIR; then a record
of the set (`unpacked.json`) is written and the archive is deleted (as
KServe does: the volume holds the model once). A container killed before
the record re-unpacks from the staged archive; a warm restart finds the
record and every file at its recorded size, and moves no byte.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from llmkube_stager.cache.disk import ensure_dir
from llmkube_stager.cache.records import write_atomic
from llmkube_stager.cache.safeio import read_regular
from llmkube_stager.errors import REMEDY_ARCHIVE_UNSAFE, CacheError, Reason, StagerError
from llmkube_stager.kserve.uris import PRIVATE_DIR
from llmkube_stager.layout import record_path, stamp_path

if TYPE_CHECKING:
    import tarfile

# tarfile, zipfile, zlib, shutil and json are imported where an archive is
# unpacked: every KServe-form start reads the record, a warm one nothing else
# (#16: a warm start is what a restarted pod waits for).
RECORD_NAME = "unpacked.json"
_CHUNK_BYTES = 1 << 20
_RECORD_MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class ArchiveLimits:
    max_bytes: int
    max_files: int


class ArchiveRefused(StagerError):
    reason = Reason.SOURCE_REJECTED

    def __init__(self, archive: str, why: str) -> None:
        super().__init__(
            f"the archive {archive} cannot be unpacked safely: {why}",
            file=archive,
            remedy=REMEDY_ARCHIVE_UNSAFE,
        )


def is_archive(name: str) -> bool:
    return name.lower().endswith((".tar", ".tar.gz", ".tgz", ".zip"))


def unpacked_record(private: str, source: str, dest: str) -> dict[str, int] | None:
    """rel -> size of a finished unpack of `source` whose files are all in
    DEST_DIR at their sizes; None otherwise (the archive is unpacked again)."""
    raw = read_regular(posixpath.join(private, RECORD_NAME), _RECORD_MAX_BYTES)
    if raw is None:
        return None
    import json

    try:
        doc = json.loads(raw)
        files = {str(k): int(v) for k, v in doc["files"].items()}
        if doc.get("source") != source:
            return None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    for rel, size in files.items():
        try:
            st = os.stat(posixpath.join(dest, rel), follow_symlinks=False)
        except OSError:
            return None
        if stat.S_ISREG(st.st_mode) and st.st_size != size:
            return None
    return files


def unpack(
    archive: str, name: str, source: str, dest: str, limits: ArchiveLimits
) -> dict[str, int]:
    """Unpack the staged `archive` (file name `name`) into `dest`; returns
    rel -> size of the regular files it holds."""
    import json
    import shutil

    private = posixpath.join(dest, PRIVATE_DIR)
    work = posixpath.join(private, f"unpack.{os.urandom(6).hex()}")
    _clear_stale_work(private)
    os.mkdir(work, 0o700)
    try:
        writer = _Writer(work, name, limits)
        if name.lower().endswith(".zip"):
            _unzip(archive, name, writer)
        else:
            _untar(archive, name, writer)
        _publish(work, dest, writer.order)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record = {"source": source, "files": writer.sizes}
    write_atomic(posixpath.join(private, RECORD_NAME), json.dumps(record).encode())
    # The set is recorded: the archive and its records go (the volume holds
    # the model once, as with KServe's initializer).
    for path in (archive, record_path(archive), stamp_path(archive)):
        with contextlib.suppress(OSError):
            os.unlink(path)
    return writer.sizes


def _clear_stale_work(private: str) -> None:
    """A killed container's half unpack: never published, removed."""
    import shutil

    with contextlib.suppress(OSError):
        for entry in os.scandir(private):
            if entry.name.startswith("unpack.") and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)


class _Writer:
    """Writes checked members under `root` (the private work directory)."""

    def __init__(self, root: str, archive: str, limits: ArchiveLimits) -> None:
        self.root = root
        self.archive = archive
        self.limits = limits
        self.sizes: dict[str, int] = {}
        self.order: list[str] = []  # every name to publish, files and links
        self._members = 0
        self._bytes = 0

    def refuse(self, why: str) -> ArchiveRefused:
        return ArchiveRefused(self.archive, why)

    def rel_of(self, raw_name: str) -> str:
        name = raw_name.replace("\\", "/") if "\\" in raw_name else raw_name
        if not name or "\x00" in name or any(ord(c) < 0x20 for c in name):
            raise self.refuse(
                f"a member has an empty name or a control character: {raw_name!r:.100}"
            )
        if name.startswith("/"):
            raise self.refuse(f"the member {raw_name!r:.100} has an absolute name")
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if any(p == ".." for p in parts):
            raise self.refuse(f"the member {raw_name!r:.100} climbs out with '..'")
        if not parts:
            return ""
        if parts[0] == PRIVATE_DIR:
            raise self.refuse(f"the member {raw_name!r:.100} is the agent's own directory")
        return "/".join(parts)

    def count(self) -> None:
        self._members += 1
        if self._members > self.limits.max_files:
            raise self.refuse(
                f"it holds more than {self.limits.max_files} members (LLMKUBE_ARCHIVE_MAX_FILES)"
            )

    def directory(self, rel: str) -> None:
        if not rel:
            return
        try:
            ensure_dir(posixpath.join(self.root, rel), self.root, rel)
        except CacheError:
            # A part of the way is a symlink or a file the archive made.
            raise self.refuse(f"the member {rel!r:.100} passes through a link or a file") from None

    def file(self, rel: str, stream: IO[bytes]) -> None:
        if not rel:
            raise self.refuse("a file member has no name")
        path = self._new_path(rel)
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
        )
        size = 0
        try:
            while chunk := stream.read(_CHUNK_BYTES):
                size += len(chunk)
                self._bytes += len(chunk)
                if self._bytes > self.limits.max_bytes:
                    raise self.refuse(
                        f"it unpacks to more than {self.limits.max_bytes} bytes "
                        "(LLMKUBE_ARCHIVE_MAX_BYTES)"
                    )
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        self.sizes[rel] = size
        self.order.append(rel)

    def symlink(self, rel: str, target: str) -> None:
        """Only a link pointing down from its own directory: a relative
        target without '..' stays inside, whatever other links it passes
        (each of them points down too), where a '..' checked by name
        could be led out through another link."""
        if not target or target.startswith("/") or "\x00" in target:
            raise self.refuse(f"the symlink {rel!r:.100} points to an absolute or empty target")
        if ".." in target.split("/"):
            raise self.refuse(f"the symlink {rel!r:.100} points up with '..' (maybe outside)")
        os.symlink(target, self._new_path(rel))
        self.order.append(rel)

    def hardlink(self, rel: str, target_rel: str) -> None:
        if target_rel not in self.sizes:
            raise self.refuse(f"the hard link {rel!r:.100} points to no file unpacked before it")
        os.link(posixpath.join(self.root, target_rel), self._new_path(rel))
        self.sizes[rel] = self.sizes[target_rel]
        self.order.append(rel)

    def _new_path(self, rel: str) -> str:
        parent = posixpath.dirname(rel)
        self.directory(parent)
        path = posixpath.join(self.root, rel)
        if os.path.lexists(path):
            # A second member of one name: which one a server reads would
            # depend on the unpacker; refuse rather than guess.
            raise self.refuse(f"the member {rel!r:.100} appears twice")
        return path


def _untar(archive: str, name: str, writer: _Writer) -> None:
    import tarfile
    import zlib

    bad = (tarfile.TarError, EOFError, zlib.error)
    with _bad_bytes(name, "tar", bad), tarfile.open(archive, "r:*") as tar:
        for member in _members(tar):
            writer.count()
            rel = writer.rel_of(member.name)
            if member.isdir():
                writer.directory(rel)
            elif member.isreg():
                stream = tar.extractfile(member)
                if stream is None:
                    raise writer.refuse(f"the member {rel!r:.100} cannot be read")
                with stream:
                    writer.file(rel, stream)
            elif member.issym():
                writer.symlink(rel, member.linkname)
            elif member.islnk():
                writer.hardlink(rel, writer.rel_of(member.linkname))
            else:
                raise writer.refuse(
                    f"the member {rel!r:.100} is a device, FIFO or other special file"
                )


@contextlib.contextmanager
def _bad_bytes(name: str, kind: str, bad: tuple[type[BaseException], ...]) -> Iterator[None]:
    """The archive's own bytes are bad: ArchiveRefused. An OSError with an
    errno is the volume's failure (ENOSPC, EROFS...) and passes; one without
    (gzip.BadGzipFile, bz2's "Invalid data stream") is the bytes again."""
    why = f"it is not a valid {kind} archive"
    try:
        yield
    except bad as exc:
        raise ArchiveRefused(name, f"{why} ({type(exc).__name__})") from None
    except OSError as exc:
        if exc.errno is not None:
            raise
        raise ArchiveRefused(name, f"{why} ({type(exc).__name__})") from None


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while (member := tar.next()) is not None:
        yield member


def _unzip(archive: str, name: str, writer: _Writer) -> None:
    import lzma
    import zipfile
    import zlib

    # An encrypted member (zipfile asks for a password: RuntimeError), a bad
    # bzip2 or lzma stream: the bytes, not a bug (#24 review).
    bad: tuple[type[BaseException], ...] = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError)
    bad += (NotImplementedError, RuntimeError, lzma.LZMAError, zlib.error)
    with _bad_bytes(name, "zip", bad), zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            writer.count()
            rel = writer.rel_of(info.filename)
            mode = info.external_attr >> 16
            kind = stat.S_IFMT(mode) if mode else 0
            if info.is_dir():
                writer.directory(rel)
            elif kind not in (0, stat.S_IFREG):
                # A zip symlink, device or FIFO (unix mode bits).
                raise writer.refuse(f"the member {rel!r:.100} is not a regular file")
            else:
                with zipped.open(info) as stream:
                    writer.file(rel, stream)


def _publish(work: str, dest: str, order: list[str]) -> None:
    """Every unpacked name renamed into DEST_DIR (the same filesystem)."""
    for rel in order:
        target = posixpath.join(dest, rel)
        ensure_dir(posixpath.dirname(target), dest, rel)
        os.rename(posixpath.join(work, rel), target)
