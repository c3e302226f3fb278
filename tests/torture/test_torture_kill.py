"""Kill -9 loop: seeded rounds that SIGKILL `stage` at random moments
(the probe, the stream, widening, parallel ranges, the publish, the
record, the stamp, the OnChange publish loop), single and multi-file,
restarted until a run is let finish. Afterwards the cache is the origin's,
byte for byte, with true records and stamps, and the origin served less
than three times the model (a kill loses at most what was in flight)."""

from __future__ import annotations

import hashlib
import random
import signal
import time
from pathlib import Path

from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.promise import check_cache
from tests.harness.sample import payload
from tests.harness.torture import Scale, Stats

MIB = 1 << 20


def _model(rng: random.Random, seed: int) -> dict[str, bytes]:
    shape = rng.choice(["single", "multi", "big"])
    if shape == "single":
        return {"model.gguf": payload(rng.randint(1, 6) * MIB + rng.randint(0, 4095), seed)}
    if shape == "big":  # parallel ranges (>= 32 MiB) with widening
        return {"model.gguf": payload(36 * MIB + rng.randint(0, 4095), seed)}
    return {
        "config.json": payload(rng.randint(10, 900), seed + 1),
        "model-00001-of-00002.safetensors": payload(rng.randint(1, 4) * MIB, seed + 2),
        "model-00002-of-00002.safetensors": payload(rng.randint(1, 4) * MIB + 7, seed + 3),
    }


def _env(root: Path, base_url: str, files: dict[str, bytes], rng: random.Random) -> dict[str, str]:
    env = {
        "CACHE_DIR": str(root),
        "LLMKUBE_CONNECTIONS": rng.choice(["1", "4"]),
        "LLMKUBE_REFRESH_POLICY": rng.choice(["IfNotPresent", "OnChange"]),
        "PROGRESS_INTERVAL": "1",
    }
    pinned = rng.random() < 0.5
    if len(files) == 1:
        (rel,) = files
        env.update(MODEL_SOURCE=f"{base_url}/{rel}", MODEL_PATH=str(root / rel))
        if pinned:
            env["MODEL_SHA256"] = hashlib.sha256(files[rel]).hexdigest()
    else:
        env.update(MODEL_SOURCE=base_url + "/", MODEL_FILES="\n".join(files))
        if pinned:
            env["MODEL_FILE_SHA256"] = "\n".join(
                f"{hashlib.sha256(data).hexdigest()} {rel}" for rel, data in files.items()
            )
    return env


def _round(pod: Pod, origin: Origin, tmp: Path, seed: int, stats: Stats) -> None:
    rng = random.Random(seed)
    files = _model(rng, seed)
    prefix = f"/r{seed}"
    rate = rng.choice([None, 16 * MIB, 48 * MIB])
    for rel, data in files.items():
        origin.put(f"{prefix}/{rel}", data, rate_bytes_per_s=rate)
    root = tmp / f"r{seed}"
    env = _env(root, origin.url + prefix, files, rng)
    size = sum(len(d) for d in files.values())
    kills = rng.randint(1, 4)
    for _ in range(kills):
        proc = pod.popen(env=env)
        time.sleep(rng.uniform(0.05, 1.5))
        proc.send_signal(signal.SIGKILL)
        pod.finish(proc, 30)
    if rng.random() < 0.3:
        # The upstream moves on between kills: OnChange must end on the new
        # set, IfNotPresent on one whole version per file.
        files = {
            rel: payload(len(data) + 11, seed + 50 + i)
            for i, (rel, data) in enumerate(files.items())
        }
        for rel, data in files.items():
            origin.put(f"{prefix}/{rel}", data, rate_bytes_per_s=rate)
        env = _env(root, origin.url + prefix, files, random.Random(seed))
        env["LLMKUBE_REFRESH_POLICY"] = "OnChange"
        size += sum(len(d) for d in files.values())
    ran = pod.run(env=env, timeout=120)
    assert ran.returncode == 0, f"seed {seed}: {ran}"
    broken = check_cache(root, files)
    served = sum(r.body_bytes for r in origin.requests(method="GET") if r.path.startswith(prefix))
    stats.add(kill_rounds=1, kills=kills, bytes_model=size, bytes_served=served)
    stats.add(wrong_files=sum("WRONG FILE" in b for b in broken))
    assert broken == [], f"seed {seed}: {broken}"
    assert served < 3 * size, f"seed {seed}: served {served} bytes for a {size}-byte model"


def test_kill_nine_loop(
    pod: Pod, origin: Origin, tmp_path: Path, scale: Scale, stats: Stats
) -> None:
    for seed in range(scale.n(6, 100)):
        _round(pod, origin, tmp_path, 1000 + seed, stats)
