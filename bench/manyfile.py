"""Many-file models (#16 item 3): a diffusers/tokenizer-shaped repository of
2,000 files of 4-256 KiB plus a few large shards, against curl one file
after another (what the old scripts did), then the warm start, `plan` and
`verify` of the cached copy, and how the cold time grows with the file count.

Cases `many` and `scaling` of `make bench` (`BENCH_CASES=many,scaling`
runs them alone). Environment: BENCH_RUNS (default 3), MANY_FILES (default
2000), MANY_LARGE_MIB (default 64: three shards of it), MANY_SCALE
("100,500,2000").
"""

from __future__ import annotations

import os
import random

import benchlib as b
from benchlib import Case, Context, Row, Sample, Target

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
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.work = ctx.work
        self.servers = ctx.servers
        ctx.model("many", _make_repository)
        self.www_dir = os.path.join(self.servers.www, "many")
        self.base = ctx.http() + "/many"
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

    def cold(self, names: list[str]) -> tuple[Sample, Sample]:
        out_c, out_a = self.ctx.out("many-c"), self.ctx.out("many-a")
        curl_cmd = curl_script(self.work, self.base, names, out_c)
        env = self.env(names, out_a)
        curl = b.repeat(b.RUNS, lambda: b.run(curl_cmd), lambda: b.fresh(out_c))
        agent = b.repeat(b.RUNS, lambda: b.run(b.agent_cmd(), env), lambda: b.fresh(out_a))
        return curl, agent

    def main_case(self) -> list[Row]:
        """Cold, against curl, curl made durable (an fsync of every file it
        wrote) and the disk floor for the same bytes, interleaved; then the
        warm views of the agent's cache."""
        names = [*self.large, *self.small[:FILES]]
        megabytes = self._bytes(names) / 1e6
        case = f"{len(names):,} files (3 x {LARGE_MIB} MiB)"
        out_c, out_a = self.ctx.out("many-c"), self.ctx.out("many-a")
        curl_cmd = curl_script(self.work, self.base, names, out_c)
        env = self.env(names, out_a)
        curl, curl_durable, agent, floor = b.interleave(
            b.RUNS,
            [
                (lambda: b.run(curl_cmd), lambda: b.fresh(out_c)),
                (lambda: b.run(b.durable(curl_cmd, out_c)), lambda: b.fresh(out_c)),
                (lambda: b.run(b.agent_cmd(), env), lambda: b.fresh(out_a)),
                b.disk_floor(self.ctx.out("floor"), [os.path.join(self.www_dir, n) for n in names]),
            ],
        )
        note = f"{_per_file_ms(agent, len(names)):.2f} ms/file"
        peers = b.Peers(curl, curl_durable, floor)
        return [
            *peers.rows(case, ("curl one-by-one", "curl + fsync"), megabytes),
            peers.agent(case, "agent", agent, megabytes, Target(">= 3x", min_ratio=3), note),
            *self.warm_views(names),
        ]

    def warm_views(self, names: list[str]) -> list[Row]:
        """The cache of the last cold run: a warm start, `plan` and `verify`,
        each with zero requests to the origin."""
        cache = self.ctx.out("many-a")
        env = self.env(names, cache)
        rows = []
        for command, label in (
            (b.agent_cmd(), "warm start"),
            ([b.PY, "-m", "llmkube_stager", "plan"], "plan (warm cache)"),
            ([b.PY, "-m", "llmkube_stager", "verify"], "verify"),
        ):
            before = self.servers.requests_logged()
            sample = b.repeat(max(b.RUNS, 5), lambda c=command: b.run(c, env), lambda: None)
            requests = self.servers.requests_logged() - before
            target = Target(
                f"<= {WARM_TARGET_MS} ms, no request",
                max_s=WARM_TARGET_MS / 1000,
                holds=requests == 0 and sample.exit_code == 0,
            )
            case = f"{label}, {len(names):,} files"
            rows.append(Row(case, "agent", sample, 0.0, None, f"requests={requests}", target))
        return rows

    def scaling(self) -> list[Row]:
        """Small files only: the cost per file must not grow with the count."""
        rows = []
        for count in SCALE:
            names = self.small[:count]
            megabytes = self._bytes(names) / 1e6
            case = f"scaling: {count:,} small files"
            curl, agent = self.cold(names)
            rows.append(Row(case, "curl one-by-one", curl, megabytes, None, _per_file(curl, count)))
            rows.append(Row(case, "agent", agent, megabytes, curl.wall_s, _per_file(agent, count)))
        return rows

    def _bytes(self, names: list[str]) -> int:
        return sum(os.path.getsize(os.path.join(self.www_dir, n)) for n in names)


def _per_file_ms(sample: Sample, count: int) -> float:
    return sample.wall_s * 1000 / count


def _per_file(sample: Sample, count: int) -> str:
    return f"{_per_file_ms(sample, count):.2f} ms/file"


def _make_repository(directory: str) -> dict[str, str]:
    """The repository under www/many (generated once per bench run); no
    digests: the many-file cases pin nothing."""
    make_tree(directory, small_names(max(FILES, *SCALE)), large_names())
    return {}


CASES = [
    Case("many", lambda ctx: ManyFiles(ctx).main_case(), "2,000-file repository vs curl; warm"),
    Case("scaling", lambda ctx: ManyFiles(ctx).scaling(), "cold time per file at 100/500/2,000"),
]
