"""Measure the agent inside the built image (docs/image.md, "Measured"):

- warm start: `stage` on a complete 40-file cache (IfNotPresent), wall time of
  the agent process inside the container, and of the whole `buildah run`;
- cold stage of a 256 MiB file: wall time and the agent's peak RSS.

Both times and the RSS are taken in the container by tests/image/probe.py
`timed`, the agent's parent: wall time around its child, and the child's own
ru_maxrss from wait4(), which is what GNU time's %M reports. Measuring from
outside would be wrong: the RSS of `buildah run`'s process tree is buildah's
(Go runtime, two re-exec'd helpers), not the agent's, and a cgroup's
memory.peak also counts the page cache of the 256 MiB written.

    python -m tests.image.measure [--runs 10]     (root, after `make image`)
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.harness.image import Container, ImageConfig, ImagePod, image_ref
from tests.harness.origin import Origin
from tests.harness.sample import gguf_like

WARM_FILES = 40
WARM_FILE_BYTES = 1 << 20
COLD_BYTES = 256 << 20


def timed(pod: ImagePod, args: list[str]) -> dict[str, Any]:
    """The entrypoint with `args`, timed in the container by its parent."""
    argv = pod.container.config.argv(args)
    started = time.perf_counter()
    report = pod.probe("timed", *argv)
    report["outside_seconds"] = time.perf_counter() - started
    assert report["exit"] == 0, report
    return report


def warm_start(pod: ImagePod, origin: Origin, runs: int) -> dict[str, Any]:
    files = [f"shard-{i:02d}.bin" for i in range(WARM_FILES)]
    for i, rel in enumerate(files):
        origin.put(f"/org/repo/{rel}", gguf_like(WARM_FILE_BYTES, seed=i))
    pod.multi(origin.url + "/org/repo/", files)
    timed(pod, ["stage"])  # cold: fills the cache
    origin.clear_log()
    samples = [timed(pod, ["stage"]) for _ in range(runs)]
    assert origin.requests() == [], "a warm start contacted the origin"
    inside = [s["seconds"] for s in samples]
    outside = [s["outside_seconds"] for s in samples]
    return {
        "files": WARM_FILES,
        "runs": runs,
        "agent_seconds_median": statistics.median(inside),
        "agent_seconds_min": min(inside),
        "buildah_run_seconds_median": statistics.median(outside),
        "agent_max_rss_kib": max(s["max_rss_kib"] for s in samples),
    }


def cold_stage(pod: ImagePod, origin: Origin) -> dict[str, Any]:
    origin.put("/big/model.gguf", gguf_like(COLD_BYTES, seed=99))
    dest = pod.single(origin.url + "/big/model.gguf", key="big")
    sample = timed(pod, ["stage"])
    assert dest.stat().st_size == COLD_BYTES
    return {
        "bytes": COLD_BYTES,
        "agent_seconds": sample["seconds"],
        "agent_max_rss_kib": sample["max_rss_kib"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    config = ImageConfig.inspect(image_ref())
    container = Container(config)
    try:
        with Origin() as origin, tempfile.TemporaryDirectory() as tmp:
            results = {
                "image": config.ref,
                "warm_start": warm_start(ImagePod(container, Path(tmp, "warm")), origin, runs),
                "cold_256mib": cold_stage(ImagePod(container, Path(tmp, "cold")), origin),
                "root_writes": container.writes(),
            }
    finally:
        container.close()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
