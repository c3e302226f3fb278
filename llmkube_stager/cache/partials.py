"""Partials: one private file per writer, adopted across restarts by rename.

Why private: on FUSE, flock does not exclude across nodes, and two pods that
resumed into one shared partial published a truncated file that every later
pod accepted (#2158, #2254). Here a writer only ever writes a file whose name
carries its own random id. To resume, it adopts an idle partial (one whose
owner stopped writing: live writers touch theirs every few seconds) by
renaming it to its own name; if two writers race for it, only one rename
finds the source. A writer whose file was adopted away notices at publish
(its own name is gone) and never publishes that inode.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from llmkube_stager.layout import (
    LEGACY_PARTIAL_SUFFIX,
    journal_of,
    parse_partial,
    partial_key,
    private_partial_path,
    segmented_paths,
)

# A live writer refreshes its partial's mtime at least this often (heartbeat).
HEARTBEAT_S = 5.0
# A partial untouched this long has no live writer (6 missed heartbeats).
IDLE_S = 30.0


def new_writer_id() -> str:
    import secrets

    return secrets.token_hex(4)


@dataclass(frozen=True)
class PartialFile:
    path: str
    key: str
    size_bytes: int
    mtime_s: float
    kind: str = "part"  # "part", "segs", "journal", "legacy" (layout.parse_partial)

    @property
    def sequential(self) -> bool:
        """Written front to back: its size is its progress."""
        return self.kind in ("part", "legacy")


def list_partials(dest: str) -> list[PartialFile]:
    """Every partial of `dest` in its directory, both namings."""
    directory = os.path.dirname(dest) or "."
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in names:
        path = os.path.join(directory, name)
        parsed = parse_partial(dest, path)
        if parsed is None:
            continue
        with contextlib.suppress(OSError):
            st = os.stat(path)
            found.append(PartialFile(path, parsed[0], st.st_size, st.st_mtime, parsed[1]))
    return found


def is_idle(partial: PartialFile, now_s: float, idle_s: float) -> bool:
    return now_s - partial.mtime_s >= idle_s


def adopt_partial(dest: str, validator: str, writer_id: str, now_s: float, idle_s: float) -> str:
    """Our private partial path; holding the largest idle partial of the same
    validator when there is one (resume), else not existing yet."""
    own = private_partial_path(dest, validator, writer_id)
    key = partial_key(validator)
    candidates = [
        p
        for p in list_partials(dest)
        if p.key == key and p.sequential and p.path != own and is_idle(p, now_s, idle_s)
    ]
    for candidate in sorted(candidates, key=lambda p: p.size_bytes, reverse=True):
        try:
            os.rename(candidate.path, own)
        except FileNotFoundError:
            continue  # another writer adopted it first
        _touch(own)
        return own
    return own


def hand_over(src: str, dst: str) -> bool:
    """Move our own partial to another of our names (a stream widening to
    ranged connections); False when another writer adopted it meanwhile."""
    try:
        os.rename(src, dst)
    except FileNotFoundError:
        return False
    _touch(dst)
    return True


def _touch(path: str) -> None:
    """A rename keeps the old mtime: refresh it at once, or the next writer
    sees the adopted partial as idle and adopts it away again."""
    with contextlib.suppress(OSError):
        os.utime(path)


def remove_stale(
    dest: str,
    validator: str,
    now_s: float,
    idle_s: float,
    listed: frozenset[str] = frozenset(),
) -> list[str]:
    """Idle partials of `dest` for other origin validators: bytes of another
    upstream version, never to be resumed (the keep-one sweep of spec §10,
    narrowed to one file so it cannot touch another file's partial)."""
    key = partial_key(validator)
    stale = [p.path for p in list_partials(dest) if p.key != key and is_idle(p, now_s, idle_s)]
    # The old s3/local branches' fixed `<dest>.tmp` (`rm -f` before each try).
    legacy = dest + LEGACY_PARTIAL_SUFFIX
    with contextlib.suppress(OSError):
        if now_s - os.stat(legacy).st_mtime >= idle_s:
            stale.append(legacy)
    removed = []
    for path in stale:
        if path in listed:
            continue  # a repository file that only looks like a partial
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(path)
    return removed


def adopt_segmented(
    dest: str, validator: str, writer_id: str, now_s: float, idle_s: float
) -> tuple[str, str, bool]:
    """(data, journal, adopted) for a parallel transfer. The data file is the
    claim (one rename wins); its journal follows. Data whose journal is gone
    (a crash between the two renames) proves nothing and is dropped."""
    data, journal = segmented_paths(dest, validator, writer_id)
    key = partial_key(validator)
    candidates = [
        p
        for p in list_partials(dest)
        if p.key == key and p.kind == "segs" and p.path != data and is_idle(p, now_s, idle_s)
    ]
    for candidate in candidates:
        try:
            os.rename(candidate.path, data)
        except FileNotFoundError:
            continue
        _touch(data)
        try:
            os.rename(journal_of(candidate.path), journal)
        except FileNotFoundError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(data)
            continue
        return data, journal, True
    return data, journal, False
