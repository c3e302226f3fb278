"""The parallel transfer's resume journal: `<...>.llmkube-journal`, JSON
`{"validator": ..., "size": ..., "done": [[start, end], ...]}` naming the
byte ranges of its sparse `<...>.llmkube-segs` data file that are on disk
(written after an fdatasync of the data, so it never claims bytes the disk
may not hold: transfer/parallel.py). Anything unreadable, of another
validator or size, is no journal at all.
"""

from __future__ import annotations

import json

from llmkube_stager.cache.records import write_atomic

Spans = list[tuple[int, int]]


def load_journal(path: str, validator: str, size: int) -> Spans:
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError):
        return []
    if not isinstance(doc, dict) or doc.get("validator") != validator or doc.get("size") != size:
        return []
    spans = doc.get("done", [])
    return [(int(s), int(e)) for s, e in spans if 0 <= int(s) < int(e) <= size]


def write_journal(path: str, validator: str, size: int, done: Spans) -> None:
    """Atomically (a reader sees the old journal or the new one)."""
    doc = {"validator": validator, "size": size, "done": [list(span) for span in done]}
    write_atomic(path, json.dumps(doc).encode())
