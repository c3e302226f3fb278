"""An archive's members, read one at a time with every buffer bounded (#31
item 6).

The shipped ClusterStorageContainer gives the agent 128Mi; Python's
tarfile and zipfile keep every member's header (`TarFile.members`,
`ZipFile.filelist`) and read an extended header whole, whatever its size:
a 0.25 MB .tar.gz of ten 1-byte members with 30 MB pax headers reached
382 MiB, a 100,000-member tar 122 MiB. Here:

- a tar is read as a stream (`r|`), the member list emptied at each step;
  an extended header (pax, GNU long name or link) may hold at most
  `MAX_HEADER_BYTES`, at most `MAX_HEADER_CHAIN` of them may precede one
  member (each waits in memory for the next), the global pax headers
  together at most `MAX_HEADER_BYTES`; sparse members (their maps are read
  whole) are refused;
- xz is decompressed with a memory limit (`XZ_MEMLIMIT_BYTES`: the
  dictionary of `xz -8`; `xz -9` needs 65 MiB);
- a zip's central directory is read entry by entry from the file, never
  as a list; its stated entry count is checked before the first member.

Every bound hit raises `Bound` with the words of the refusal; bytes that
are no archive raise what tarfile, zipfile and the decompressors raise
(archive.py turns both into ArchiveRefused).
"""

from __future__ import annotations

import io
import lzma
import struct
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, cast

# Legitimate extended headers hold a path, a link target, times, owner
# names and a few xattrs: well under this.
MAX_HEADER_BYTES = 64 << 10
# A pax header, a GNU long name, a GNU long link and a global header.
MAX_HEADER_CHAIN = 4
# xz's decoder needs its dictionary: 33 MiB for `xz -8`, 65 MiB for -9.
XZ_MEMLIMIT_BYTES = 34 << 20
# PATH_MAX and NAME_MAX of Linux, in bytes of the file system's encoding.
MAX_NAME_BYTES = 4095
MAX_PART_BYTES = 255

DIR, FILE, SYMLINK, HARDLINK, OTHER = "dir", "file", "symlink", "hardlink", "other"


class Bound(Exception):
    """A bound of this module was hit; the message is the refusal's why."""


@dataclass(frozen=True)
class Member:
    kind: str
    name: str
    mode: int  # permission bits as stored (0 when the archive has none)
    link: str = ""
    stream: IO[bytes] | None = None  # FILE only, read before the next member


# -- tar ------------------------------------------------------------------------------

_EXTENDED = frozenset(
    {tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE}
    | {tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK}
)


class _BoundedTarFile(tarfile.TarFile):
    members: list[tarfile.TarInfo]  # typeshed has no such attribute; tarfile does
    # Extended headers read since the last member (each holds its bytes
    # until the member they describe is parsed).
    chain_depth = 0


class _BoundedTarInfo(tarfile.TarInfo):
    """tarfile's hook for custom header types (`_proc_member`, documented in
    its source as overridable), used to check a header's size before tarfile
    reads it."""

    def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise _sparse()
        if self.type not in _EXTENDED or not isinstance(tar, _BoundedTarFile):
            return tarfile.TarInfo._proc_member(self, tar)  # type: ignore[attr-defined, no-any-return]
        if self.size > MAX_HEADER_BYTES:
            raise Bound(
                f"an extended (pax or GNU long name) header holds {self.size} bytes, "
                f"more than {MAX_HEADER_BYTES}"
            )
        if tar.chain_depth >= MAX_HEADER_CHAIN:
            raise Bound(f"more than {MAX_HEADER_CHAIN} extended headers precede one member")
        tar.chain_depth += 1
        try:
            member: tarfile.TarInfo = tarfile.TarInfo._proc_member(self, tar)  # type: ignore[attr-defined]
        finally:
            tar.chain_depth -= 1
        if self.type == tarfile.XGLTYPE:
            held = sum(len(k) + len(v) for k, v in tar.pax_headers.items())
            if held > MAX_HEADER_BYTES:
                raise Bound(f"its global pax headers hold more than {MAX_HEADER_BYTES} bytes")
        return member

    # Sparse maps are read whole (old GNU extension blocks, pax 0.0/0.1
    # keys, pax 1.0 data blocks): refused, as no model needs them.
    def _proc_sparse(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        raise _sparse()

    def _proc_gnusparse_00(self, *args: Any) -> None:
        raise _sparse()

    def _proc_gnusparse_01(self, *args: Any) -> None:
        raise _sparse()

    def _proc_gnusparse_10(self, *args: Any) -> None:
        raise _sparse()


def _sparse() -> Bound:
    return Bound("it holds a sparse member (GNU sparse format), which is not unpacked")


def tar_members(path: str) -> Iterator[Member]:
    with open(path, "rb") as raw, _decompressed(raw) as stream:
        try:
            with _BoundedTarFile.open(fileobj=stream, mode="r|", tarinfo=_BoundedTarInfo) as tar:
                while (info := tar.next()) is not None:
                    tar.members.clear()  # TarFile.next appends every header
                    yield _tar_member(tar, info)
        except lzma.LZMAError as exc:
            if "memory" in str(exc).lower():
                raise Bound(
                    f"its xz stream needs more than {XZ_MEMLIMIT_BYTES >> 20} MiB to "
                    "decompress (xz -9): compress it with xz -6"
                ) from None
            raise


def _tar_member(tar: tarfile.TarFile, info: tarfile.TarInfo) -> Member:
    mode = info.mode & 0o7777
    if info.isdir():
        return Member(DIR, info.name, mode)
    if info.isreg():
        return Member(FILE, info.name, mode, stream=tar.extractfile(info))
    if info.issym():
        return Member(SYMLINK, info.name, mode, info.linkname)
    if info.islnk():
        return Member(HARDLINK, info.name, mode, info.linkname)
    return Member(OTHER, info.name, mode)


def _decompressed(raw: IO[bytes]) -> IO[bytes]:
    """The tar inside `raw`, by its magic bytes (as tarfile's `r|*`), xz
    with a memory limit that tarfile does not set."""
    import bz2
    import gzip

    magic = raw.read(6)
    raw.seek(0)
    if magic.startswith(b"\x1f\x8b"):
        return cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))
    if magic.startswith(b"BZh"):
        return cast(IO[bytes], bz2.BZ2File(raw))
    if magic == b"\xfd7zXZ\x00":
        import _compression

        reader = _compression.DecompressReader(
            raw,
            lzma.LZMADecompressor,
            trailing_error=lzma.LZMAError,
            format=lzma.FORMAT_XZ,
            memlimit=XZ_MEMLIMIT_BYTES,
        )
        return io.BufferedReader(reader)
    return raw


# -- zip ------------------------------------------------------------------------------

# zipfile's own layout constants (private, stable since Python 2).
_Z = vars(zipfile)
_CENTRAL = struct.Struct(_Z["structCentralDir"])
_ECD_ENTRIES_TOTAL, _ECD_SIZE, _ECD_OFFSET = 4, 5, 6
_ECD_SIGNATURE, _ECD_LOCATION = 0, 9


class _StreamingZip(zipfile.ZipFile):
    """A ZipFile that reads only the end record when opened; `entries`
    reads the central directory one entry at a time (`open(info)` needs
    nothing else of the list)."""

    start_dir = 0
    cd_size = 0
    cd_entries = 0
    concat = 0

    def _RealGetContents(self) -> None:  # zipfile's name
        fp = self.fp
        try:
            endrec = _Z["_EndRecData"](fp)
        except OSError:
            raise zipfile.BadZipFile("File is not a zip file") from None
        if not endrec:
            raise zipfile.BadZipFile("File is not a zip file")
        self.cd_size = endrec[_ECD_SIZE]
        self.cd_entries = endrec[_ECD_ENTRIES_TOTAL]
        concat = endrec[_ECD_LOCATION] - self.cd_size - endrec[_ECD_OFFSET]
        if endrec[_ECD_SIGNATURE] == _Z["stringEndArchive64"]:
            concat -= _Z["sizeEndCentDir64"] + _Z["sizeEndCentDir64Locator"]
        self.concat = concat
        self.start_dir = endrec[_ECD_OFFSET] + concat
        if self.start_dir < 0:
            raise zipfile.BadZipFile("Bad offset for central directory")

    def entries(self, path: str) -> Iterator[zipfile.ZipInfo]:
        """`path`: the file this was opened from (ZipFile's `filename` may
        be None, for an archive opened from a file object)."""
        with open(path, "rb") as cd:
            cd.seek(self.start_dir)
            read = 0
            while read < self.cd_size:
                info, length = self._entry(cd)
                read += length
                yield info

    def _entry(self, cd: IO[bytes]) -> tuple[zipfile.ZipInfo, int]:
        head = cd.read(_CENTRAL.size)
        if len(head) != _CENTRAL.size:
            raise zipfile.BadZipFile("Truncated central directory")
        fields = _CENTRAL.unpack(head)
        if fields[0] != _Z["stringCentralDir"]:
            raise zipfile.BadZipFile("Bad magic number for central directory")
        name_len, extra_len, comment_len = fields[12], fields[13], fields[14]
        raw_name = cd.read(name_len)
        flags = fields[5]
        name = raw_name.decode("utf-8" if flags & 0x800 else "cp437")
        info = zipfile.ZipInfo(name)
        info.extra = cd.read(extra_len)
        info.comment = cd.read(comment_len)
        (info.create_version, info.create_system, info.extract_version, info.reserved,
         info.flag_bits, info.compress_type, _, _,
         info.CRC, info.compress_size, info.file_size) = fields[1:12]  # fmt: skip
        info.volume, info.internal_attr, info.external_attr = fields[15:18]
        info.header_offset = fields[18]
        _decode_extra(info, raw_name)
        info.header_offset += self.concat
        return info, _CENTRAL.size + name_len + extra_len + comment_len


def _decode_extra(info: zipfile.ZipInfo, raw_name: bytes) -> None:
    """The zip64 sizes and offset (ZipInfo._decodeExtra: no argument before
    Python 3.12, the name's CRC since)."""
    decode: Any = info._decodeExtra  # type: ignore[attr-defined]
    if sys.version_info >= (3, 12):
        import zlib

        decode(zlib.crc32(raw_name))
    else:
        decode()


def zip_members(path: str, max_members: int) -> Iterator[Member]:
    import stat

    with _StreamingZip(path) as zipped:
        if zipped.cd_entries > max_members:
            raise Bound(
                f"it holds {zipped.cd_entries} members, more than {max_members} "
                "(LLMKUBE_ARCHIVE_MAX_FILES)"
            )
        for info in zipped.entries(path):
            # Unix mode bits only from a Unix zip (create_system 3).
            mode = info.external_attr >> 16 if info.create_system == 3 else 0
            kind = stat.S_IFMT(mode)
            if info.is_dir():
                yield Member(DIR, info.filename, mode & 0o7777)
            elif kind not in (0, stat.S_IFREG):
                yield Member(OTHER, info.filename, mode & 0o7777)  # a link, device, FIFO
            else:
                with zipped.open(info) as stream:
                    yield Member(FILE, info.filename, mode & 0o7777, stream=stream)
