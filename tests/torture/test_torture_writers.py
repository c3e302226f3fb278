"""Two writers that the lock does not separate: a plain directory where
flock is a no-op for everyone (LD_PRELOAD shim: NFS with node-local locks),
and two bindfs mounts of one directory (two nodes of a FUSE volume) where
one writer's clock is fast. Writers are frozen (SIGSTOP) and resumed,
killed and restarted in random orders, pinned, unpinned and with
different pins. Always one writer's complete, right file; records and
stamps true; no marker for the right digest."""

from __future__ import annotations

import hashlib
import random
import signal
import time
from collections.abc import Mapping
from pathlib import Path

from tests.harness.mounts import TwoNodes
from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.promise import check_cache
from tests.harness.torture import Scale, Shims, Stats

MIB = 1 << 20


def _env(url: str, root: Path, pin: str | None, connections: str) -> dict[str, str]:
    env = {
        "MODEL_SOURCE": url,
        "CACHE_DIR": str(root),
        "MODEL_PATH": str(root / "model.gguf"),
        "LLMKUBE_CONNECTIONS": connections,
        "LLMKUBE_PREFETCH_STAGER": "true",
        "LLMKUBE_LOCK_TIMEOUT": "120",
    }
    if pin:
        env["MODEL_SHA256"] = pin
    return env


def _race(
    writers: list[Pod],
    envs: list[dict[str, str]],
    rng: random.Random,
    freeze_s: float,
) -> list[int]:
    """Start both writers (each a pod with its own termination log), freeze
    one, kill/restart at random; every writer finally runs to its end.
    Returns the final exit codes."""
    procs = [pod.popen(env=env) for pod, env in zip(writers, envs, strict=True)]
    time.sleep(rng.uniform(0.1, 0.8))
    victim = rng.randrange(len(procs))
    action = rng.choice(["freeze", "kill", "both"])
    if action in ("freeze", "both"):
        procs[victim].send_signal(signal.SIGSTOP)
        time.sleep(freeze_s)
        procs[victim].send_signal(signal.SIGCONT)
    if action in ("kill", "both"):
        other = 1 - victim
        procs[other].send_signal(signal.SIGKILL)
        writers[other].finish(procs[other], 30)
        procs[other] = writers[other].popen(env=envs[other])
    return [pod.finish(proc, 180).returncode for pod, proc in zip(writers, procs, strict=True)]


def _round(
    writers: list[Pod],
    origin: Origin,
    roots: list[Path],
    check_root: Path,
    seed: int,
    stats: Stats,
    freeze_s: float,
    second_env: dict[str, str] | None = None,
) -> None:
    rng = random.Random(seed)
    size = rng.choice([3 * MIB + 5, 36 * MIB + 4097])
    data = random.Random(seed).randbytes(size)
    path = f"/w{seed}/model.gguf"
    origin.put(path, data, rate_bytes_per_s=rng.choice([8 * MIB, 24 * MIB]))
    right = hashlib.sha256(data).hexdigest()
    pins: list[str | None] = rng.choice(
        [[None, None], [right, right], [right, None], [right, "0" * 64]]
    )
    envs = [
        _env(origin.url + path, root, pin, rng.choice(["1", "4"]))
        for root, pin in zip(roots, pins, strict=True)
    ]
    envs[1].update(second_env or {})
    codes = _race(writers, envs, rng, freeze_s)
    for code, pin in zip(codes, pins, strict=True):
        if pin == "0" * 64:
            assert code != 0, "a writer with a wrong pin published"
        else:
            assert code == 0, f"seed {seed}: a writer with a right or no pin failed: {codes}"
    broken = check_cache(check_root, {"model.gguf": data})
    stats.add(writer_rounds=1, wrong_files=sum("WRONG FILE" in b for b in broken))
    assert broken == [], f"seed {seed}: {broken}"


def _writers(tmp: Path, budget: Mapping[str, str], preload: str) -> list[Pod]:
    """Two pods in one tmp directory, every run under the LD_PRELOAD shim."""
    return [Pod(tmp, {"LD_PRELOAD": preload}, budget=budget) for _ in range(2)]


def test_two_writers_where_flock_is_a_no_op(
    pod_budget: Mapping[str, str],
    origin: Origin,
    tmp_path: Path,
    shims: Shims,
    scale: Scale,
    stats: Stats,
) -> None:
    """Off FUSE the directory flock and the partials' flocks 'succeed' for
    both: they adopt each other's live partials at once."""
    writers = _writers(tmp_path, pod_budget, shims.noop_flock)
    for seed in range(scale.n(3, 20)):
        root = tmp_path / f"nolock{seed}"
        _round(writers, origin, [root, root], root, 2000 + seed, stats, freeze_s=1.0)


def test_two_nodes_one_with_a_fast_clock(
    pod_budget: Mapping[str, str],
    origin: Origin,
    tmp_path: Path,
    two_nodes: TwoNodes,
    shims: Shims,
    scale: Scale,
    stats: Stats,
) -> None:
    """Two bindfs "nodes"; the second's clock is 120 s fast (its partial
    ages were read against it). In the full run one round freezes a
    writer past the idle window (30 s) and resumes it after its partial
    was adopted."""
    rounds = scale.n(2, 6)
    writers = _writers(tmp_path, pod_budget, shims.clock_skew)
    fast = {"LLMKUBE_TEST_CLOCK_SKEW_S": "120"}
    for seed in range(rounds):
        key = f"k{seed}"
        roots = [two_nodes.node1 / key, two_nodes.node2 / key]
        freeze = 36.0 if scale.full and seed == rounds - 1 else 1.0
        _round(writers, origin, roots, two_nodes.backing / key, 3000 + seed, stats, freeze, fast)
