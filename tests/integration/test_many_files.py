"""Many-file models (#16 item 3): several files in flight, each published
whole and right, every failure reported, connections reused, and a cost per
file that does not grow with the file count (one directory listing per
directory, not three per file). Speeds are `make bench`'s (bench/manyfile.py)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter

import pytest

from tests.harness.disk import partials, record_of
from tests.harness.origin import Fault, Origin
from tests.harness.pod import Pod
from tests.harness.relay import CountingRelay
from tests.harness.sample import payload

REPO = "/org/repo/resolve/main"
KIB = 1024


def serve(origin: Origin, count: int, folder: str = "") -> dict[str, bytes]:
    files = {
        (f"{folder}/f{i:03d}.json" if folder else f"f{i:03d}.json"): payload(
            4 * KIB + 97 * i, seed=i
        )
        for i in range(count)
    }
    for rel, data in files.items():
        origin.put(f"{REPO}/{rel}", data)
    return files


def assert_published(pod: Pod, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        dest = pod.dest(rel)
        assert dest.read_bytes() == data, rel
        assert record_of(dest) == str(len(data)), rel
        assert partials(dest) == {}, rel


@pytest.mark.parametrize("in_flight", [1, 8])
def test_other_files_are_fetched_while_one_waits(origin, pod, in_flight: int) -> None:
    """A slow answer for one file does not hold the others back: they are
    published while its GET is still unanswered (and one at a time, none
    is: the case that shows this test can fail)."""
    files = serve(origin, 12)
    slow = f"{REPO}/f001.json"
    origin.set_fault(slow, Fault(methods=("GET",), delay_s=3.0))
    overlapped = threading.Event()
    finished = threading.Event()

    def watch() -> None:
        while not finished.is_set():
            log = origin.requests(method="GET")
            at = next((i for i, r in enumerate(log) if r.path == slow), None)
            # Another file asked for after the slow one and answered while
            # the slow one is not.
            if at is not None and log[at].status == 0 and any(r.status == 200 for r in log[at:]):
                overlapped.set()
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    env = pod.multi_env(
        origin.url + REPO + "/",
        files,
        LLMKUBE_FILES_IN_FLIGHT=str(in_flight),
        LLMKUBE_STALL_TIMEOUT="10",  # the slow answer is not a stall
    )
    try:
        pod.stage(env).ok(files=12, fetched=12)
    finally:
        finished.set()
        watcher.join(5)
    assert_published(pod, files)
    assert overlapped.is_set() is (in_flight > 1)


def test_files_in_flight_reuse_their_connections(origin, pod) -> None:
    files = serve(origin, 24)
    relay = CountingRelay(origin.url)
    try:
        env = pod.multi_env(relay.url + REPO + "/", files, LLMKUBE_FILES_IN_FLIGHT="4")
        pod.stage(env).ok(files=24, fetched=24)
    finally:
        relay.close()
    assert_published(pod, files)
    assert len(origin.requests()) == 2 * len(files)  # a HEAD and a GET each
    # At most one connection for probes and one for bodies per file in
    # flight (+1: the first probe, before the files go in flight); a
    # connection per request would be 48.
    assert relay.connections <= 2 * 4 + 1, relay.connections


def test_each_failed_file_in_flight_is_reported_and_the_first_raised(origin, pod) -> None:
    files = serve(origin, 8)
    for rel in ("f001.json", "f002.json"):
        origin.remove(f"{REPO}/{rel}")
        # Slow 404s: both are in flight before either fails.
        origin.set_fault(f"{REPO}/{rel}", Fault(status=404, delay_s=1.0))
    # A stall budget well past the 404s' delay: at the harness's 1 s they
    # raced it, and a loaded machine timed one out (ModelSourceUnreachable).
    env = pod.multi_env(
        origin.url + REPO + "/", files, LLMKUBE_FILES_IN_FLIGHT="4", LLMKUBE_STALL_TIMEOUT="5"
    )

    run = pod.stage(env)

    assert run.error is not None, str(run)
    run.failed("ModelSourceNotFound", exit_code=run.error.exit_code, retryable=False)
    assert run.term["file"] == "f001.json"  # the first in MODEL_FILES order
    for rel in ("f001.json", "f002.json"):
        assert run.has_line(f"failed to download {rel}"), run.stderr
        assert not pod.dest(rel).exists()
    # What was fetched is whole and right; nothing half-written is published.
    for rel, data in files.items():
        dest = pod.dest(rel)
        if dest.exists():
            assert dest.read_bytes() == data and record_of(dest) == str(len(data))


def test_a_directory_is_listed_once_per_run_not_once_per_file(origin, pod) -> None:
    """The cost per file stays flat: before, each file's transfer listed its
    directory three times (stale partials, adoption, a dead writer's
    partial), O(files^2) for a model of 2,000 files in one directory."""
    files = serve(origin, 60)
    listed: Counter[str] = Counter()
    counting = threading.Event()

    def audit(event: str, args: tuple[object, ...]) -> None:
        if counting.is_set() and event in ("os.listdir", "os.scandir") and args:
            listed[os.fsdecode(str(args[0]))] += 1

    sys.addaudithook(audit)  # cannot be removed: gated by `counting`
    counting.set()
    try:
        pod.stage(pod.multi_env(origin.url + REPO + "/", files)).ok(files=60, fetched=60)
    finally:
        counting.clear()
    assert_published(pod, files)
    assert listed[str(pod.cache_dir)] <= 3, listed  # partials once, the sweep's walk


def test_a_file_with_a_partial_beside_it_still_resumes(origin, pod) -> None:
    """Only a destination that had nothing beside it skips the listing: a
    partial left by an earlier run is still found and resumed."""
    files = serve(origin, 6)
    data = payload(512 * KIB, seed=99)
    origin.put(f"{REPO}/big.bin", data)
    files["big.bin"] = data
    env = pod.multi_env(origin.url + REPO + "/", files)
    origin.set_fault(f"{REPO}/big.bin", Fault(methods=("GET",), truncate_after=200 * KIB))
    pod.stage(env, LLMKUBE_RETRIES="0").failed()
    assert list(partials(pod.dest("big.bin")).values()) == [200 * KIB]
    origin.set_fault(f"{REPO}/big.bin", None)
    origin.clear_log()

    pod.stage(env).ok()

    assert_published(pod, files)
    resumed = origin.requests(f"{REPO}/big.bin", "GET")
    assert [r.headers.get("range") for r in resumed] == [f"bytes={200 * KIB}-"]
