"""sha256 of partial prefixes (a resumed transfer). Hashing while receiving
is in pipeline.py (a stream) and parallel.py (ranged connections); hashing
a cached file is the cache's (cache/state.py)."""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hashlib import _Hash

_PREFIX_CHUNK_BYTES = 1 << 20


def sha256_prefix(fd: int, length: int) -> _Hash:
    """The running sha256 of the first `length` bytes of a partial being
    resumed, read through its descriptor (raises OSError when it is shorter)."""
    sha = hashlib.sha256()
    offset = 0
    while offset < length:
        chunk = os.pread(fd, min(_PREFIX_CHUNK_BYTES, length - offset), offset)
        if not chunk:
            raise OSError(f"the partial is shorter than {length} bytes")
        sha.update(chunk)
        offset += len(chunk)
    return sha
