"""Sharded prefetch (#16 item 4): one model fetched by N = 1, 2, 4 stager
processes (the pods of an Indexed Job, here on one machine) from nginx's
per-connection-capped location, into one cache directory. Prints the wall
time of the whole Job, its throughput, the CPU of all shares, the largest
peak RSS of one share, and the bytes nginx served to each share.

On one machine the shares share its cores: past a point N adds connections,
not CPU, and the cores are the bound (docs/performance.md).

`bench.py` calls `run(bench)`; `python bench/shards.py` runs it alone.
Environment: BENCH_RUNS (default 3), SHARDS_LARGE_MIB (default 256: four
files of it), SHARDS_SMALL (default 200 small files).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import manyfile

import bench as b
from llmkube_stager.shards import assign

LARGE_MIB = int(os.environ.get("SHARDS_LARGE_MIB", "256"))
SMALL = int(os.environ.get("SHARDS_SMALL", "200"))
COUNTS = (1, 2, 4)
_LOG_LINE = re.compile(r'"GET (\S+) HTTP/[\d.]+" \d{3} (\d+)')


def names() -> list[str]:
    large = [f"unet/shard-{k:05d}-of-00004.safetensors" for k in range(1, 5)]
    return [*large, *manyfile.small_names(SMALL)]


def prepare_origin(www: str) -> None:
    root = os.path.join(www, "sharded")
    if os.path.isdir(root):
        return
    rels = names()
    saved = manyfile.LARGE_MIB
    manyfile.LARGE_MIB = LARGE_MIB
    try:
        manyfile.make_tree(root, rels[4:], rels[:4])
    finally:
        manyfile.LARGE_MIB = saved
    os.sync()


class Sharded:
    def __init__(self, bench: Any) -> None:
        self.bench = bench
        self.servers = bench.s
        self.www = os.path.join(self.servers.www, "sharded")
        self.base = f"http://127.0.0.1:{self.servers.http_port}/capped/sharded/"
        self.rels = names()
        self.sizes = {r: os.path.getsize(os.path.join(self.www, r)) for r in self.rels}

    def env(self, shards: int, index: int, cache: str) -> dict[str, str]:
        extra = {}
        if shards > 1:
            extra = {
                "LLMKUBE_SHARDS": str(shards),
                "JOB_COMPLETION_INDEX": str(index),
                "LLMKUBE_PREFETCH_STAGER": "true",
            }
        env = b.agent_env(
            self.bench.work,
            MODEL_SOURCE=self.base,
            MODEL_FILES="\n".join(self.rels),
            CACHE_DIR=cache,
            **extra,
        )
        env["LLMKUBE_TERMINATION_LOG"] = os.path.join(self.bench.work, f"term-{index}.json")
        return env

    def job(self, shards: int) -> tuple[float, list[Any], dict[int, int]]:
        """All shares at once; (wall s, their samples, bytes served per share)."""
        cache = b.fresh(self.bench.out("sharded"))
        log = os.path.join(self.bench.work, "access.log")
        start_at = os.path.getsize(log) if os.path.exists(log) else 0
        samples: list[Any] = [None] * shards

        def one(index: int) -> None:
            samples[index] = b.run(b.agent_cmd(), self.env(shards, index, cache))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(shards)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.monotonic() - started
        if any(s.exit_code != 0 for s in samples):
            raise RuntimeError(f"a share failed: {[s.exit_code for s in samples]}")
        return wall, samples, self._served(log, start_at, shards)

    def _served(self, log: str, start_at: int, shards: int) -> dict[int, int]:
        owner = assign(self.sizes, shards) if shards > 1 else dict.fromkeys(self.sizes, 0)
        per_share = dict.fromkeys(range(shards), 0)
        prefix = "/capped/sharded/"
        with open(log) as handle:
            handle.seek(start_at)
            for line in handle:
                match = _LOG_LINE.search(line)
                if match and match.group(1).startswith(prefix):
                    rel = match.group(1)[len(prefix) :]
                    if rel in owner:
                        per_share[owner[rel]] += int(match.group(2))
        return per_share

    def run_all(self) -> None:
        megabytes = sum(self.sizes.values()) / 1e6
        baseline = None
        for shards in COUNTS:
            runs = [self.job(shards) for _ in range(b.RUNS)]
            wall, samples, served = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
            cpu = sum(s.cpu_s for s in samples)
            rss = max(s.rss_mib for s in samples)
            sample = b.Sample(wall, cpu, rss, 0)
            baseline = baseline or wall
            shares = " ".join(f"{served[i] / 1e6:.0f}" for i in range(shards))
            note = f"MB served per share: {shares}; rss = largest share"
            case = f"sharded, {len(self.rels)} files, capped"
            self.bench.rows.append(
                b.Row(case, f"agent x {shards}", sample, megabytes, baseline, note)
            )


def run(bench: Any) -> None:
    prepare_origin(bench.s.www)
    Sharded(bench).run_all()


def main() -> int:
    return manyfile.standalone(
        "llmkube-bench-shards-", prepare_origin, lambda bench: Sharded(bench).run_all()
    )


if __name__ == "__main__":
    sys.exit(main())
