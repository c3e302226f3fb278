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

A debris name whose mtime lies in the future (a node's clock ahead, a date
set by hand) has no age to judge: it would never be swept. The sweep sets
its mtime to now instead of removing it, so it ages from there and goes ten
minutes later like any other (#11 item 8). Resetting is harmless to a live
writer: its file just looks as young as it is.

The tree is walked without recursion and without following symlinks
(cache/safeio.walk_files): a 1,100-deep tree broke `os.walk` (#11 item 7); a
symlink named like debris is removed as a name, never followed.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Iterator
from dataclasses import dataclass

from llmkube_stager.cache.safeio import walk_files
from llmkube_stager.layout import (
    AGENT_PARTIAL_SUFFIXES,
    LEGACY_PARTIAL_SUFFIX,
    key_of_partial,
)

DEBRIS_AGE_S = 600.0
# Filesystem timestamps may run a little ahead of this node's clock.
FUTURE_SLACK_S = 5.0
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


@dataclass(frozen=True)
class Debris:
    path: str
    age_s: float  # negative: an mtime in the future

    def due(self, min_age_s: float) -> bool:
        return self.age_s >= min_age_s

    @property
    def from_the_future(self) -> bool:
        return self.age_s < -FUTURE_SLACK_S


def debris(
    root: str, listed: frozenset[str], staging: frozenset[str], now_s: float
) -> Iterator[Debris]:
    """Every name under `root` the sweep judges, with its age. `listed`:
    every manifest destination; `staging`: the destinations about to be
    transferred (their partials are the transfer's to resume or discard)."""
    settled = listed - staging
    for _directory, entries in walk_files(root):
        for entry in entries:
            path = entry.path
            if path in listed or is_partial_of_any(path, staging):
                continue
            if not (is_atomic_debris(entry.name) or _is_agent_partial(path, settled)):
                continue
            with contextlib.suppress(OSError):
                yield Debris(path, now_s - entry.stat(follow_symlinks=False).st_mtime)


def _is_agent_partial(path: str, settled: frozenset[str]) -> bool:
    if path.endswith(AGENT_PARTIAL_SUFFIXES):
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
    for item in list(debris(root, listed, staging, now_s)):
        if item.from_the_future:
            with contextlib.suppress(OSError):
                os.utime(item.path, (now_s, now_s), follow_symlinks=False)
        elif item.due(min_age_s):
            # Best effort: gone meanwhile, or not ours to remove (EACCES).
            with contextlib.suppress(OSError):
                os.unlink(item.path)
                removed.append(item.path)
    return removed
