"""Page cache or O_DIRECT, per file (LLMKUBE_DIRECT_IO=auto, #16 item 1).

What a pod waits for is staging plus the inference server's first read of
the model. Written with O_DIRECT (directio.py), staging is cheapest, but the
server then reads every byte from the disk; written through the page cache,
the server reads it from memory, and the copy into the page cache runs on
the writer thread, beside the receiving and hashing threads (curl does its
copy in turn with the receive). That only pays while the model stays in the
page cache until the server reads it: the cache pages are charged to the
writing container's memory cgroup, which reclaims them beyond its limit,
and a node without free memory evicts them. So `auto` keeps a file in the
page cache while the bytes kept so far in this run plus the file fit in
half the memory there is room for (the smaller of the cgroup's limit minus
its usage, memory.max/memory.high in v2, limit_in_bytes in v1, and the
node's MemAvailable), and writes the rest with O_DIRECT (where the
filesystem takes it). `on` is always O_DIRECT there, `off` never. The
figures that chose it are in docs/performance.md.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

# Keep at most this share of the room in the page cache: the server needs
# memory of its own, and so do the node's other pods.
ROOM_SHARE = 0.5
_UNLIMITED = 1 << 60  # cgroup v1 writes ~2^63 for "no limit"


class PageCacheBudget:
    """Thread-safe: files in flight at once reserve from one budget. The
    room is read once, when the first file asks (not before: a run that
    only probes reads nothing), before anything of this run is cached (the
    page cache it fills counts as available memory, so re-reading would
    double it)."""

    def __init__(self, room_bytes: Callable[[], int | None]) -> None:
        self._room_bytes = room_bytes
        self._budget: int | None = None
        self._read = False
        self._kept = 0
        self._lock = threading.Lock()

    def keep_cached(self, size_bytes: int | None) -> bool:
        """True (and reserved) when a file of this size goes through the
        page cache. Unknown sizes and an unknown room go O_DIRECT."""
        if size_bytes is None:
            return False
        with self._lock:
            if not self._read:
                room = self._room_bytes()
                self._budget = None if room is None else int(room * ROOM_SHARE)
                self._read = True
            if self._budget is None or self._kept + size_bytes > self._budget:
                return False
            self._kept += size_bytes
            return True


def memory_room_bytes(proc: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> int | None:
    """Memory the page cache may use without evicting itself: the smaller
    of the node's MemAvailable and the memory cgroup's limit minus its
    usage; None when neither can be read."""
    rooms = [r for r in (_mem_available(proc), _cgroup_room(proc, cgroup_root)) if r is not None]
    return min(rooms) if rooms else None


def _mem_available(proc: str) -> int | None:
    try:
        with open(os.path.join(proc, "meminfo")) as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room(proc: str, root: str) -> int | None:
    try:
        with open(os.path.join(proc, "self", "cgroup")) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            return _room_v2(_cgroup_dir(root, path))
        if "memory" in controllers.split(","):
            return _room_v1(_cgroup_dir(os.path.join(root, "memory"), path))
    return None


def _cgroup_dir(root: str, path: str) -> str:
    """The cgroup's directory; inside a cgroup namespace the own cgroup is
    the root of the mount."""
    nested = os.path.join(root, path.lstrip("/"))
    return nested if os.path.isdir(nested) else root


def _room_v2(directory: str) -> int | None:
    limits = [_read_int(directory, "memory.max"), _read_int(directory, "memory.high")]
    limit = min((v for v in limits if v is not None), default=None)
    if limit is None:
        return None
    return max(0, limit - (_read_int(directory, "memory.current") or 0))


def _room_v1(directory: str) -> int | None:
    limit = _read_int(directory, "memory.limit_in_bytes")
    if limit is None or limit >= _UNLIMITED:
        return None
    return max(0, limit - (_read_int(directory, "memory.usage_in_bytes") or 0))


def _read_int(directory: str, name: str) -> int | None:
    """An integer file of the cgroup; None for "max", missing or unreadable."""
    try:
        with open(os.path.join(directory, name)) as handle:
            text = handle.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
