"""Many-file models (#16 item 3): a diffusers/tokenizer-shaped repository of
2,000 files of 4-256 KiB plus a few large shards, against curl one file
after another (what the old scripts did), then the warm start, `plan` and
`verify` of the cached copy, and how the cold time grows with the file count.

`bench.py` calls `run(bench)`; `python bench/manyfile.py` runs these cases
alone (own nginx, own work directory). Environment: BENCH_RUNS (default 3),
MANY_FILES (default 2000), MANY_LARGE_MIB (default 64: three shards of it),
MANY_SCALE ("100,500,2000").
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench as b

FILES = int(os.environ.get("MANY_FILES", "2000"))
LARGE_MIB = int(os.environ.get("MANY_LARGE_MIB", "64"))
LARGE_COUNT = 3
SCALE = tuple(int(n) for n in os.environ.get("MANY_SCALE", "100,500,2000").split(","))
SMALL_MIN_BYTES = 4 << 10
SMALL_MAX_BYTES = 256 << 10
_DIRS = ("", "tokenizer", "text_encoder", "text_encoder_2", "unet", "vae", "scheduler")
WARM_TARGET_MS = 400


def small_names(count: int) -> list[str]:
    """Spread over a few directories, as diffusers repositories are."""
    names = []
    for i in range(count):
        folder = _DIRS[i % len(_DIRS)]
        name = f"part-{i:05d}.json"
        names.append(f"{folder}/{name}" if folder else name)
    return names


def large_names() -> list[str]:
    return [
        f"unet/diffusion_pytorch_model-{k:05d}-of-{LARGE_COUNT:05d}.safetensors"
        for k in range(1, LARGE_COUNT + 1)
    ]


def make_tree(root: str, small: list[str], large: list[str], seed: int = 16) -> int:
    """Write the repository under `root`; returns its size in bytes."""
    rng = random.Random(seed)
    total = 0
    for rel in small:
        size = rng.randint(SMALL_MIN_BYTES, SMALL_MAX_BYTES)
        total += _write(os.path.join(root, rel), os.urandom(size))
    for rel in large:
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            for _ in range(LARGE_MIB):
                handle.write(os.urandom(b.MIB))
        total += LARGE_MIB * b.MIB
    return total


def _write(path: str, data: bytes) -> int:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)
    return len(data)


def curl_script(work: str, base: str, names: list[str], dest: str) -> list[str]:
    """`curl -o tmp && mv` per file, as the scripts did; from a file, since
    2,000 commands exceed one argument's limit (128 KiB)."""
    dirs = sorted({os.path.dirname(os.path.join(dest, n)) for n in names})
    lines = ["set -e", *(f"mkdir -p '{d}'" for d in dirs)]
    for name in names:
        out = os.path.join(dest, name)
        lines.append(f"curl -sf -o '{out}.tmp' '{base}/{name}' && mv '{out}.tmp' '{out}'")
    script = os.path.join(work, f"curl-{len(names)}.sh")
    with open(script, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    return ["sh", script]


class ManyFiles:
    def __init__(self, bench: Any) -> None:
        self.bench = bench
        self.work: str = bench.work
        self.servers = bench.s
        self.www_dir = os.path.join(self.servers.www, "many")
        self.base = f"http://127.0.0.1:{self.servers.http_port}/many"
        self.small = small_names(max(FILES, *SCALE))
        self.large = large_names()

    def env(self, names: list[str], cache: str, **extra: str) -> dict[str, str]:
        return b.agent_env(
            self.work,
            MODEL_SOURCE=self.base + "/",
            MODEL_FILES="\n".join(names),
            CACHE_DIR=cache,
            **extra,
        )

    def cold(self, names: list[str], case: str, megabytes: float) -> tuple[Any, Any]:
        out_c, out_a = self.bench.out("many-c"), self.bench.out("many-a")
        curl_cmd = curl_script(self.work, self.base, names, out_c)
        env = self.env(names, out_a)
        curl = b.repeat(b.RUNS, lambda: b.run(curl_cmd), lambda: b.fresh(out_c))
        agent = b.repeat(b.RUNS, lambda: b.run(b.agent_cmd(), env), lambda: b.fresh(out_a))
        return curl, agent

    def main_case(self) -> None:
        names = [*self.large, *self.small[:FILES]]
        megabytes = self._bytes(names) / 1e6
        case = f"{len(names):,} files (3 x {LARGE_MIB} MiB)"
        curl, agent = self.cold(names, case, megabytes)
        rows = self.bench.rows
        rows.append(b.Row(case, "curl one-by-one", curl, megabytes))
        note = f"target >= 3x; {_per_file_ms(agent, len(names)):.2f} ms/file"
        rows.append(b.Row(case, "agent", agent, megabytes, curl.wall_s, note))
        self.warm_views(names)

    def warm_views(self, names: list[str]) -> None:
        """The cache of the last cold run: a warm start, `plan` and `verify`,
        each with zero requests to the origin."""
        cache = self.bench.out("many-a")
        env = self.env(names, cache)
        rows = self.bench.rows
        for command, label in (
            (b.agent_cmd(), "warm start"),
            ([b.PY, "-m", "llmkube_stager", "plan"], "plan (warm cache)"),
            ([b.PY, "-m", "llmkube_stager", "verify"], "verify"),
        ):
            before = self.servers.requests_logged()
            sample = b.repeat(max(b.RUNS, 5), lambda c=command: b.run(c, env), lambda: None)
            requests = self.servers.requests_logged() - before
            note = f"target <= {WARM_TARGET_MS} ms; requests={requests}"
            rows.append(b.Row(f"{label}, {len(names):,} files", "agent", sample, 0.0, None, note))

    def scaling(self) -> None:
        """Small files only: the cost per file must not grow with the count."""
        rows = self.bench.rows
        for count in SCALE:
            names = self.small[:count]
            megabytes = self._bytes(names) / 1e6
            case = f"scaling: {count:,} small files"
            curl, agent = self.cold(names, case, megabytes)
            rows.append(
                b.Row(case, "curl one-by-one", curl, megabytes, None, _per_file(curl, count))
            )
            rows.append(
                b.Row(case, "agent", agent, megabytes, curl.wall_s, _per_file(agent, count))
            )

    def _bytes(self, names: list[str]) -> int:
        return sum(os.path.getsize(os.path.join(self.www_dir, n)) for n in names)


def _per_file_ms(sample: Any, count: int) -> float:
    return float(sample.wall_s) * 1000 / count


def _per_file(sample: Any, count: int) -> str:
    return f"{_per_file_ms(sample, count):.2f} ms/file"


def prepare_origin(www: str) -> None:
    """The repository under `<www>/many` (generated once per bench run)."""
    many = os.path.join(www, "many")
    make_tree(many, small_names(max(FILES, *SCALE)), large_names())
    os.sync()


def run(bench: Any) -> None:
    """The many-file cases, appended to `bench.rows` (nginx already up)."""
    prepare_origin(bench.s.www)
    cases = ManyFiles(bench)
    cases.main_case()
    cases.scaling()


def standalone(prefix: str, prepare: Any, cases: Any) -> int:
    """Run some cases alone: own work directory and nginx, the table at the
    end (`prepare(www)` makes the model, `cases(bench)` appends rows)."""
    work = tempfile.mkdtemp(prefix=prefix)
    os.chmod(work, 0o755)
    servers = b.Servers(work)
    try:
        os.makedirs(servers.www)
        prepare(servers.www)
        servers.start_nginx()
        bench = b.Bench(work, servers)
        print(f"machine: {os.cpu_count()} cores; runs per case: {b.RUNS} (median)", flush=True)
        cases(bench)
        print("\n" + b.HEADER)
        for row in bench.rows:
            print(row.render())
        return 0
    finally:
        servers.stop()
        if os.environ.get("BENCH_KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)


def _selected(bench: Any) -> None:
    cases = ManyFiles(bench)
    only = os.environ.get("MANY_ONLY", "main,scaling").split(",")
    if "main" in only:
        cases.main_case()
    if "scaling" in only:
        cases.scaling()


def main() -> int:
    return standalone("llmkube-bench-many-", prepare_origin, _selected)


if __name__ == "__main__":
    sys.exit(main())
