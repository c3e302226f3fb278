"""Which files a share of a sharded prefetch stages (#16 item 4). PURE.

A Kubernetes Indexed Job runs LLMKUBE_SHARDS pods, each with its
JOB_COMPLETION_INDEX; there is no coordinator. Every pod computes the same
assignment from the same listing: the model's files with their sizes (the
hub's listing at a commit, an S3 HEAD per object, a HEAD per file of a plain
origin). The assignment is greedy longest-processing-time: files by size,
largest first (name on ties), each to the share with the fewest bytes so far
(fewest files, then lowest index, on ties). It depends on nothing but the names, the sizes and
the shard count, so pods that saw the same listing agree, whatever order
they ran in; it is within 4/3 of the best balance, and a file is never split
(FUSE drivers such as BlobFuse upload a whole file on close: two nodes
writing one file is unsafe). A large file is one pod's, fetched with ranged
connections.

Pods that saw different listings (the origin changed between their
listings) could disagree: a file might be assigned twice (both fetch it;
private partials keep that safe) or not at all. Each pod records the digest
of its listing (`view_digest`); a pod that finds another share's digest
different fails instead of succeeding on a model that may be incomplete.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def share_id(index: int, shards: int) -> str:
    return f"{index}-of-{shards}"


def assign(sizes: Mapping[str, int | None], shards: int) -> dict[str, int]:
    """rel -> share index. An unknown size counts as 0 (every pod sees the
    same unknown)."""
    import heapq

    order = sorted(sizes, key=lambda rel: (-(sizes[rel] or 0), rel))
    # (bytes, files, index): the least loaded share, then the one with the
    # fewest files (empty or unknown-size files spread too), then the lowest.
    loads = [(0, 0, index) for index in range(shards)]
    owner: dict[str, int] = {}
    for rel in order:
        load, count, index = heapq.heappop(loads)
        owner[rel] = index
        heapq.heappush(loads, (load + (sizes[rel] or 0), count + 1, index))
    return owner


def share_of(sizes: Mapping[str, int | None], shards: int, index: int) -> frozenset[str]:
    return frozenset(rel for rel, owner in assign(sizes, shards).items() if owner == index)


def view_digest(sizes: Mapping[str, int | None], shards: int, commit: str = "") -> str:
    """What the assignment was computed from: the shard count, the commit
    (Hugging Face) and every name with its size."""
    import hashlib  # sharded prefetches only: a warm start loads no OpenSSL

    sha = hashlib.sha256(f"{shards}\n{commit}\n".encode())
    for rel, size in _sorted_items(sizes.items()):
        sha.update(f"{rel}\0{'' if size is None else size}\n".encode())
    return sha.hexdigest()[:16]


def _sorted_items(items: Iterable[tuple[str, int | None]]) -> list[tuple[str, int | None]]:
    return sorted(items)
