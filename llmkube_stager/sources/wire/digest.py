"""md5 while a whole object is received (#33: GCS md5Hash, Azure
Content-MD5): a body asked from byte 0 to its end is hashed as the engine
reads it, and when it ends with exactly the object's size and the declared
md5, the cell in its RemoteMeta says so; transfer/declared.py then skips
its read-back pass. The cell is one transfer's (RemoteMeta.for_one_transfer,
made by transfer/engine.py) and every body opened clears it first: anything
but a whole matching body last (a resume, a range of a parallel transfer,
a body cut short, a mismatch, a second fetch of the file in the same run)
leaves it False, and the whole partial is read back and checked before it
is published, so this only ever saves work. A ranged transfer marks the
cell the same way when the md5 that followed its workers' bytes matches
(transfer/declared.py Md5Follower, #33 item 5). Shared by the schemes that
declare an md5 (gcs, azure), which never import each other; gs:// asks for
none where google-crc32c's C code lets the crc32c be checked instead.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable

from llmkube_stager.sources.base import Body, RemoteMeta, StreamedDigest


def md5_while_received(body: Body, meta: RemoteMeta, offset: int, end: int | None) -> Body:
    """`body`, hashed as it is read when it is the whole object from byte 0
    and the object declares an md5 (else `body` itself)."""
    cell, size = meta.streamed_md5, meta.size_bytes
    if cell is not None:
        # Any body opened after a match writes other bytes into the
        # partial: the match held for the body before it, not for them.
        cell.matched = False
    streams_whole = offset == 0 and end is None and body.start == 0
    if streams_whole and cell is not None and meta.md5_b64 and size:
        return Md5Body(body, size, meta.md5_b64, cell)
    return body


class Md5Body:
    """`body`, its bytes hashed on the receiving thread."""

    def __init__(self, body: Body, size_bytes: int, md5_b64: str, cell: StreamedDigest) -> None:
        self._body = body
        self._size = size_bytes
        self._declared = md5_b64
        self._cell = cell
        self._md5 = hashlib.md5(usedforsecurity=False)
        self._seen = 0
        self.start = body.start
        self.total_bytes = body.total_bytes
        self.complete = body.complete
        self.etag = body.etag
        self.last_modified = body.last_modified
        self.framed = body.framed

    def readinto(self, buffer: memoryview) -> int:
        count = self._body.readinto(buffer)
        if count:
            self._md5.update(buffer[:count])
            self._seen += count
        elif self._seen == self._size and self.start == 0:
            digest = base64.b64encode(self._md5.digest()).decode("ascii")
            if digest == self._declared:
                self._cell.matched = True
        return count

    @property
    def copy_into(self) -> Callable[[int, int], int] | None:
        return None

    def close(self) -> None:
        self._body.close()
