"""sha256 of partial prefixes (a resumed transfer). Hashing while receiving
is in pipeline.py (a stream) and parallel.py (ranged connections); hashing
a cached file is the cache's (cache/state.py)."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hashlib import _Hash

_PREFIX_CHUNK_BYTES = 1 << 20


def sha256_prefix(path: str, length: int) -> _Hash:
    """The running sha256 of the first `length` bytes of a partial being
    resumed (raises OSError when it is shorter)."""
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        left = length
        while left > 0:
            chunk = handle.read(min(_PREFIX_CHUNK_BYTES, left))
            if not chunk:
                raise OSError(f"partial {path} is shorter than {length} bytes")
            sha.update(chunk)
            left -= len(chunk)
    return sha

