"""The digests a store declares for a whole object (GCS md5Hash and crc32c,
#33 item 1; Azure's Content-MD5, item 2), checked over the finished
partial before it is published, as the hub's sha256 is (engine._verified).

The engine's ranged workers write out of order, so the check reads the
partial once it is whole, through the page cache (a fresh descriptor: the
workers' may be O_DIRECT). md5 is hashlib's (C, ~600 MB/s a core); crc32c
only where the object declares no md5 (a composite object) and
google-crc32c's C implementation is installed: a pure-Python CRC would
cost minutes per GiB, so without it the crc32c is left unchecked (the
generation pin still keeps one generation's bytes; docs/design.md).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from typing import Any

from llmkube_stager.errors import OriginChecksumMismatch
from llmkube_stager.sources.base import RemoteMeta

# One buffer per check, reused: files in flight each hold one, within the
# run's memory budget (a bench run with 8 MiB reads went past 64 MiB RSS).
_CHUNK_BYTES = 1 << 20


def check_declared(rel: str, meta: RemoteMeta, partial: str, discard: Callable[[], None]) -> None:
    """OriginChecksumMismatch (the partial discarded) when the bytes miss
    the declared md5, else the declared crc32c where it can be computed."""
    if meta.md5_b64 and meta.streamed_md5 is not None and meta.streamed_md5.matched:
        return  # one whole body matched it while it was received (sources/wire/digest.py)
    if meta.md5_b64:
        name, declared, digest = "md5", meta.md5_b64, _md5(partial)
    else:
        crc = _crc32c()
        if crc is None or not meta.crc32c_b64:
            return
        name, declared, digest = "crc32c", meta.crc32c_b64, _digest_of(partial, crc)
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
