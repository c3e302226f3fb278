"""The CLI's warm start, per command: `python bench/warmstart.py [TREE ...]`.

A loopback origin (stdlib http.server) serves one small file; a first
`stage` fills a scratch cache; then `stage`, `plan`, `verify`, `inspect` and
`--help` each run `WARM_RUNS` times (default 20) as `python -m
llmkube_stager` with the cache warm, every tree in turn run by run (A B A B
..., so a busy moment of a shared machine hits each), with the tree as the
working directory and PYTHONPATH. Prints each command's median and best wall
time and its median CPU time (user + sys of the child). Several trees (a
checkout before a change and after it) give a paired comparison.
"""

from __future__ import annotations

import functools
import http.server
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

RUNS = int(os.environ.get("WARM_RUNS", "20"))
COMMANDS = (("stage",), ("plan",), ("verify",), ("inspect",), ("--help",))


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """No access log on the bench's output."""


def timed(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """(wall s, cpu s) of one run; a failed run stops the bench."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, check=False)
    wall_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]!r}")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall_s, cpu_s


def main(trees: list[str]) -> None:
    work = tempfile.mkdtemp(prefix="warmstart-")
    try:
        measure(trees, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(trees: list[str], work: str) -> None:
    www = os.path.join(work, "www")
    os.makedirs(os.path.join(www, "m"))
    with open(os.path.join(www, "m", "model.gguf"), "wb") as handle:
        handle.write(os.urandom(100_000))
    handler = functools.partial(Quiet, directory=www)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": work, "LANG": "C.UTF-8"}
    envs = {}
    for i, tree in enumerate(trees):
        cache = os.path.join(work, f"cache{i}")
        envs[tree] = {
            **base,
            "PYTHONPATH": tree,
            "MODEL_SOURCE": f"http://127.0.0.1:{server.server_port}/m/model.gguf",
            "CACHE_DIR": cache,
            "MODEL_PATH": os.path.join(cache, "model.gguf"),
            "LLMKUBE_TERMINATION_LOG": os.path.join(work, f"term{i}"),
        }
        timed([sys.executable, "-m", "llmkube_stager", "stage"], envs[tree], tree)
    server.shutdown()  # a warm run asks nothing: a request now would fail it
    samples: dict[tuple[str, tuple[str, ...]], list[tuple[float, float]]] = {}
    for _ in range(RUNS):
        for args in COMMANDS:
            for tree in trees:
                cmd = [sys.executable, "-m", "llmkube_stager", *args]
                samples.setdefault((tree, args), []).append(timed(cmd, envs[tree], tree))
    print(f"{RUNS} runs each, load average {os.getloadavg()[0]:.1f}, {sys.executable}")
    print(f"{'command':10} {'median ms':>10} {'best ms':>8} {'cpu ms':>7}  tree")
    for args in COMMANDS:
        for tree in trees:
            walls = [w for w, _ in samples[(tree, args)]]
            cpus = [c for _, c in samples[(tree, args)]]
            print(
                f"{' '.join(args):10} {statistics.median(walls) * 1000:10.1f} "
                f"{min(walls) * 1000:8.1f} {statistics.median(cpus) * 1000:7.1f}  {tree}"
            )


if __name__ == "__main__":
    main([os.path.abspath(t) for t in sys.argv[1:]] or [os.getcwd()])
