"""The digests a store declares for a whole object (GCS md5Hash and crc32c,
#33 item 1; Azure's Content-MD5, item 2), checked over the finished
partial before it is published, as the hub's sha256 is (engine._verified).

The engine's ranged workers write out of order, so the check reads the
partial once it is whole, through the page cache (a fresh descriptor: the
workers' may be O_DIRECT). The crc32c comes first where google-crc32c's C
code is installed (~3 GB/s a core on the bench machine, so its read-back
costs ~0.02 s per 64 MiB): Google's clients check it by default, and the
md5 (hashlib's, ~0.4 GB/s a core there) was the agent's largest cost per
byte on gs:// (#33 item 5). The md5 is checked where no crc32c can be: an
object without one (Azure's Content-MD5), or google-crc32c without its C
code (a pure-Python CRC would cost minutes per GiB), where a composite
object, declaring crc32c alone, is left unchecked (the generation pin
still keeps one generation's bytes; docs/design.md).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from typing import Any

from llmkube_stager.errors import OriginChecksumMismatch
from llmkube_stager.sources.base import RemoteMeta, StreamedDigest
from llmkube_stager.transfer.prefixhash import PrefixHasher
from llmkube_stager.transfer.segments import Ranges

# One buffer per check, reused: files in flight each hold one, within the
# run's memory budget (a bench run with 8 MiB reads went past 64 MiB RSS).
_CHUNK_BYTES = 1 << 20


class Md5Follower:
    """The declared md5 of a ranged transfer, taken as the workers' bytes
    become a contiguous prefix (a PrefixHasher of its own, overlapping the
    download as the pinned sha256's does), so that a match needs no
    read-back pass after the last range: on the bench's Azure prefix that
    pass was ~0.15 s of md5 per 64 MiB blob on the critical path (#33
    item 5). It hashes the data file itself, as the read-back would, from
    byte 0 (the stream's bytes before a widening included). A match marks
    the transfer's cell as a whole streamed body's does
    (sources/wire/digest.py); anything else leaves it unmarked, and
    check_declared reads the partial back and names the mismatch."""

    def __init__(
        self,
        fd: int,
        ranges: Ranges,
        direct: bool,
        size_bytes: int,
        md5_b64: str,
        cell: StreamedDigest,
    ) -> None:
        self._declared, self._cell = md5_b64, cell
        md5 = hashlib.md5(usedforsecurity=False)
        self._hasher = PrefixHasher(fd, ranges, direct, size_bytes, md5, 0, name="md5")
        self.thread = self._hasher.thread

    def settle(self) -> None:
        """After the last range: mark the cell when the whole file's md5 is
        the declared one (finish() hashes up to the file's size)."""
        digest = base64.b64encode(bytes.fromhex(self._hasher.finish())).decode("ascii")
        if digest == self._declared:
            self._cell.matched = True

    def cancel(self) -> None:
        self._hasher.cancel()


def follow_md5(fd: int, ranges: Ranges, direct: bool, meta: RemoteMeta) -> Md5Follower | None:
    """A follower where the object declares an md5 that check_declared
    would check (not where a crc32c is checked instead: no cell then)."""
    cell, size = meta.streamed_md5, meta.size_bytes
    if not meta.md5_b64 or cell is None or not size:
        return None
    return Md5Follower(fd, ranges, direct, size, meta.md5_b64, cell)


def check_declared(rel: str, meta: RemoteMeta, partial: str, discard: Callable[[], None]) -> None:
    """OriginChecksumMismatch (the partial discarded) when the bytes miss
    the declared crc32c where google-crc32c's C code computes it (#33 item
    5: ~3 GB/s against md5's ~0.4 GB/s; Google's own clients check crc32c
    by default), else the declared md5."""
    crc = _crc32c() if meta.crc32c_b64 else None
    if crc is not None and meta.crc32c_b64:
        name, declared, digest = "crc32c", meta.crc32c_b64, _digest_of(partial, crc)
    elif meta.md5_b64:
        if meta.streamed_md5 is not None and meta.streamed_md5.matched:
            return  # one whole body matched it while it was received (sources/wire/digest.py)
        name, declared, digest = "md5", meta.md5_b64, _md5(partial)
    else:
        return
    if base64.b64encode(digest).decode("ascii") != declared:
        discard()
        raise OriginChecksumMismatch(
            f"the bytes of {rel} do not match the {name} the store declares ({declared}); "
            "the download was discarded",
            file=rel,
        )


def _md5(path: str) -> bytes:
    return _digest_of(path, hashlib.md5(usedforsecurity=False))


def _digest_of(path: str, hasher: Any) -> bytes:
    buffer = bytearray(_CHUNK_BYTES)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while count := handle.readinto(buffer):
            hasher.update(view[:count])
    digest: bytes = hasher.digest()
    return digest


def _crc32c() -> Any | None:
    """google-crc32c's C checksum, else None (never its slow Python one)."""
    import importlib

    try:
        google_crc32c: Any = importlib.import_module("google_crc32c")
    except ImportError:
        return None
    if getattr(google_crc32c, "implementation", "") != "c":
        return None
    return _BytesFed(google_crc32c.Checksum())


class _BytesFed:
    """google-crc32c's C `extend` takes read-only bytes only (a memoryview
    of the reused buffer raised TypeError: an internal error for every
    composite object, #33 item 1): each chunk is copied to bytes first."""

    def __init__(self, checksum: Any) -> None:
        self._checksum = checksum

    def update(self, chunk: memoryview) -> None:
        self._checksum.update(bytes(chunk))

    def digest(self) -> bytes:
        digest: bytes = self._checksum.digest()
        return digest
