"""Temp-debris sweep for writers (spec §10, scenarios 61-66).

Removes, only when older than 10 minutes: the atomic-write temps
(`*.llmkube-tmp.??????`, and the L3 names `*.llmkube-size.??????`,
`*.sha256-rejected.??????`), the agent's own partials and the old scripts'
partials (`<file>.<key>.tmp`, `<file>.tmp`) of files that are not being
staged now. Never a file the manifest lists (a repository file may end in
`.tmp`), never `<file>.sha256.XXXXXX` (a repository file could match), never a
partial a live writer touches (they refresh their mtime). The age gate exists
because a younger file may be a write in progress on storage where the lock
does not exclude (seed-000).
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Iterator

from llmkube_stager.layout import (
    JOURNAL_SUFFIX,
    LEGACY_PARTIAL_SUFFIX,
    PART_SUFFIX,
    SEGS_SUFFIX,
    key_of_partial,
)

DEBRIS_AGE_S = 600.0
ATOMIC_TMP_PATTERNS = (
    "*.llmkube-tmp.??????",
    "*.llmkube-size.??????",
    "*.sha256-rejected.??????",
)


def is_atomic_debris(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in ATOMIC_TMP_PATTERNS)


def is_partial_of_any(path: str, dests: frozenset[str]) -> bool:
    """Only the destinations `path` could belong to are asked (each prefix
    of it that ends before a dot): the sweep judges every name of the tree,
    and asking every destination for each was O(files^2) (#16)."""
    for cut, char in enumerate(path):
        if char == "." and path[:cut] in dests:
            dest = path[:cut]
            if key_of_partial(dest, path) is not None or path == dest + LEGACY_PARTIAL_SUFFIX:
                return True
    return False


def debris(
    root: str, listed: frozenset[str], staging: frozenset[str], now_s: float, min_age_s: float
) -> Iterator[str]:
    """Paths under `root` that the sweep may remove. `listed`: every manifest
    destination; `staging`: the destinations about to be transferred (their
    partials are the transfer's to resume or discard)."""
    settled = listed - staging
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if path in listed or is_partial_of_any(path, staging):
                continue
            if not (is_atomic_debris(name) or _is_agent_partial(path, settled)):
                continue
            with contextlib.suppress(OSError):
                if now_s - os.lstat(path).st_mtime >= min_age_s:
                    yield path


def _is_agent_partial(path: str, settled: frozenset[str]) -> bool:
    if path.endswith((PART_SUFFIX, SEGS_SUFFIX, JOURNAL_SUFFIX)):
        return True
    return is_partial_of_any(path, settled)


def sweep(
    root: str,
    listed: frozenset[str],
    staging: frozenset[str],
    now_s: float,
    min_age_s: float = DEBRIS_AGE_S,
) -> list[str]:
    removed = []
    for path in list(debris(root, listed, staging, now_s, min_age_s)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(path)
    return removed
