"""md5 while a whole object is received (#33 item 1): a body asked from
byte 0 to its end is hashed as the engine reads it, and when it ends with
exactly the object's size and the declared md5Hash, the cell in its
RemoteMeta says so; transfer/declared.py then skips its read-back pass.
Anything else (a resume, a range of a parallel transfer, a body cut short,
a mismatch) leaves the cell as it was: the whole partial is read back and
checked before it is published, so this only ever saves work.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable

from llmkube_stager.sources.base import Body, StreamedDigest


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
