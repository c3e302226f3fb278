"""#14 item 7: after a rollback to the old scripts, nothing of the
agent's partials stays forever. The agent leaves partials of every kind for
real (a sequential transfer stopped with SIGTERM, a widened ranged transfer
killed with SIGKILL), then the scripts' own sweep lines (spec §10, §6.1) run
verbatim in `sh`, and none of the agent's partials is left. What does stay is
listed in docs/migration.md (records, stamps, lock, validators)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from llmkube_stager.layout import (
    AGENT_PARTIAL_SUFFIXES,
    atomic_tmp_path,
    legacy_partial_path,
    parse_partial,
)
from tests.harness.origin import Origin
from tests.harness.pod import Pod, wait_for
from tests.harness.sample import gguf_like

pytestmark = pytest.mark.e2e

# spec §6.1 / §10, as the scripts run them.
MULTI_FILE_SWEEP = """find "$CACHE_DIR" -name '*.tmp' -delete"""
KEEP_ONE_SWEEP = (
    """find "$(dirname "$MODEL_PATH")" -maxdepth 1 -name '*.tmp' """
    """! -name "$(basename "$MODEL_PARTIAL")" -delete"""
)
ONCHANGE_DEBRIS_SWEEP = """find "$(dirname "$MODEL_PATH")" -maxdepth 1 -name '*.tmp' -delete"""
# The L4 prologue: the table of §10 (patterns, -mmin +10, the cache dir).
PROLOGUE_SWEEP = (
    """find "$CACHE_DIR" \\( -name '*.llmkube-tmp.??????' -o -name '*.llmkube-size.??????' """
    """-o -name '*.sha256-rejected.??????' \\) -mmin +10 -delete"""
)


def shell(script: str, **env: str) -> None:
    done = subprocess.run(
        ["sh", "-c", script],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def agent_debris(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.name.endswith(AGENT_PARTIAL_SUFFIXES) or ".llmkube-tmp." in p.name
    )


def kinds_of(dest: Path) -> set[str]:
    """The kinds of partial of `dest` on disk (layout.parse_partial)."""
    if not dest.parent.is_dir():
        return set()
    found = (parse_partial(str(dest), str(p)) for p in dest.parent.iterdir())
    return {kind for _key, kind in filter(None, found)}


def _partial_bytes(dest: Path) -> int:
    if not dest.parent.is_dir():
        return 0
    sizes = [
        p.stat().st_size
        for p in dest.parent.iterdir()
        if (parsed := parse_partial(str(dest), str(p))) and parsed[1] == "part"
    ]
    return max(sizes, default=0)


def _kill_during_ranges(pod: Pod, origin: Origin, rel: str) -> None:
    """A widened transfer of `rel`, SIGKILLed: a sparse data file + journal."""
    # Slow enough that the journal (written every 2 s) exists before the end.
    data = gguf_like(64 << 20, seed=7)
    origin.put("/r/" + rel, data, rate_bytes_per_s=4 << 20)
    cache = pod.multi(origin.url + "/r/", [rel])
    proc = pod.popen("stage", env={"LLMKUBE_CONNECTIONS": "4"})
    both = {"segs", "journal"}
    wait_for(lambda: both <= kinds_of(cache / rel), 30, "a data file and its journal", proc)
    proc.kill()
    proc.wait()


def _stop_sequential(pod: Pod, origin: Origin, rel: str) -> None:
    """A one-connection transfer of `rel`, stopped by SIGTERM: a partial."""
    # Larger than one pipeline buffer, stopped once the partial holds bytes
    # (a SIGTERM before the first byte leaves no partial: it flaked so).
    origin.put("/r/" + rel, gguf_like(10 << 20, seed=8), rate_bytes_per_s=2 << 20)
    cache = pod.multi(origin.url + "/r/", [rel])
    proc = pod.popen("stage", env={"LLMKUBE_CONNECTIONS": "1"})
    wait_for(lambda: _partial_bytes(cache / rel) > 0, 20, "a partial with bytes", proc)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)


def _old_atomic_temp(target: Path) -> Path:
    temp = Path(atomic_tmp_path(str(target)))
    temp.write_text("123")
    old = time.time() - 3600
    os.utime(temp, (old, old))
    return temp


def test_the_scripts_multi_file_sweeps_remove_every_agent_partial(pod: Pod, origin: Origin) -> None:
    origin.put("/r/config.json", b'{"a": 1}')
    cache = pod.multi(origin.url + "/r/", ["config.json"])
    assert pod.run("stage").returncode == 0  # a published file, its record, the lock
    _kill_during_ranges(pod, origin, "shards/model-1.safetensors")
    _stop_sequential(pod, origin, "shards/model-2.safetensors")
    _old_atomic_temp(cache / "config.json.llmkube-size")
    made = agent_debris(cache)
    kinds = {
        k
        for k in ("llmkube-part", "llmkube-segs", "llmkube-journal", "llmkube-tmp")
        for p in made
        if k in p
    }
    assert len(kinds) == 4, made

    # Rolled back: the scripts' next successful multi-file start.
    shell(PROLOGUE_SWEEP + " && " + MULTI_FILE_SWEEP, CACHE_DIR=str(cache))

    assert agent_debris(cache) == []
    left = sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())
    # The run record (every source's validators and the source, #46) stays.
    expected = [".llmkube-validators", ".llmkube.lock", "config.json", "config.json.llmkube-size"]
    assert left == expected, left


def test_the_scripts_single_file_sweeps_remove_the_agents_partial(pod: Pod, origin: Origin) -> None:
    # Larger than one pipeline buffer (4 MiB), so a partial holds bytes
    # mid-transfer: a SIGTERM before the first byte leaves no partial worth
    # keeping (waiting for a name only, it flaked that way under load).
    data = gguf_like(10 << 20, seed=9)
    origin.put("/m/model.gguf", data, rate_bytes_per_s=2 << 20)
    dest = pod.single(origin.url + "/m/model.gguf")
    proc = pod.popen("stage", env={"LLMKUBE_CONNECTIONS": "1"})
    wait_for(lambda: _partial_bytes(dest) > 0, 20, "a partial with bytes", proc)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    (agent_partial,) = agent_debris(dest.parent)

    # The scripts' own resumable partial of this file, which keep-one spares.
    etag = next(iter(origin.requests("/m/model.gguf"))).headers.get("etag", "")
    theirs = Path(legacy_partial_path(str(dest), f"CL{len(data)}ET{etag}"))
    theirs.write_bytes(data[:100])
    shell(KEEP_ONE_SWEEP, MODEL_PATH=str(dest), MODEL_PARTIAL=str(theirs))
    assert agent_debris(dest.parent) == [], agent_partial
    assert theirs.exists(), "keep-one must spare the scripts' own partial"

    _stop_again = pod.popen("stage", env={"LLMKUBE_CONNECTIONS": "1"})
    wait_for(lambda: _partial_bytes(dest) > 0, 20, "a partial with bytes", _stop_again)
    _stop_again.send_signal(signal.SIGTERM)
    _stop_again.communicate(timeout=30)
    shell(ONCHANGE_DEBRIS_SWEEP, MODEL_PATH=str(dest))
    assert agent_debris(dest.parent) == []


def test_a_scripts_sweep_during_a_mixed_rollout_never_breaks_a_live_agent(
    pod: Pod, origin: Origin
) -> None:
    """The price of sweepable names: during a rollout or rollback, a scripts
    pod's `*.tmp` sweep can delete a live agent's partial. The agent notices
    at publish (its name is gone) and stages the file again: the published
    bytes are still exactly the origin's."""
    # Larger than one pipeline buffer (4 MiB): the receiver hands a buffer
    # to the writer only when it is full, so a smaller file would reach its
    # partial in one write just before the publish, and the sweep below
    # could miss the window (it did, once in a full run).
    data = gguf_like(10 << 20, seed=10)
    origin.put("/m/model.gguf", data, rate_bytes_per_s=4 << 20)
    dest = pod.single(origin.url + "/m/model.gguf")
    proc = pod.popen("stage", env={"LLMKUBE_CONNECTIONS": "1"})
    # Mid-transfer: the partial holds bytes of the response being received
    # (swept before the first request, the agent would just start afresh).
    wait_for(lambda: _partial_bytes(dest) > 0, 20, "a partial with bytes", proc)
    shell(ONCHANGE_DEBRIS_SWEEP, MODEL_PATH=str(dest))
    assert "part" not in kinds_of(dest)
    origin.put("/m/model.gguf", data)  # same bytes and ETag, no cap: finish quickly
    run = pod.finish(proc, timeout=60)
    assert run.returncode == 0, str(run)
    assert dest.read_bytes() == data
    # It staged again from a fresh partial: a second request (or, when the
    # sweep lands between two attempts, an attempt the origin cut short,
    # which its log does not record) and never the swept inode.
    assert origin.requests("/m/model.gguf", "GET"), str(run)
