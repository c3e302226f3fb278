"""The digests a store declares for a whole object (GCS crc32c and
md5Hash, #33 item 1; Azure's Content-MD5, item 2), checked before the file
is published, as the hub's sha256 is (engine._verified). Which one is
checked: sources/wire/digest.py (`declared_digest`: the crc32c where
google-crc32c's C code runs, else the md5).

Where the digest is taken, cheapest first (#33 item 5):
- while a whole body from byte 0 is received (sources/wire/digest.py);
- for a ranged transfer, by a thread that follows the contiguous prefix
  the workers wrote (DigestFollower, a PrefixHasher of its own), which
  overlaps the download instead of following it: on the bench's Azure
  prefix the read-back after the last range was ~0.15 s of md5 per 64 MiB
  blob on the critical path, and after direct (O_DIRECT) writes it read
  the disk;
- else (a resumed stream, a follower cut short) the partial is read back
  once it is whole (a fresh descriptor: the workers' may be O_DIRECT).
"""

from __future__ import annotations

from collections.abc import Callable

from llmkube_stager.errors import OriginChecksumMismatch
from llmkube_stager.sources.base import RemoteMeta, StreamedDigest
from llmkube_stager.sources.wire.digest import Declared, RunningDigest, declared_digest
from llmkube_stager.transfer.prefixhash import PrefixHasher
from llmkube_stager.transfer.segments import Ranges

# One buffer per check, reused: files in flight each hold one, within the
# run's memory budget (a bench run with 8 MiB reads went past 64 MiB RSS).
_CHUNK_BYTES = 1 << 20


class DigestFollower:
    """The declared digest of a ranged transfer, taken as the workers'
    bytes become a contiguous prefix: the data file itself, as the
    read-back would hash it, from byte 0, or from where the stream that
    widened stopped when its body hashed exactly the bytes it left in the
    partial (`stream_bytes`: [0, offset), written in the order read). A
    match marks the transfer's cell as a whole streamed body's does;
    anything else leaves it unmarked, and check_declared reads the partial
    back and names the mismatch."""

    def __init__(
        self,
        fd: int,
        ranges: Ranges,
        direct: bool,
        size_bytes: int,
        declared: Declared,
        cell: StreamedDigest,
        stream_bytes: int = 0,
    ) -> None:
        self._declared, self._cell = declared, cell
        carried = cell.running is not None and stream_bytes and cell.seen_bytes == stream_bytes
        self._running: RunningDigest = cell.running.copy() if carried else declared.new_hasher()
        position = stream_bytes if carried else 0
        self._hasher = PrefixHasher(
            fd, ranges, direct, size_bytes, self._running, position, name=declared.name
        )
        self.thread = self._hasher.thread

    def settle(self) -> None:
        """After the last range: finish() hashes up to the file's size. A
        follower that failed to read (the disk, a mount) leaves the cell
        unmarked: the read-back then decides, and names a disk error as
        one (review of #33 item 5: it was an internal error)."""
        try:
            self._hasher.finish()
        except OSError:
            return
        if self._declared.matches(self._running):
            self._cell.matched = True

    def cancel(self) -> None:
        self._hasher.cancel()


def follow_declared(
    fd: int, ranges: Ranges, direct: bool, meta: RemoteMeta, stream_bytes: int = 0
) -> DigestFollower | None:
    """A follower where the object declares a digest check_declared checks;
    `stream_bytes`: what the stream it carries on from left in the partial."""
    cell, size = meta.streamed_digest, meta.size_bytes
    declared = declared_digest(meta) if cell is not None and size else None
    if declared is None or cell is None or not size:
        return None
    return DigestFollower(fd, ranges, direct, size, declared, cell, stream_bytes)


def check_declared(rel: str, meta: RemoteMeta, partial: str, discard: Callable[[], None]) -> None:
    """OriginChecksumMismatch (the partial discarded) when the bytes miss
    the declared digest."""
    declared = declared_digest(meta)
    if declared is None:
        return
    cell = meta.streamed_digest
    if cell is not None and cell.matched:
        return  # taken while received or while the ranges were written
    hasher = declared.new_hasher()
    _read_into(partial, hasher)
    if not declared.matches(hasher):
        discard()
        raise OriginChecksumMismatch(
            f"the bytes of {rel} do not match the {declared.name} the store declares "
            f"({declared.b64}); the download was discarded",
            file=rel,
        )


def _read_into(path: str, hasher: RunningDigest) -> None:
    buffer = bytearray(_CHUNK_BYTES)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while count := handle.readinto(buffer):
            hasher.update(view[:count])
