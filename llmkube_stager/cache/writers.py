"""The writers of a Hugging Face model at work where no lock excludes them
(#29 item 1): `.llmkube-validators.writers/`, one small JSON file per run,
`{"commit": ..., "mixed": false}`.

Two writers of one model that no claim covers (a pod on a partitioned node
and its replacement, two Jobs for one model: flock does not exclude across
FUSE nodes) may resolve a moving branch to two commits and rename over each
other's files. Each writes its entry, its commit, before its first publish
(after it recorded that commit in the run record) and removes it at a clean
end; one that ends with files of its own beside another commit's rewrites
it as mixed. A writer killed in between leaves it. So a reader tells a set
that writers of two commits touched without trusting any of them to have
finished: an entry that is mixed, or that names another commit than the
run record's, refuses the model (`conflict`) until a writer proves every
file by its bytes and clears the entries it saw (staging/run.py).

A file per run, not a key of the run record: writers read, merge and
rename that record with no lock between them and lose each other's keys.
A directory, so that a reader finds them with one open (absent: the usual
case, one failed lstat on a warm start).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterable, Set
from dataclasses import dataclass

from llmkube_stager.cache.disk import is_volume_fault
from llmkube_stager.cache.records import write_atomic
from llmkube_stager.cache.safeio import read_small
from llmkube_stager.layout import VALIDATORS_NAME

WRITERS_NAME = VALIDATORS_NAME + ".writers"
_MAX_ENTRIES = 64
_MAX_ENTRY_BYTES = 1024
_TMP_MARK = ".llmkube-tmp."  # write_atomic's temp names


@dataclass(frozen=True)
class WriterEntry:
    """One writer's entry: its name in the directory ("" for something at
    the directory's name that is no directory), the commit it stages ("":
    unknown) and whether it ended with its files beside another commit's."""

    name: str
    commit: str
    mixed: bool


def read_writers(root: str) -> tuple[WriterEntry, ...]:
    """Every entry; what cannot be read as one counts as a mixed entry: a
    reader that cannot tell refuses rather than serve."""
    path = os.path.join(root, WRITERS_NAME)
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return ()
    except OSError as exc:
        if is_volume_fault(exc):
            raise
        return (WriterEntry("", "", True),)
    if not stat.S_ISDIR(st.st_mode):
        return (WriterEntry("", "", True),)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if is_volume_fault(exc):
            raise
        return (WriterEntry("", "", True),)
    try:
        names = sorted(n for n in os.listdir(fd) if _TMP_MARK not in n)
        entries = [_entry(fd, name) for name in names[:_MAX_ENTRIES]]
    finally:
        os.close(fd)
    if len(names) > _MAX_ENTRIES:
        entries.append(WriterEntry(names[_MAX_ENTRIES], "", True))
    return tuple(entries)


def _entry(dir_fd: int, name: str) -> WriterEntry:
    small = read_small(name, _MAX_ENTRY_BYTES, dir_fd=dir_fd)
    if small.absent:
        return WriterEntry(name, "", False)  # removed while listed: a clean end
    try:
        doc = json.loads(small.data or b"")
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict):
        return WriterEntry(name, "", True)
    commit, mixed = doc.get("commit"), doc.get("mixed")
    if not isinstance(commit, str) or not isinstance(mixed, bool):
        return WriterEntry(name, "", True)
    return WriterEntry(name, commit, mixed)


def conflict(entries: Iterable[WriterEntry], commits: Set[str]) -> str:
    """Why a reader must refuse: "" when nothing says so. `commits`: the
    commits the run record names for the model's files."""
    entries = list(entries)
    if any(e.mixed for e in entries):
        return "a writer left its files beside another writer's of another commit"
    named = {e.commit for e in entries if e.commit} | set(commits)
    if len(named) > 1:
        shown = ", ".join(c[:12] for c in sorted(named))
        return f"writers of commits {shown} wrote its files"
    return ""


def enter(root: str, name: str, commit: str, *, mixed: bool = False) -> None:
    """This run's entry (again: a mixed one replaces its plain one)."""
    path = os.path.join(root, WRITERS_NAME)
    with contextlib.suppress(FileExistsError):
        # Group-writable, as every directory of the shared cache is
        # (cache/disk.py): pods of other uids in the fsGroup clear entries.
        os.mkdir(path, 0o775)
    doc = {"commit": commit, "mixed": mixed}
    write_atomic(os.path.join(path, name), json.dumps(doc, sort_keys=True).encode())


def leave(root: str, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(root, WRITERS_NAME, name))


def clear(root: str, entries: Iterable[WriterEntry]) -> None:
    """Remove the entries a writer saw (and answered); never one written
    since under another name. Something at the directory's name that is no
    directory is removed (never followed)."""
    path = os.path.join(root, WRITERS_NAME)
    for entry in entries:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(path, entry.name) if entry.name else path)
