"""What only the refresh-policy and sha256-pin tests (tests/policy) need
beyond tests/harness: filesystem probes to swap in, sha256 stamps and
rejection markers, a multi-file repo on the origin and its request counts."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from llmkube_stager.model import FsInfo
from tests.harness.origin import Origin

REPO = "/org/repo/resolve/main"
ON_CHANGE = {"LLMKUBE_REFRESH_POLICY": "OnChange"}
STAMP = ".sha256"
_MARKER_RE = re.compile(r"\.([0-9a-f]{64})\.sha256-rejected")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fuse_fs(path: str) -> FsInfo:
    """What probe_fs reports on a BlobFuse mount (spec §9.2)."""
    return FsInfo(path, "fuse.blobfuse2", "blobfuse2", is_fuse=True, read_only=False, free_bytes=0)


def read_only_fs(path: str) -> FsInfo:
    return FsInfo(path, "ext4", "ext4", is_fuse=False, read_only=True, free_bytes=10**12)


def stamp(dest: Path) -> str | None:
    path = Path(str(dest) + STAMP)
    return path.read_text() if path.exists() else None


def write_stamp(dest: Path, digest: str) -> None:
    st = dest.stat()
    Path(str(dest) + STAMP).write_text(f"{digest} {st.st_size} {int(st.st_mtime)}")


def stamp_triple(dest: Path, digest: str) -> str:
    """The stamp the shared format requires for `dest` as it is now."""
    st = dest.stat()
    return f"{digest} {st.st_size} {int(st.st_mtime)}"


def markers(dest: Path) -> list[str]:
    """Expected digests of `<file>.<expected>.sha256-rejected` markers."""
    if not dest.parent.is_dir():
        return []
    found = []
    for entry in dest.parent.iterdir():
        if entry.name.startswith(dest.name + "."):
            match = _MARKER_RE.fullmatch(entry.name[len(dest.name) :])
            if match:
                found.append(match.group(1))
    return sorted(found)


# -- the origin -----------------------------------------------------------------------


def serve_repo(origin: Origin, files: Mapping[str, bytes]) -> str:
    """Put a multi-file repo at <origin>/org/repo/resolve/main/; returns the base URL."""
    for rel, data in files.items():
        origin.put(f"{REPO}/{rel}", data)
    return origin.url + REPO + "/"


def methods(origin: Origin, path: str | None = None) -> Counter[str]:
    """HEAD/GET counts the origin received (for one path, or all)."""
    return Counter(r.method for r in origin.requests(path))
