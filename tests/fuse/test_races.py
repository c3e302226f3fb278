"""Writers racing on shared storage (spec §9.1, §9.3; scenario 43, LLMKube #2158, #2254).

Two bindfs mounts of one backing directory behave like two nodes mounting
one FUSE volume: flock excludes within a mount but not across mounts (the
first test proves that fact on this machine). The stagers race through the
two mounts against a slow loopback origin; whatever the interleaving, the
published file must be byte-identical to the origin. Off FUSE, the flock
serializes writers: one downloads, the others wait and reuse.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pytest

from llmkube_stager.layout import private_partial_path, validator_of
from tests.harness.disk import LOCK_NAME, debris, make_old, names, record_of, seed
from tests.harness.mounts import TwoNodes
from tests.harness.origin import Fault, Origin, gets
from tests.harness.pod import Pod, Run, single_env, wait_for
from tests.harness.proxy import ForwardProxy
from tests.harness.sample import payload

SIZE = 256 * 1024
RATE = 1024 * 1024  # ~0.25 s per transfer: long enough for two racers to overlap
ROUNDS = 10
SEEDED_PREFIX = 128 * 1024
# The seeded partial is the single-connection kind (`.llmkube-part`): pin
# that transfer path, whatever the default number of connections becomes.
ONE_CONNECTION = {"LLMKUBE_CONNECTIONS": "1"}


def _seed_idle_partial(dest: Path, data: bytes, etag: str) -> Path:
    """An idle partial of a dead writer "deadbeef": the right first bytes,
    untouched for 60 s (partials.IDLE_S is 30 s), so every racer may adopt it."""
    partial = Path(private_partial_path(str(dest), validator_of(len(data), etag), "deadbeef"))
    return seed(partial, data[:SEEDED_PREFIX], age_s=60)


def _assert_published_exactly(dest: Path, data: bytes, runs: list[Run]) -> None:
    got = dest.read_bytes()
    assert len(got) == len(data), f"published {len(got)} of {len(data)} bytes"
    assert got == data, "published bytes differ from the origin (mixed or zero-filled)"
    assert record_of(dest) == str(len(data))
    assert debris(dest.parent) == [], names(dest.parent)
    assert any(r.returncode == 0 for r in runs), "\n".join(map(str, runs))


# -- the fact the design rests on ----------------------------------------------------


def test_flock_excludes_within_a_mount_but_not_across_mounts(two_nodes: TwoNodes) -> None:
    via1 = two_nodes.node1 / LOCK_NAME
    via2 = two_nodes.node2 / LOCK_NAME
    holder = os.open(via1, os.O_RDWR | os.O_CREAT, 0o664)
    same_node = os.open(via1, os.O_RDWR)
    other_node = os.open(via2, os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(BlockingIOError):
            fcntl.flock(same_node, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # The same file on "another node": the lock does not exclude.
        fcntl.flock(other_node, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert os.stat(via1).st_size == os.stat(via2).st_size == 0
        assert (two_nodes.backing / LOCK_NAME).exists()
    finally:
        for fd in (holder, same_node, other_node):
            os.close(fd)


# -- scenario 43: stagers on two nodes ------------------------------------------------


def _race_round(
    tmp_path: Path, origin: Origin, nodes: TwoNodes, i: int, *, seeded: bool
) -> tuple[Path, bytes, list[Run]]:
    data = payload(SIZE, 1000 + i)
    path = f"/r{i}/model.gguf"
    etag = f'"round-{i}"'
    origin.put(path, data, etag=etag)
    origin.set_fault(path, Fault(rate_bytes_per_s=RATE))
    dest = nodes.backing / f"k{i}" / "model.gguf"
    dest.parent.mkdir()
    if seeded:
        _seed_idle_partial(dest, data, etag)
    pods = [
        Pod(
            tmp_path,
            {**single_env(origin.url + path, node / f"k{i}"), **ONE_CONNECTION},
            stager=True,
        )
        for node in (nodes.node1, nodes.node2)
    ]
    procs = [(pod, pod.popen("stage")) for pod in pods]
    runs = [pod.finish(proc) for pod, proc in procs]
    return dest, data, runs


def test_scenario_43_two_stagers_on_two_nodes_publish_the_exact_file(
    tmp_path: Path, origin: Origin, two_nodes: TwoNodes
) -> None:
    """Single-file GGUF on FUSE, two stagers on different nodes at once:
    they must not both resume into one partial; the published file is the
    origin's, every round."""
    overlapped = 0
    for i in range(ROUNDS):
        dest, data, runs = _race_round(tmp_path, origin, two_nodes, i, seeded=False)
        for run in runs:
            run.ok()
        _assert_published_exactly(dest, data, runs)
        # Both transferred (a real race), or the later one found the file.
        transfers = len(gets(origin, f"/r{i}/model.gguf"))
        assert transfers in (1, 2)
        overlapped += transfers == 2
    assert overlapped >= ROUNDS // 2, f"only {overlapped} of {ROUNDS} rounds were real races"


def test_scenario_43_racers_adopting_one_idle_partial_publish_the_exact_file(
    tmp_path: Path, origin: Origin, two_nodes: TwoNodes
) -> None:
    """An idle partial of a dead writer is there: both racers try to adopt
    it; only one rename can win. No round may publish a truncated, spliced or
    zero-filled file. (A racer whose adopted partial is taken away in turn
    may fail: see the two strict xfails below.)"""
    for i in range(ROUNDS):
        dest, data, runs = _race_round(tmp_path, origin, two_nodes, 100 + i, seeded=True)
        _assert_published_exactly(dest, data, runs)
        resumed = [r for r in gets(origin, f"/r{100 + i}/model.gguf") if "range" in r.headers]
        assert resumed, "the seeded partial was resumed by somebody"


def _adopt_away(
    tmp_path: Path, origin: Origin, nodes: TwoNodes, seed: int, *, first: str
) -> tuple[Path, bytes, Run, Run]:
    """The seeded race, deterministically: the racer on node `first` ("a":
    node 1, "b": node 2) adopts the idle partial, then waits for its GET
    (slow origin: first byte after 3 s); the racer on the other node sees
    that freshly adopted partial, still 60 s old by mtime, adopts it in turn
    and runs to the end; then the first one finishes. Returns the
    destination, the origin's bytes and the runs of A and B."""
    data = payload(4 * SEEDED_PREFIX, seed)
    origin.put("/m.gguf", data, etag='"v1"')
    origin.set_fault("/m.gguf", Fault(delay_s=3.0, methods=("GET",), times=1))
    dest = nodes.backing / "k" / "model.gguf"
    idle = _seed_idle_partial(dest, data, '"v1"')
    pods = {
        name: Pod(tmp_path, single_env(origin.url + "/m.gguf", node / "k"), stager=True)
        for name, node in (("a", nodes.node1), ("b", nodes.node2))
    }
    for pod in pods.values():
        pod.env.update(ONE_CONNECTION)
    later = "b" if first == "a" else "a"
    pods[first].env["LLMKUBE_STALL_TIMEOUT"] = "10"  # the first byte comes after 3 s, on purpose
    proc = pods[first].popen("stage")
    wait_for(lambda: not idle.exists(), 15, f"racer {first.upper()} adopted the idle partial", proc)
    runs = {later: pods[later].run("stage")}
    runs[first] = pods[first].finish(proc)
    return dest, data, runs["a"], runs["b"]


def test_adopted_partial_taken_away_never_publishes_zero_filled_bytes(
    tmp_path: Path, origin: Origin, two_nodes: TwoNodes
) -> None:
    """Deterministic interleaving of the seeded race: racer A adopts the idle
    partial, then waits for its GET (slow origin: first byte after 3 s);
    racer B on the other node sees A's freshly adopted partial, still 60 s
    old by mtime, and adopts it too. Both exit 0; A publishes last."""
    dest, data, run_a, run_b = _adopt_away(tmp_path, origin, two_nodes, 77, first="a")
    assert run_b.returncode == 0, str(run_b)
    assert run_a.returncode == 0, str(run_a)
    got = dest.read_bytes()
    assert got[:SEEDED_PREFIX] != bytes(SEEDED_PREFIX), "a zero-filled prefix was published"
    assert got == data


def test_racer_whose_partial_was_adopted_away_recovers(
    tmp_path: Path, origin: Origin, caching_nodes: TwoNodes
) -> None:
    """Same interleaving on mounts that cache directory entries (as real
    FUSE drivers do): B adopts the idle partial, A on the other node adopts
    it from B while B waits for its first byte."""
    dest, data, run_a, run_b = _adopt_away(tmp_path, origin, caching_nodes, 78, first="b")
    assert dest.read_bytes() == data
    assert run_a.returncode == 0, str(run_a)
    assert "Traceback" not in run_b.stderr, str(run_b)
    assert run_b.returncode == 0, str(run_b)


def test_stager_against_serving_pods_on_two_nodes(
    tmp_path: Path, origin: Origin, two_nodes: TwoNodes
) -> None:
    """A stager on node 1, a serving pod on node 2 started before, during and
    after the transfer. The serving pod never transfers (it reaches the
    origin, the same source as the stager's, only through a proxy that sees
    zero requests) and either refuses or starts from the complete file;
    the published file is the origin's."""
    with ForwardProxy() as serving_proxy:
        for i, delay in enumerate((0.0, 0.1, 0.2, 0.4, 1.0)):
            data = payload(SIZE, 2000 + i)
            path = f"/s{i}/model.gguf"
            origin.put(path, data)
            origin.set_fault(path, Fault(rate_bytes_per_s=RATE))
            key = f"s{i}"
            stager = Pod(
                tmp_path, single_env(origin.url + path, two_nodes.node1 / key), stager=True
            )
            serving = Pod(tmp_path, single_env(origin.url + path, two_nodes.node2 / key))
            serving.env.update(HTTP_PROXY=serving_proxy.url, NO_PROXY="")
            proc = stager.popen("stage")
            time.sleep(delay)
            served = serving.run("stage")
            staged = stager.finish(proc)

            staged.ok()
            dest = two_nodes.backing / key / "model.gguf"
            _assert_published_exactly(dest, data, [staged])
            assert "Downloading model" not in served.stderr
            if served.returncode == 0:
                assert "Model already cached, skipping download" in served.stderr
            else:
                served.failed("ModelCacheLockUnsupported")
        assert serving_proxy.requests() == []


# -- off FUSE: the flock serializes writers -----------------------------------------


def test_off_fuse_racing_writers_one_downloads_the_others_wait_and_reuse(
    tmp_path: Path, origin: Origin
) -> None:
    data = payload(1024 * 1024, 3000)
    origin.put("/m.gguf", data)
    origin.set_fault("/m.gguf", Fault(rate_bytes_per_s=RATE))
    root = tmp_path / "models" / "k"
    env = single_env(origin.url + "/m.gguf", root)
    pods = [Pod(tmp_path, env, stager=(n % 2 == 0)) for n in range(4)]
    procs = [(pod, pod.popen("stage")) for pod in pods]
    runs = [pod.finish(proc) for pod, proc in procs]

    for run in runs:
        run.ok()
    assert len(gets(origin, "/m.gguf")) == 1, "exactly one writer downloads"
    downloaded = [r for r in runs if "Downloading model..." in r.stderr]
    reused = [r for r in runs if "Model already cached, skipping download" in r.stderr]
    assert len(downloaded) == 1 and len(reused) == 3, "\n".join(map(str, runs))
    assert any("Waiting for another writer" in r.stderr for r in reused)
    assert (root / "model.gguf").read_bytes() == data
    assert record_of(root / "model.gguf") == str(len(data))
    assert (root / LOCK_NAME).is_file()
    assert debris(root) == []


def _hold_lock(root: Path) -> int:
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o664)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_off_fuse_writer_logs_while_waiting_and_fails_with_lock_timeout(
    tmp_path: Path, origin: Origin
) -> None:
    origin.put("/m.gguf", payload(4096, 1))
    root = tmp_path / "models" / "k"
    fd = _hold_lock(root)
    try:
        started = time.monotonic()
        run = Pod(tmp_path, single_env(origin.url + "/m.gguf", root)).run(
            "stage", env={"LLMKUBE_LOCK_TIMEOUT": "1"}
        )
        elapsed = time.monotonic() - started
    finally:
        os.close(fd)
    doc = run.failed("ModelCacheLockTimeout").term
    assert "Waiting for another writer to finish staging into this cache directory" in run.stderr
    assert "LLMKUBE_LOCK_TIMEOUT" in doc["remedy"]
    assert doc["retryable"] is True
    assert 1.0 <= elapsed < 10
    assert origin.requests() == [], "nothing is fetched without the lock"
    assert not (root / "model.gguf").exists()
    assert debris(root) == []


def test_off_fuse_writer_waits_for_the_lock_then_stages(tmp_path: Path, origin: Origin) -> None:
    data = payload(8192, 2)
    origin.put("/m.gguf", data)
    root = tmp_path / "models" / "k"
    fd = _hold_lock(root)
    pod = Pod(tmp_path, single_env(origin.url + "/m.gguf", root))
    pod.env["LLMKUBE_LOCK_TIMEOUT"] = "30"
    try:
        proc = pod.popen("stage")
        time.sleep(1.0)
        assert proc.poll() is None, "the writer must wait for the lock"
        assert origin.requests() == []
    finally:
        os.close(fd)
    run = pod.finish(proc)
    run.ok()
    assert "Waiting for another writer" in run.stderr
    assert (root / "model.gguf").read_bytes() == data


def test_warm_reader_off_fuse_takes_no_lock_while_a_writer_holds_it(
    tmp_path: Path, origin: Origin
) -> None:
    """A pod that only reads a warm cache takes no lock and writes nothing."""
    data = payload(8192, 4)
    root = tmp_path / "models" / "k"
    seed(root / "model.gguf", data, record=len(data))
    fd = _hold_lock(root)
    make_old(root / LOCK_NAME, 3600)
    before = {n: os.stat(root / n).st_mtime_ns for n in names(root)}
    try:
        run = Pod(tmp_path, single_env(origin.url + "/m.gguf", root)).run(
            "stage", env={"LLMKUBE_LOCK_TIMEOUT": "1"}
        )
    finally:
        os.close(fd)
    run.ok()
    assert "Waiting for another writer" not in run.stderr
    assert {n: os.stat(root / n).st_mtime_ns for n in names(root)} == before
    assert origin.requests() == []
