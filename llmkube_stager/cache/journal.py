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

from llmkube_stager.cache.records import write_atomic
from llmkube_stager.cache.safeio import read_regular

Spans = list[tuple[int, int]]
_MAX_BYTES = 4 << 20


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
