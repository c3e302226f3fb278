"""What the torture suite (tests/torture, #10) shares beyond its
fixtures: its scale, the figures it sums over a run, and the LD_PRELOAD shims
it compiles with gcc (a no-op flock standing in for NFS with node-local
locks, a clock offset standing in for a node whose clock is fast). The
fixtures that hand these out are tests/torture/conftest.py's.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.harness.pod import Pod

# `make torture` sets LLMKUBE_TORTURE=full; `make test` and `make torture-quick`
# run the quick scale.
FULL = os.environ.get("LLMKUBE_TORTURE", "quick") == "full"

_FLOCK_SHIM = r"""
#include <sys/file.h>
/* NFS with node-local locks, a broken driver: flock "succeeds" for all. */
int flock(int fd, int operation) { (void)fd; (void)operation; return 0; }
"""

_CLOCK_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
/* A node whose clock is off by LLMKUBE_TEST_CLOCK_SKEW_S seconds. The
   kernel still stamps file times with its own clock, as another node's
   would be on shared storage. */
static long skew(void) {
    const char *s = getenv("LLMKUBE_TEST_CLOCK_SKEW_S");
    return s ? atol(s) : 0;
}
int clock_gettime(clockid_t id, struct timespec *tp) {
    static int (*real)(clockid_t, struct timespec *) = 0;
    if (!real) real = dlsym(RTLD_NEXT, "clock_gettime");
    int r = real(id, tp);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) tp->tv_sec += skew();
    return r;
}
int gettimeofday(struct timeval *tv, void *tz) {
    static int (*real)(struct timeval *, void *) = 0;
    if (!real) real = dlsym(RTLD_NEXT, "gettimeofday");
    int r = real(tv, tz);
    if (r == 0 && tv) tv->tv_sec += skew();
    return r;
}
time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
"""


@dataclass
class Scale:
    full: bool

    def n(self, quick: int, full: int) -> int:
        return full if self.full else quick


@dataclass
class Stats:
    """Figures of the run, summed over the torture tests."""

    counts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **amounts: int) -> None:
        with self.lock:
            for key, value in amounts.items():
                self.counts[key] = self.counts.get(key, 0) + value

    def figures(self, full: bool) -> dict[str, Any]:
        """The run's figures as printed and written at its end."""
        doc: dict[str, Any] = {
            "scale": "full" if full else "quick",
            **dict(sorted(self.counts.items())),
        }
        if self.counts.get("kill_loop_bytes_file"):
            # #21 item 9: bytes served over the file's size, over the kill loop.
            served = self.counts.get("kill_loop_bytes_served", 0)
            doc["kill_loop_ratio"] = round(served / self.counts["kill_loop_bytes_file"], 3)
        return doc


@dataclass(frozen=True)
class Shims:
    noop_flock: str
    clock_skew: str


def build_shims(gcc: str, directory: Path) -> Shims:
    """Compile the shims into `directory` with `gcc`."""
    built = {}
    for name, source in (("noflock", _FLOCK_SHIM), ("clockskew", _CLOCK_SHIM)):
        c_file = directory / f"{name}.c"
        c_file.write_text(source)
        so = directory / f"{name}.so"
        subprocess.run(
            [gcc, "-shared", "-fPIC", "-O2", "-o", str(so), str(c_file), "-ldl"],
            check=True,
            capture_output=True,
        )
        built[name] = str(so)
    return Shims(built["noflock"], built["clockskew"])


def kill_loop(pod: Pod, env: Mapping[str, str], rounds: int, seed: int) -> int:
    """Start the stager, SIGKILL it after 0.3-1.8 s (seeded), `rounds` times
    or until a run finishes first; the kills made (#21 item 9, #29)."""
    rng = random.Random(seed)
    kills = 0
    for _ in range(rounds):
        proc = pod.popen(env=env)
        time.sleep(rng.uniform(0.3, 1.8))
        if proc.poll() is not None:
            pod.finish(proc, 30)
            break  # it finished before the kill: the loop is over
        proc.send_signal(signal.SIGKILL)
        pod.finish(proc, 30)
        kills += 1
    return kills
