"""The records of a sharded prefetch in the model directory (#16 item 4).

`.llmkube-validators` is read, merged and renamed over by its writer
(records.write_validators): N pods of an Indexed Job doing that at once lose
each other's keys (one pod's rename replaces a file another pod read before
it), and no lock can exclude them (flock does not across FUSE nodes). So a
share writes only its own `.llmkube-validators.<i>-of-<n>`, and every share
writes `.llmkube-shards` (the count: the same bytes from every pod), so a
reader finds the shares' files with one open, and a model that was never
sharded costs one failed open. Readers merge: a share's run keys (commit,
revision, publish intent, listing digest) are kept apart as
`<key>/<i>-of-<n>`; a file's validator comes from the record written last
(a later unsharded run rewrites the main file, a later sharded run its
share's).
"""

from __future__ import annotations

import contextlib
import os

from llmkube_stager.cache.records import read_validators, write_atomic
from llmkube_stager.cache.safeio import read_small
from llmkube_stager.config import MAX_SHARDS
from llmkube_stager.layout import SHARDS_NAME, VALIDATORS_NAME
from llmkube_stager.shards import shard_id

_MAX_SHARDS_BYTES = 32


def validators_name(index: int, shards: int) -> str:
    """The share's own validators file (the main one when not sharded)."""
    if shards <= 1:
        return VALIDATORS_NAME
    return f"{VALIDATORS_NAME}.{shard_id(index, shards)}"


def write_shard_count(root: str, shards: int) -> None:
    write_atomic(os.path.join(root, SHARDS_NAME), str(shards).encode("ascii"))


def shard_count(root: str) -> int:
    """The count, read as every other record is (#21 item 6): a regular
    file only (a FIFO there hung every stage, warm starts included), never
    through a symlink, whole and small (a prefix of a larger file is not
    its content), and at most the shard limit (a count of 3,000,000 made a
    warm start look for three million share records). Anything else: not
    sharded (the main record alone is read)."""
    small = read_small(os.path.join(root, SHARDS_NAME), _MAX_SHARDS_BYTES)
    if small.data is None:
        return 0
    text = small.data.decode("ascii", "replace").strip()
    if not (text.isascii() and text.isdigit()):
        return 0
    count = int(text)
    return count if count <= MAX_SHARDS else 0


def read_merged(root: str) -> dict[str, str]:
    """The validators of every writer of the directory, as one mapping."""
    shards = shard_count(root)
    if shards <= 1:
        return read_validators(root)
    names = [VALIDATORS_NAME, *(validators_name(i, shards) for i in range(shards))]
    merged: dict[str, str] = {}
    for name in sorted(names, key=lambda n: _mtime(root, n)):
        suffix = "" if name == VALIDATORS_NAME else "/" + name.rsplit(".", 1)[1]
        for key, value in read_validators(root, name).items():
            merged[key + suffix if key.startswith("/") else key] = value
    return merged


def _mtime(root: str, name: str) -> float:
    with contextlib.suppress(OSError):
        return os.lstat(os.path.join(root, name)).st_mtime
    return 0.0
