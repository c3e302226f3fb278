"""`make demo`: stage a generated sample model from a loopback origin.

No internet: the origin is this project's own server on 127.0.0.1, serving a
generated GGUF-like file and a safetensors-like multi-file set with a
subdirectory. The agent runs as a subprocess with pod-like environment, once
cold and once warm; the origin's request log shows the warm start made zero
requests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from tests.harness.origin import Origin
from tests.harness.sample import write_sample_tree


@dataclass(frozen=True)
class Run:
    label: str
    exit_code: int
    termination: dict[str, object]
    requests: int


def _stage(env: dict[str, str], workdir: str, label: str, origin: Origin) -> Run:
    before = len(origin.requests())
    term = os.path.join(workdir, "termination-log")
    full_env = {**os.environ, **env, "LLMKUBE_TERMINATION_LOG": term, "PROGRESS_INTERVAL": "1"}
    print(f"\n--- {label} " + "-" * max(0, 60 - len(label)), flush=True)
    proc = subprocess.run(
        [sys.executable, "-m", "llmkube_stager", "stage"], env=full_env, check=False
    )
    with open(term, encoding="utf-8") as handle:
        termination = json.load(handle)
    return Run(label, proc.returncode, termination, len(origin.requests()) - before)


def _summary(runs: list[Run]) -> str:
    header = f"{'run':<34} {'exit':>4} {'files':>5} {'fetched':>7} {'reused':>6} {'requests':>8}"
    lines = [header, "-" * len(header)]
    for run in runs:
        stats = run.termination.get("stats", {})
        assert isinstance(stats, dict)
        lines.append(
            f"{run.label:<34} {run.exit_code:>4} {stats.get('files', '-'):>5} "
            f"{stats.get('fetched', '-'):>7} {stats.get('reused', '-'):>6} {run.requests:>8}"
        )
    return "\n".join(lines)


def main() -> int:
    keep = os.environ.get("DEMO_DIR")
    workdir = keep or tempfile.mkdtemp(prefix="llmkube-demo-")
    try:
        layout = write_sample_tree(os.path.join(workdir, "origin"))
        cache = os.path.join(workdir, "cache")
        with Origin() as origin:
            origin.serve_directory(os.path.join(workdir, "origin"))
            single = {
                "MODEL_SOURCE": f"{origin.url}/single/model.gguf",
                "MODEL_PATH": os.path.join(cache, "single-key", "model.gguf"),
                "CACHE_DIR": os.path.join(cache, "single-key"),
            }
            multi = {
                "MODEL_SOURCE": f"{origin.url}/multi/",
                "MODEL_FILES": "\n".join(layout["multi"]),
                "CACHE_DIR": os.path.join(cache, "multi-key"),
            }
            runs = [
                _stage(single, workdir, "single-file GGUF, cold", origin),
                _stage(multi, workdir, "multi-file safetensors, cold", origin),
                _stage(single, workdir, "single-file GGUF, warm", origin),
                _stage(multi, workdir, "multi-file safetensors, warm", origin),
            ]
        print("\n" + _summary(runs))
        warm_requests = sum(r.requests for r in runs[2:])
        ok = all(r.exit_code == 0 for r in runs) and warm_requests == 0
        where = cache if keep else "a temporary directory (set DEMO_DIR to keep it)"
        print(f"\nwarm starts made {warm_requests} requests; cache was in {where}")
        return 0 if ok else 1
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
