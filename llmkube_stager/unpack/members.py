"""The members of an archive, checked and written one at a time into the
private work directory (#24 item 2, #31 items 2, 6, 8; archive.py says
what happens before and after).

- a member lands inside the work directory or the archive is refused: no
  absolute name, no '..' part, nothing under the agent's own dot
  directory, no name longer than Linux allows or nested deeper than
  `_MAX_DEPTH`; every directory on the way is opened with O_NOFOLLOW
  (cache/disk.ensure_dir), so a member never writes through a symlink the
  archive made earlier;
- regular files (0644, 0755 where the owner could execute; never
  setuid/setgid or the archive's owner), directories (empty ones too),
  symlinks with a relative target without '..', tar hard links to a
  regular file unpacked before; anything else is refused;
- at most `ArchiveLimits.max_files` members and `max_bytes` bytes, counted
  as written (a zip's stated sizes are not trusted);
- nothing per member is kept in memory: one record line per file goes to
  the record being written (#31 item 6), the directories already made are a
  bounded cache.
"""

from __future__ import annotations

import os
import posixpath
import stat
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from llmkube_stager.cache.disk import ensure_dir
from llmkube_stager.errors import REMEDY_ARCHIVE_UNSAFE, CacheError, Reason, StagerError
from llmkube_stager.layout import KSERVE_PRIVATE_NAME as PRIVATE_DIR

if TYPE_CHECKING:
    from llmkube_stager.unpack.reading import Member

_CHUNK_BYTES = 1 << 20
# Deeper than any model tree; keeps the publish's merge recursion and the
# open directories it holds small.
_MAX_DEPTH = 128
_MADE_DIRS = 4096


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


class Writer:
    """Writes checked members under `root` (the private work directory),
    one record line per file, nothing kept per member in memory (#31 item 6)."""

    def __init__(
        self,
        root: str,
        archive: str,
        limits: ArchiveLimits,
        record: IO[str],
        *,
        layered: bool = False,
    ) -> None:
        self.root = root
        # OCI layers (#43): a later layer's file replaces an earlier one's,
        # as a container runtime applies them; an archive alone refuses a
        # name twice.
        self.layered = layered
        self.archive = archive
        self.limits = limits
        self.record = record
        self._members = 0
        self._bytes = 0
        # Directories made and checked already (a bounded LRU: #31 item 8,
        # members of many directories interleave; item 6, no set that grows
        # with the archive).
        self._made: dict[str, None] = {}

    def refuse(self, why: str) -> ArchiveRefused:
        return ArchiveRefused(self.archive, why)

    def add(self, member: Member) -> None:
        from llmkube_stager.unpack import reading

        self._count()
        rel = self.rel_of(member.name)
        if member.kind == reading.DIR:
            self.directory(rel)
        elif member.kind == reading.FILE and member.stream is not None:
            self.file(rel, member.stream, member.mode)
        elif member.kind == reading.SYMLINK:
            self.symlink(rel, member.link)
        elif member.kind == reading.HARDLINK:
            self.hardlink(rel, self.rel_of(member.link))
        else:
            raise self.refuse(
                f"the member {rel!r:.100} is a device, FIFO, link or other special file"
            )

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
        rel = "/".join(parts)
        length = len(os.fsencode(rel))
        if length > 4095 or (length > 255 and any(len(os.fsencode(p)) > 255 for p in parts)):
            raise self.refuse(
                f"the member {raw_name!r:.100} has a name longer than Linux allows "
                "(4095 bytes, 255 a part)"
            )
        if len(parts) > _MAX_DEPTH:
            raise self.refuse(f"the member {raw_name!r:.100} is nested deeper than {_MAX_DEPTH}")
        return rel

    def _count(self) -> None:
        self._members += 1
        if self._members > self.limits.max_files:
            raise self.refuse(
                f"it holds more than {self.limits.max_files} members (LLMKUBE_ARCHIVE_MAX_FILES)"
            )

    def directory(self, rel: str) -> None:
        if not rel or rel in self._made:
            return
        try:
            ensure_dir(posixpath.join(self.root, rel), self.root, rel)
        except CacheError:
            # A part of the way is a symlink or a file the archive made.
            raise self.refuse(f"the member {rel!r:.100} passes through a link or a file") from None
        # Its way is checked once: a later member cannot change it (a name
        # twice is refused, so no link or file ever replaces it).
        self._made[rel] = None
        if len(self._made) > _MADE_DIRS:
            del self._made[next(iter(self._made))]

    def file(self, rel: str, stream: IO[bytes], mode: int) -> None:
        if not rel:
            raise self.refuse("a file member has no name")
        path = self._new_path(rel)
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        size = 0
        try:
            # The owner's exec bit only (#31 item 2): never setuid/setgid,
            # never writable by others; the owner is the agent's uid.
            os.fchmod(fd, 0o755 if mode & 0o100 else 0o644)
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
        finally:
            os.close(fd)
        self.record.write(f"{size} {rel}\n")

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

    def hardlink(self, rel: str, target_rel: str) -> None:
        """To a regular file unpacked before, reached through no link."""
        target = posixpath.join(self.root, target_rel)
        try:
            st = os.stat(target, follow_symlinks=False)
            direct = os.path.realpath(target) == posixpath.join(
                os.path.realpath(self.root), target_rel
            )
        except OSError:
            st, direct = None, False
        if not target_rel or st is None or not stat.S_ISREG(st.st_mode) or not direct:
            raise self.refuse(f"the hard link {rel!r:.100} points to no file unpacked before it")
        os.link(target, self._new_path(rel), follow_symlinks=False)
        self.record.write(f"{st.st_size} {rel}\n")

    def _new_path(self, rel: str) -> str:
        self.directory(posixpath.dirname(rel))
        path = posixpath.join(self.root, rel)
        if self.layered and os.path.lexists(path) and not os.path.isdir(path):
            os.unlink(path)
        if os.path.lexists(path):
            # A second member of one name: which one a server reads would
            # depend on the unpacker; refuse rather than guess.
            raise self.refuse(f"the member {rel!r:.100} appears twice")
        return path
