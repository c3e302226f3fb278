"""#30 item 4: a rollout with both in one cache. While the operator's
Deployments roll, script pods of other Models (curl on this host) share the
cache directory with agent pods (the image, run by the same commands
through its `sh`; the suite's commands, tests/harness/operator_commands.py,
stand for the operator's): the cache directory is keyed on the source
alone, so two Models on one source share it, and the scripts sweep `*.tmp`
there without a lock. The agent must never publish a wrong file, and must
not lose its work to a sweep silently; an agent and a script staging the
same file at once end with a right file."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.harness.image import ImagePod
from tests.harness.operator_commands import multi_file, single_file
from tests.harness.origin import Fault, Origin
from tests.harness.pod import Run
from tests.harness.sample import gguf_like

pytestmark = [pytest.mark.image, pytest.mark.usefixtures("host_curl")]

DATA = gguf_like(2 << 20, seed=304)
# Slow enough that the sweep lands mid-transfer, whatever the agent's
# connection count (each response is paced on its own).
SLOW = Fault(rate_bytes_per_s=192 << 10, methods=("GET",))
# The operator's multi-file commands sweep the cache directory's partials
# before their loop, without a lock; the suite's command, run on the host
# here as a script pod would, gets the same prologue.
SWEEP = "find \"$CACHE_DIR\" -name '*.tmp' -delete\n"


class Background:
    """An image run in a thread (ImagePod.sh blocks)."""

    def __init__(self, pod: ImagePod, script: str, env: dict[str, str]) -> None:
        self.run: Run | None = None
        self._thread = threading.Thread(target=self._go, args=(pod, script, env), daemon=True)
        self._thread.start()

    def _go(self, pod: ImagePod, script: str, env: dict[str, str]) -> None:
        self.run = pod.sh(script, env=env, timeout=180)

    def join(self) -> Run:
        self._thread.join(200)
        assert self.run is not None, "the image run did not end"
        return self.run

    def alive(self) -> bool:
        return self._thread.is_alive()


def _wait(predicate: object, what: str, job: Background, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert job.alive(), f"the agent ended before {what}: {job.join()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _host_script(
    script: str, env: dict[str, str], models: Path
) -> subprocess.CompletedProcess[str]:
    """A script pod of the operator's default image: the host's sh and curl,
    the cache volume's path mapped onto the same directory the image uses."""
    text = script.replace("/models", str(models))
    mapped = {k: v.replace("/models", str(models)) for k, v in env.items()}
    return subprocess.run(
        ["sh", "-c", text],
        env={"PATH": "/usr/bin:/bin", **mapped},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_a_script_pods_sweep_mid_transfer_never_costs_a_right_file(
    pod: ImagePod, origin: Origin
) -> None:
    origin.put("/m/model.gguf", DATA)
    origin.set_fault("/m/model.gguf", SLOW)
    origin.put("/other/resolve/main/config.json", b"{}")
    env = {
        "MODEL_SOURCE": origin.url + "/m/model.gguf",
        "CACHE_DIR": "/models/shared",
        "MODEL_PATH": "/models/shared/model.gguf",
    }
    job = Background(pod, single_file("http", True), env)
    shared = pod.models / "shared"
    _wait(lambda: any(shared.glob("*.tmp")), "the agent's partial", job)

    # Another Model's script pod on the same cache directory: its prologue
    # (the operator's multi-file commands begin so) takes the agent's partial.
    other = _host_script(
        SWEEP + multi_file(False, cached=True),
        {
            "MODEL_SOURCE": origin.url + "/other/resolve/main/",
            "CACHE_DIR": "/models/shared",
            "MODEL_FILES": "config.json",
        },
        pod.models,
    )
    assert other.returncode == 0, other.stderr
    run = job.join()
    assert run.returncode == 0, str(run)
    assert (shared / "model.gguf").read_bytes() == DATA
    assert (shared / "config.json").read_bytes() == b"{}"
    # The sweep may find the partial before the agent has put a byte in it
    # (it keeps its name for a fresh file): nothing lost. When work was lost
    # (the origin sent more than one body), the agent said so.
    sent = sum(r.body_bytes for r in origin.requests(path="/m/model.gguf", method="GET"))
    assert sent >= len(DATA)
    if sent > len(DATA):
        assert "removed by a script's *.tmp sweep); staging it again" in run.stderr, (
            "the lost partial must be noticed and named, not silent"
        )


def test_an_agent_and_a_script_staging_the_same_file_end_with_a_right_file(
    pod: ImagePod, origin: Origin
) -> None:
    origin.put("/m/model.gguf", DATA)
    origin.set_fault("/m/model.gguf", SLOW)
    env = {
        "MODEL_SOURCE": origin.url + "/m/model.gguf",
        "CACHE_DIR": "/models/same",
        "MODEL_PATH": "/models/same/model.gguf",
    }
    script = single_file("http", True)
    dest = pod.models / "same" / "model.gguf"
    seen: set[int] = set()
    job = Background(pod, script, env)
    _wait(lambda: any((pod.models / "same").glob("*.tmp")), "the agent's partial", job)

    watching = True

    def watch() -> None:  # every size the served name ever had
        while watching:
            with contextlib.suppress(FileNotFoundError):
                seen.add(dest.stat().st_size)
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    script_run = _host_script(script, env, pod.models)
    run = job.join()
    watching = False
    watcher.join()
    assert run.returncode == 0, str(run)
    if script_run.returncode != 0:
        # Its `.tmp` was swept or replaced under it: its restart finds the
        # agent's file (IfNotPresent), as a kubelet would restart it.
        again = _host_script(script, env, pod.models)
        assert again.returncode == 0 and "kept: " in again.stdout, again
    assert dest.read_bytes() == DATA
    assert seen <= {len(DATA)}, f"the served name held a wrong size: {sorted(seen)}"
