"""Sharded prefetch (#16 item 4): one model fetched by N = 1, 2, 4 stager
processes (the pods of an Indexed Job, here on one machine) from nginx's
per-connection-capped location, into one cache directory. Prints the wall
time of the whole Job, its throughput, the CPU of all shares, the largest
peak RSS of one share, and the bytes nginx served to each share.

On one machine the shares share its cores: past a point N adds connections,
not CPU, and the cores are the bound (docs/performance.md).

Case `shards` of `make bench` (`BENCH_CASES=shards` runs it alone).
Environment: BENCH_RUNS (default 3), SHARDS_LARGE_MIB (default 256: four
files of it), SHARDS_SMALL (default 200 small files).
"""

from __future__ import annotations

import os
import re
import threading
import time

import benchlib as b
import manyfile
from benchlib import Case, Context, Row, Sample

from llmkube_stager.share import assign

LARGE_MIB = int(os.environ.get("SHARDS_LARGE_MIB", "256"))
SMALL = int(os.environ.get("SHARDS_SMALL", "200"))
COUNTS = (1, 2, 4)
_LOG_LINE = re.compile(r'"GET (\S+) HTTP/[\d.]+" \d{3} (\d+)')


def names() -> list[str]:
    large = [f"unet/shard-{k:05d}-of-00004.safetensors" for k in range(1, 5)]
    return [*large, *manyfile.small_names(SMALL)]


def _make_repository(directory: str) -> dict[str, str]:
    rels = names()
    saved = manyfile.LARGE_MIB
    manyfile.LARGE_MIB = LARGE_MIB
    try:
        manyfile.make_tree(directory, rels[4:], rels[:4])
    finally:
        manyfile.LARGE_MIB = saved
    return {}


class Sharded:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.servers = ctx.servers
        ctx.model("sharded", _make_repository)
        self.www = os.path.join(self.servers.www, "sharded")
        self.base = ctx.http() + "/capped/sharded/"
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
            self.ctx.work,
            MODEL_SOURCE=self.base,
            MODEL_FILES="\n".join(self.rels),
            CACHE_DIR=cache,
            **extra,
        )
        env["LLMKUBE_TERMINATION_LOG"] = os.path.join(self.ctx.work, f"term-{index}.json")
        return env

    def job(self, shards: int) -> tuple[float, list[Sample], dict[int, int]]:
        """All shares at once; (wall s, their samples, bytes served per share)."""
        cache = b.fresh(self.ctx.out("sharded"))
        log = os.path.join(self.ctx.work, "access.log")
        start_at = os.path.getsize(log) if os.path.exists(log) else 0
        samples: list[Sample | None] = [None] * shards

        def one(index: int) -> None:
            samples[index] = b.run(b.agent_cmd(), self.env(shards, index, cache))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(shards)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.monotonic() - started
        done = [s for s in samples if s is not None]
        if len(done) != shards or any(s.exit_code != 0 for s in done):
            raise RuntimeError(f"a share failed: {self._reasons(shards)}")
        return wall, done, self._served(log, start_at, shards)

    def _reasons(self, shards: int) -> list[str]:
        """Each share's termination message: why a share failed."""
        found = []
        for index in range(shards):
            try:
                with open(os.path.join(self.ctx.work, f"term-{index}.json")) as handle:
                    found.append(handle.read())
            except OSError as exc:
                found.append(f"no termination message ({exc.strerror})")
        return found

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

    def run_all(self) -> list[Row]:
        megabytes = sum(self.sizes.values()) / 1e6
        baseline = None
        rows = []
        for shards in COUNTS:
            runs = [self.job(shards) for _ in range(b.RUNS)]
            wall, samples, served = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
            cpu = sum(s.cpu_s for s in samples)
            rss = max(s.rss_mib for s in samples)
            sample = Sample(wall, cpu, rss, 0)
            baseline = baseline or wall
            shares = " ".join(f"{served[i] / 1e6:.0f}" for i in range(shards))
            note = f"MB served per share: {shares}; rss = largest share"
            case = f"sharded, {len(self.rels)} files, capped"
            rows.append(Row(case, f"agent x {shards}", sample, megabytes, baseline, note))
        return rows


CASES = [Case("shards", lambda ctx: Sharded(ctx).run_all(), "one model over N = 1, 2, 4 pods")]
