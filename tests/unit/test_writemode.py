"""LLMKUBE_DIRECT_IO=auto: which files go through the page cache
(transfer/writemode.py, #16 item 1). The memory readers run on fake /proc
and cgroup trees laid out as the kernel does (v1, v2, v2 in a namespace)."""

from __future__ import annotations

import threading
from pathlib import Path

from llmkube_stager.transfer.writemode import PageCacheBudget, memory_room_bytes

GIB = 1 << 30


def _tree(tmp_path: Path, cgroup: str, files: dict[str, str], avail_kib: int | None) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    if avail_kib is not None:
        (proc / "meminfo").write_text(
            f"MemTotal:       25000000 kB\nMemFree:  1000 kB\nMemAvailable:   {avail_kib} kB\n"
        )
    for rel, text in files.items():
        path = tmp_path / "cg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return proc


def test_files_are_kept_cached_while_they_fit_half_the_room() -> None:
    budget = PageCacheBudget(lambda: 8 * GIB)
    assert budget.keep_cached(2 * GIB)
    assert budget.keep_cached(2 * GIB)
    assert not budget.keep_cached(1), "half of the room is used: the rest goes O_DIRECT"


def test_a_file_too_large_goes_direct_and_leaves_the_budget_to_smaller_ones() -> None:
    budget = PageCacheBudget(lambda: 4 * GIB)
    assert not budget.keep_cached(3 * GIB)
    assert budget.keep_cached(GIB)


def test_the_room_is_read_once_when_the_first_file_asks() -> None:
    reads: list[int] = []

    def room() -> int:
        reads.append(1)
        return 8 * GIB

    budget = PageCacheBudget(room)
    assert reads == [], "read before any file asked"
    assert budget.keep_cached(GIB) and budget.keep_cached(GIB)
    assert reads == [1]


def test_unknown_sizes_and_unknown_room_go_direct() -> None:
    assert not PageCacheBudget(lambda: 8 * GIB).keep_cached(None)
    assert not PageCacheBudget(lambda: None).keep_cached(1)


def test_files_in_flight_at_once_never_overbook_the_budget() -> None:
    budget = PageCacheBudget(lambda: 200)
    kept: list[bool] = []
    threads = [
        threading.Thread(target=lambda: kept.append(budget.keep_cached(1))) for _ in range(300)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(kept) == 100


def test_cgroup_v2_limit_minus_usage_bounds_the_node_memory(tmp_path: Path) -> None:
    files = {
        "kubepods/pod1/c1/memory.max": "1073741824\n",
        "kubepods/pod1/c1/memory.high": "max\n",
        "kubepods/pod1/c1/memory.current": "104857600\n",
    }
    proc = _tree(tmp_path, "0::/kubepods/pod1/c1\n", files, avail_kib=20 * 1024 * 1024)
    assert memory_room_bytes(str(proc), str(tmp_path / "cg")) == GIB - 100 * (1 << 20)


def test_cgroup_v2_high_below_max_is_the_limit(tmp_path: Path) -> None:
    files = {"memory.max": "max\n", "memory.high": "536870912\n", "memory.current": "0\n"}
    # In a cgroup namespace the own cgroup is the root of the mount.
    proc = _tree(tmp_path, "0::/\n", files, avail_kib=20 * 1024 * 1024)
    assert memory_room_bytes(str(proc), str(tmp_path / "cg")) == 512 << 20


def test_no_cgroup_limit_leaves_the_node_memory(tmp_path: Path) -> None:
    files = {"memory.max": "max\n", "memory.high": "max\n", "memory.current": "5\n"}
    proc = _tree(tmp_path, "0::/\n", files, avail_kib=3 * 1024 * 1024)
    assert memory_room_bytes(str(proc), str(tmp_path / "cg")) == 3 * GIB


def test_cgroup_v1_memory_controller(tmp_path: Path) -> None:
    files = {
        "memory/docker/abc/memory.limit_in_bytes": "2147483648\n",
        "memory/docker/abc/memory.usage_in_bytes": "1073741824\n",
    }
    cgroup = "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n"
    proc = _tree(tmp_path, cgroup, files, avail_kib=20 * 1024 * 1024)
    assert memory_room_bytes(str(proc), str(tmp_path / "cg")) == GIB


def test_cgroup_v1_without_a_limit_writes_a_huge_number(tmp_path: Path) -> None:
    files = {
        "memory/memory.limit_in_bytes": "9223372036854771712\n",
        "memory/memory.usage_in_bytes": "1\n",
    }
    proc = _tree(tmp_path, "4:memory:/\n", files, avail_kib=1024)
    assert memory_room_bytes(str(proc), str(tmp_path / "cg")) == 1024 * 1024


def test_nothing_readable_is_no_room(tmp_path: Path) -> None:
    assert memory_room_bytes(str(tmp_path / "none"), str(tmp_path / "none")) is None


def test_a_cgroup_over_its_limit_has_no_room(tmp_path: Path) -> None:
    files = {"memory.max": "100\n", "memory.current": "500\n"}
    proc = _tree(tmp_path, "0::/\n", files, avail_kib=None)
    assert memory_room_bytes(str(proc), str(tmp_path / "cg")) == 0
