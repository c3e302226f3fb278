"""The digest a store declares for a whole object (#33: GCS crc32c and
md5Hash, Azure Content-MD5), and its check while a whole object is
received: a body asked from byte 0 to its end is hashed as the engine
reads it, and when it ends with exactly the object's size and the declared
digest, the cell in its RemoteMeta says so; transfer/declared.py then skips
its read-back pass. The cell is one transfer's (RemoteMeta.for_one_transfer,
made by transfer/engine.py) and every body opened clears it first: anything
but a whole matching body last (a resume, a range of a parallel transfer,
a body cut short, a mismatch, a second fetch of the file in the same run)
leaves it False, and the whole partial is read back and checked before it
is published, so this only ever saves work. A ranged transfer marks the
cell the same way when the digest that followed its workers' bytes matches
(transfer/declared.py DigestFollower, #33 item 5). Shared by the schemes
that declare one (gcs, azure), which never import each other.

Which digest (#33 item 5): the crc32c where the object declares one and
google-crc32c's C code is installed (~3 GB/s a core on the bench machine,
against md5's ~0.4 GB/s: the md5 was the agent's largest cost per byte on
gs://), as google-cloud-storage 3 ("auto") and Google's C++ client do by
default; else the md5. A pure-Python CRC would cost minutes per GiB: a
composite object (crc32c alone) is left unchecked without the C code (the
generation pin still keeps one generation's bytes; docs/design.md).
"""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from llmkube_stager.sources.base import Body, RemoteMeta, StreamedDigest, WrappedBody


class RunningDigest(Protocol):
    """hashlib's interface, as far as the checks use it."""

    def update(self, data: bytes | memoryview, /) -> None: ...

    def digest(self) -> bytes: ...

    def hexdigest(self) -> str: ...

    def copy(self) -> RunningDigest: ...


@dataclass(frozen=True)
class Declared:
    """The digest of an object the agent checks: its name in messages, the
    store's base64 value, and a fresh hasher of it."""

    name: str
    b64: str
    new_hasher: Callable[[], RunningDigest]

    def matches(self, hasher: RunningDigest) -> bool:
        return base64.b64encode(hasher.digest()).decode("ascii") == self.b64


def declared_digest(meta: RemoteMeta) -> Declared | None:
    """The crc32c where its C code runs, else the md5, else None."""
    crc32c = crc32c_c_module() if meta.crc32c_b64 else None
    if crc32c is not None and meta.crc32c_b64:
        return Declared("crc32c", meta.crc32c_b64, lambda: _BytesFed(crc32c.Checksum()))
    if meta.md5_b64:
        return Declared("md5", meta.md5_b64, lambda: hashlib.md5(usedforsecurity=False))
    return None


@functools.cache
def crc32c_c_module() -> Any | None:
    """google-crc32c when it imports with its C code, else None. Its
    RuntimeWarning about the slow Python fallback is kept off stderr (a
    JSON log stays JSON)."""
    import importlib
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            module = importlib.import_module("google_crc32c")
    except ImportError:
        return None
    return module if getattr(module, "implementation", "") == "c" else None


# The most _BytesFed copies at once: a whole receive buffer copied per read
# put ~16 MiB more into the bench's peak RSS (4 files in flight).
_CRC_PIECE_BYTES = 256 << 10


class _BytesFed:
    """google-crc32c's C `extend` takes read-only bytes only (a memoryview
    of a reused buffer raised TypeError: an internal error for every
    composite object, #33 item 1): each piece is copied to bytes first."""

    def __init__(self, checksum: Any) -> None:
        self._checksum = checksum

    def update(self, data: bytes | memoryview, /) -> None:
        if isinstance(data, bytes):
            self._checksum.update(data)
            return
        for start in range(0, len(data), _CRC_PIECE_BYTES):
            self._checksum.update(bytes(data[start : start + _CRC_PIECE_BYTES]))

    def digest(self) -> bytes:
        digest: bytes = self._checksum.digest()
        return digest

    def hexdigest(self) -> str:
        return self.digest().hex()

    def copy(self) -> _BytesFed:
        return _BytesFed(self._checksum.copy())


def digest_while_received(body: Body, meta: RemoteMeta, offset: int, end: int | None) -> Body:
    """`body`, hashed as it is read when it is the whole object from byte 0
    and the object declares a digest the agent checks (else `body`)."""
    cell, size = meta.streamed_digest, meta.size_bytes
    if cell is not None:
        # Any body opened after a match writes other bytes into the
        # partial: the match held for the body before it, not for them.
        # Nor may a follower carry on from an earlier body's digest: a
        # resume rewrites bytes that body hashed (a byte flipped in the
        # resumed ones would be vouched for by the first body's copy).
        cell.matched = False
        cell.running, cell.seen_bytes = None, 0
    streams_whole = offset == 0 and end is None and body.start == 0
    declared = declared_digest(meta) if streams_whole and cell is not None and size else None
    if declared is not None and cell is not None and size:
        return DigestBody(body, size, declared, cell)
    return body


class DigestBody(WrappedBody):
    """`body`, its bytes hashed on the receiving thread."""

    def __init__(
        self, body: Body, size_bytes: int, declared: Declared, cell: StreamedDigest
    ) -> None:
        super().__init__(body)
        self._size = size_bytes
        self._declared = declared
        self._cell = cell
        self._hasher = declared.new_hasher()
        self._seen = 0
        cell.running, cell.seen_bytes = self._hasher, 0

    def readinto(self, buffer: memoryview) -> int:
        count = self._body.readinto(buffer)
        if count:
            self._hasher.update(buffer[:count])
            self._seen += count
            self._cell.seen_bytes = self._seen
        elif self._seen == self._size and self.start == 0 and self._declared.matches(self._hasher):
            self._cell.matched = True
        return count
