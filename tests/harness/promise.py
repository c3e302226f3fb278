"""The promise, checked after every round of the torture suite: each file
the manifest lists is byte-identical to the origin's, its size record says
its size, a stamp (if any) names its digest, size and mtime, and no
rejection marker names the right digest (a spurious marker would block
every later start)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def check_cache(root: Path, expected: dict[str, bytes]) -> list[str]:
    """Every broken promise under `root` (an empty list: all kept)."""
    broken = []
    for rel, data in expected.items():
        dest = root / rel
        if not dest.is_file() or dest.is_symlink():
            broken.append(f"{rel}: not published")
            continue
        got = dest.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if got != data:
            broken.append(f"{rel}: WRONG FILE ({len(got)} bytes, expected {len(data)})")
        record = root / (rel + ".llmkube-size")
        if record.exists() and record.read_text() != str(len(got)):
            broken.append(f"{rel}: record {record.read_text()!r} for {len(got)} bytes")
        broken += _stamp_lies(dest, got)
        marker = root / f"{rel}.{digest}.sha256-rejected"
        if marker.exists():
            broken.append(f"{rel}: spurious rejection marker for the right digest")
    return broken


def _stamp_lies(dest: Path, got: bytes) -> list[str]:
    stamp = Path(str(dest) + ".sha256")
    if not stamp.exists():
        return []
    parts = stamp.read_text().split()
    if len(parts) != 3:
        return []
    st = os.stat(dest)
    digest, size, mtime = parts[0], int(parts[1]), int(parts[2])
    if (size, mtime) != (st.st_size, int(st.st_mtime)):
        return []  # a stale stamp is a miss (re-hashed), never trusted
    if digest != hashlib.sha256(got).hexdigest():
        return [f"{dest.name}: the stamp vouches for bytes it never hashed"]
    return []
