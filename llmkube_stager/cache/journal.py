"""The parallel transfer's resume journal: `<...>.llmkube-journal`, JSON
`{"validator": ..., "size": ..., "done": [[start, end], ...]}` naming the
byte ranges of its sparse `<...>.llmkube-segs` data file that are on disk
(written after an fdatasync of the data, so it never claims bytes the disk
may not hold: transfer/parallel.py). Anything unreadable, of another
validator or size, is no journal at all; so is anything that is not a
regular file (a planted symlink or FIFO is never followed nor waited on).
"""

from __future__ import annotations

import json
import os
import stat

from llmkube_stager.cache.records import write_atomic

Spans = list[tuple[int, int]]
_MAX_BYTES = 4 << 20


def read_regular(path: str, limit: int) -> bytes | None:
    """At most `limit` bytes of a regular file, never following a symlink
    nor blocking on a FIFO; None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def load_journal(path: str, validator: str, size: int) -> Spans:
    raw = read_regular(path, _MAX_BYTES)
    if raw is None:
        return []
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("validator") != validator:
            return []
        if doc.get("size") != size:
            return []
        spans = doc.get("done", [])
        return [(int(s), int(e)) for s, e in spans if 0 <= int(s) < int(e) <= size]
    except (ValueError, TypeError):
        return []


def write_journal(path: str, validator: str, size: int, done: Spans) -> None:
    """Atomically (a reader sees the old journal or the new one)."""
    doc = {"validator": validator, "size": size, "done": [list(span) for span in done]}
    write_atomic(path, json.dumps(doc).encode())


# -- the run record, kept in the model directory's `.llmkube-validators` ----------
#
# Besides rel -> validator, three keys that no relative path can take (a rel
# never starts with "/"): the revision asked for and the commit the files of
# this directory come from, recorded before a run publishes its first file
# (#10 defect 11: an interrupted run is finished from the same commit), and
# the intent of a publish in progress (defect 13): the files about to be
# renamed into place, written before the first rename and cleared after the
# last, so a writer killed in between is rolled forward by the next one and a
# reader does not take a half-published set for a whole one.

COMMIT_KEY = "/commit"
REVISION_KEY = "/revision"
INTENT_KEY = "/publishing"
# #21 item 4, the commit a sharded prefetch Job agreed on (shardrec.JobCommit):
# a share records the id of the agreement it staged under, and, once its
# share is whole, that id again as complete; an unsharded writer that staged
# the whole model records which shares' commits its run superseded
# (JSON {share id: commit}), so readers no longer count those.
CLAIM_KEY = "/claim"
COMPLETE_KEY = "/complete"
OVER_KEY = "/over"


def intent_of(validators: dict[str, str], key: str | None = None) -> list[dict[str, object]]:
    """The pending publish: [{"rel", "partial", "size", "validator"}...];
    of every writer (the shares of a sharded prefetch record theirs under
    `/publishing/<share>`: cache/shardrec.py), or of the one `key`."""
    keys = [key] if key is not None else [k for k in validators if _is_intent_key(k)]
    return [entry for k in sorted(keys) for entry in _entries(validators.get(k, ""))]


def intent_keys(validators: dict[str, str]) -> list[str]:
    """The keys of every writer's publish intent, in order."""
    return sorted(k for k in validators if _is_intent_key(k))


def _is_intent_key(key: str) -> bool:
    return key == INTENT_KEY or key.startswith(INTENT_KEY + "/")


def _entries(raw: str) -> list[dict[str, object]]:
    if not raw:
        return []
    try:
        doc = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(doc, list):
        return []
    return [e for e in doc if isinstance(e, dict) and _entry_ok(e)]


def _entry_ok(entry: dict[str, object]) -> bool:
    return (
        isinstance(entry.get("rel"), str)
        and isinstance(entry.get("partial"), str)
        and "/" not in str(entry.get("partial"))
        and isinstance(entry.get("size"), int)
    )


def encode_intent(entries: list[dict[str, object]]) -> str:
    return json.dumps(entries, sort_keys=True, separators=(",", ":"))
