"""`make demo`: stage a generated sample model from a loopback origin.

No internet: the origin is this project's own server on 127.0.0.1, serving a
generated GGUF-like file and a safetensors-like multi-file set with a
subdirectory. The agent runs as a subprocess with pod-like environment, once
cold and once warm, each run's command printed before its log; the origin's
request log shows the warm start made zero requests.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from tests.harness.origin import Origin
from tests.harness.pod import Pod, Run
from tests.harness.sample import write_sample_tree

# The variables that say what a run stages (the rest is the pod's plumbing).
_SHOWN = ("MODEL_SOURCE", "CACHE_DIR", "MODEL_PATH", "MODEL_FILES", "PROGRESS_INTERVAL")


def command_line(pod: Pod, *args: str, **overrides: str) -> str:
    """The run as a person would type it in a shell."""
    env = pod.environ(overrides=overrides)
    assigned = [f"{name}={_quoted(env[name])}" for name in _SHOWN if name in env]
    return "$ " + " ".join([*assigned, "python -m llmkube_stager", *args])


def _quoted(value: str) -> str:
    """One line, as bash reads it: a list of files as $'a\\nb'."""
    if "\n" not in value:
        return shlex.quote(value)
    escaped = value.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    return f"$'{escaped}'"


def _stage(pod: Pod, label: str, origin: Origin) -> tuple[str, Run, int]:
    """One `stage`, its command and log shown; returns (label, run, requests it made)."""
    before = len(origin.requests())
    print(f"\n--- {label} " + "-" * max(0, 60 - len(label)), flush=True)
    print(command_line(pod, "stage", PROGRESS_INTERVAL="1"), flush=True)
    run = pod.run("stage", PROGRESS_INTERVAL="1")
    print(run.stderr, end="", flush=True)
    return label, run, len(origin.requests()) - before


def _summary(runs: list[tuple[str, Run, int]]) -> str:
    header = f"{'run':<34} {'exit':>4} {'files':>5} {'fetched':>7} {'reused':>6} {'requests':>8}"
    lines = [header, "-" * len(header)]
    for label, run, requests in runs:
        stats = run.term.get("stats", {}) if run.term_raw else {}
        lines.append(
            f"{label:<34} {run.returncode:>4} {stats.get('files', '-'):>5} "
            f"{stats.get('fetched', '-'):>7} {stats.get('reused', '-'):>6} {requests:>8}"
        )
    return "\n".join(lines)


def main() -> int:
    keep = os.environ.get("DEMO_DIR")
    workdir = keep or tempfile.mkdtemp(prefix="llmkube-demo-")
    try:
        layout = write_sample_tree(os.path.join(workdir, "origin"))
        # The agent's own default timeouts and retries, not the tests' short ones.
        single, multi = Pod(Path(workdir), budget={}), Pod(Path(workdir), budget={})
        with Origin() as origin:
            origin.serve_directory(os.path.join(workdir, "origin"))
            single.single(f"{origin.url}/single/model.gguf", key="single-key")
            multi.multi(f"{origin.url}/multi/", layout["multi"], key="multi-key")
            runs = [
                _stage(single, "single-file GGUF, cold", origin),
                _stage(multi, "multi-file safetensors, cold", origin),
                _stage(single, "single-file GGUF, warm", origin),
                _stage(multi, "multi-file safetensors, warm", origin),
            ]
        print("\n" + _summary(runs))
        warm_requests = sum(requests for _, _, requests in runs[2:])
        ok = all(run.returncode == 0 for _, run, _ in runs) and warm_requests == 0
        where = single.models if keep else "a temporary directory (set DEMO_DIR to keep it)"
        print(f"\nwarm starts made {warm_requests} requests; cache was in {where}")
        return 0 if ok else 1
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
