"""What only the real-mount tests need beyond tests/harness (whose mounts.py
makes, inspects and tears down bindfs and read-only bind mounts): the mounts'
shapes, the constants of the FUSE rules, and the origin's GETs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.harness.origin import Origin, RequestRecord

FUSE_MAGIC_HEX = "65735546"
TEN_MINUTES_S = 600.0

REMEDY_HTTP = (
    "set spec.modelCache.prefetch: true on every InferenceService using this claim, or use "
    "storage with cross-node flock support"
)


# -- mounts -------------------------------------------------------------------------


@dataclass
class FuseCache:
    """A backing directory and a bindfs mount of it: the backing side is what
    the "storage" holds, the mount is what the pod sees."""

    backing: Path
    mnt: Path


@dataclass
class ReadOnlyCache:
    backing: Path
    mnt: Path


def gets(origin: Origin, path: str | None = None) -> list[RequestRecord]:
    return origin.requests(path, "GET")
