"""Which files are partials of a destination, and the writer id our own
partials' names carry (layout.py spells the names; #32 item 4: the naming
of partials, apart from holding one (heldpartial.py) and adopting one
(partials.py))."""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass

from llmkube_stager.layout import (
    JOURNAL_SUFFIX,
    LEGACY_PARTIAL_SUFFIX,
    OLD_JOURNAL_SUFFIX,
    OLD_PART_SUFFIX,
    OLD_SEGS_SUFFIX,
    PART_SUFFIX,
    SEGS_SUFFIX,
    parse_partial,
)


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
    ctime_s: float = 0.0
    inode: int = 0

    @property
    def sequential(self) -> bool:
        """Written front to back: its size is its progress."""
        return self.kind in ("part", "legacy")


def list_partials(dest: str) -> list[PartialFile]:
    """Every partial of `dest` in its directory, both namings; regular files
    only (lstat: a symlink, FIFO or directory with such a name is no partial)."""
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
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                found.append(
                    PartialFile(
                        path, parsed[0], st.st_size, st.st_mtime, parsed[1], st.st_ctime, st.st_ino
                    )
                )
    return found


def without_partials(dests: list[str]) -> frozenset[str]:
    """The destinations that have nothing beside them a transfer could
    resume or must remove (a partial, journal or legacy temp of any
    validator), from one listing per directory: O(entries), where asking
    `list_partials` for each file is O(files x entries). Conservative: a
    name that could belong to a destination (it starts with the
    destination's name and a dot, and ends like a partial) keeps it out."""
    by_dir: dict[str, list[str]] = {}
    for dest in dests:
        by_dir.setdefault(os.path.dirname(dest) or ".", []).append(dest)
    clear: set[str] = set()
    for directory, group in by_dir.items():
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            clear.update(group)  # a new directory holds nothing yet
            continue
        except OSError:
            continue
        owners = {owner for name in names for owner in _possible_owners(name)}
        clear.update(d for d in group if os.path.basename(d) not in owners)
    return frozenset(clear)


_PARTIAL_ENDINGS = (
    PART_SUFFIX,
    SEGS_SUFFIX,
    JOURNAL_SUFFIX,
    LEGACY_PARTIAL_SUFFIX,
    OLD_PART_SUFFIX,
    OLD_SEGS_SUFFIX,
    OLD_JOURNAL_SUFFIX,
)


def _possible_owners(name: str) -> list[str]:
    """Every file name `name` could be a partial of: each prefix that ends
    before one of its dots."""
    if not name.endswith(_PARTIAL_ENDINGS):
        return []
    return [name[:i] for i, ch in enumerate(name) if ch == "." and i]
