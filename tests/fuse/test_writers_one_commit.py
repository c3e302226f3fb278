"""#29 item 1: writers that no commit claim covers. Two unsharded prefetch
writers of one Hugging Face model on a FUSE cache (two bindfs mounts of one
directory: two nodes, where flock does not exclude: a Job's pod on a
partitioned node and its replacement, or two Jobs for one model) while
`main` moves between their listings. Pause points (tests/harness/pause.py)
interleave their publishes: writer A publishes two files of commit 1 and
stops, writer B publishes its first file of commit 2 and stops, B goes on,
then A does.

Before the fix both exited 0, the cache held files of both commits, the run
record named one commit beside the other commit's sha256 for files holding
different bytes, and `verify` and a serving pod's warm `stage` accepted the
set."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from llmkube_stager.cache.runrecord import read_run_record
from llmkube_stager.cache.writers import WRITERS_NAME
from tests.harness.hub import FakeHub
from tests.harness.mounts import TwoNodes
from tests.harness.pause import await_stopped, pause_flags
from tests.harness.pod import Pod, Run
from tests.harness.sample import KIB, payload
from tests.harness.sharded_hub import REPO, env

# Patient clients: a listing held in the hub's hook must not time out and
# be asked again (at the moved branch) however slow the other start is.
PATIENT = {"LLMKUBE_STALL_TIMEOUT": "30", "LLMKUBE_CONNECT_TIMEOUT": "5"}
ONE_AT_A_TIME = {"LLMKUBE_FILES_IN_FLIGHT": "1"}  # publishes in MODEL_FILES order


def commit_files(seed: int) -> dict[str, bytes]:
    """Four LFS files (their validators are sha256s), every one changed
    from one commit to the next, the same names and sizes."""
    return {
        f"model-{k:05d}-of-00004.safetensors": payload(64 * KIB + k, seed=seed + k)
        for k in range(1, 5)
    }


def on_disk(cache: Path, one: dict[str, bytes], two: dict[str, bytes]) -> dict[str, str]:
    out = {}
    for rel in one:
        data = (cache / rel).read_bytes() if (cache / rel).exists() else b""
        out[rel] = "1" if data == one[rel] else "2" if data == two[rel] else "?"
    return out


def recorded_validators_name_the_bytes(
    hub: FakeHub, cache: Path, commits: dict[str, str], seen: dict[str, str]
) -> list[str]:
    """The files whose recorded validator is another commit's than the one
    whose bytes the file holds (each validator here is an LFS sha256)."""
    record = read_run_record(str(cache))
    wrong = []
    for rel, which in seen.items():
        recorded = record.validators.get(rel)
        if not recorded or which == "?":
            continue
        truth = hub.file(REPO, rel, commits[which]).sha256
        if recorded.strip('"') != truth:
            wrong.append(rel)
    return wrong


def race_two_writers(
    hub: FakeHub, nodes: TwoNodes, tmp_path: Path, one: dict[str, bytes], two: dict[str, bytes]
) -> tuple[list[Run], str]:
    """A lists main at commit 1; main moves; B lists it at commit 2 before A
    publishes. A publishes two files and stops; B publishes one and stops;
    B goes on to its end, then A. Returns both runs and commit 2's sha."""
    rels = sorted(one)
    a_listed, b_listed = threading.Event(), threading.Event()
    calls: list[int] = []
    second: list[str] = []

    def move_between_listings() -> None:
        calls.append(1)
        if len(calls) == 1:
            second.append(hub.move_branch(REPO, "main", two))
            a_listed.set()
            b_listed.wait(30)  # B lists (and read the record) before A goes on
        elif len(calls) == 2:
            b_listed.set()

    hub.on_api(move_between_listings)
    cache_a, cache_b = nodes.node1 / "model", nodes.node2 / "model"
    flags_a, pause_a = pause_flags([cache_a / rels[1]])
    flags_b, pause_b = pause_flags([cache_b / rels[0]])
    a, b = Pod(tmp_path, stager=True), Pod(tmp_path, stager=True)
    proc_a = a.popen(
        env={**env(hub, cache_a, rels, **PATIENT, **ONE_AT_A_TIME), **pause_a},
        python_flags=flags_a,
    )
    assert a_listed.wait(60), "writer A never listed"
    proc_b = b.popen(
        env={**env(hub, cache_b, rels, **PATIENT, **ONE_AT_A_TIME), **pause_b},
        python_flags=flags_b,
    )
    try:
        # A published rels[0] and rels[1] (commit 1), B rels[0] (commit 2);
        # a writer may also stop before its pause (the fix: it saw the
        # other's commit).
        paused_a = stopped_or_exited(proc_a)
        paused_b = stopped_or_exited(proc_b)
        if paused_b:
            os.kill(proc_b.pid, signal.SIGCONT)
        run_b = b.finish(proc_b, timeout=120)
        if paused_a:
            os.kill(proc_a.pid, signal.SIGCONT)
        run_a = a.finish(proc_a, timeout=120)
    finally:
        hub.on_api(None)
        for proc in (proc_a, proc_b):
            _reap(proc)
    assert b_listed.is_set(), "the writers did not list on both sides of the move"
    return [run_a, run_b], second[0]


def stopped_or_exited(proc: subprocess.Popen[str]) -> bool:
    """True once `proc` is stopped at its pause; False if it exited first."""
    try:
        await_stopped(proc, 60)
    except AssertionError:
        if proc.poll() is None:
            raise
        return False
    return True


def _reap(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()  # SIGKILL ends a stopped process too
        proc.wait()


def test_two_writers_while_main_moves_never_leave_a_set_of_two_commits_accepted(
    hub: FakeHub, two_nodes: TwoNodes, tmp_path: Path
) -> None:
    race_and_judge(hub, two_nodes, tmp_path)


def test_the_same_on_nodes_that_cache_entries_and_attributes(
    hub: FakeHub, caching_nodes: TwoNodes, tmp_path: Path
) -> None:
    """Each node's kernel keeps what it saw of the other's renames for 30 s
    (blobfuse2: 120 s): a writer's lstat of the run record shows the old
    attributes after the other node replaced it; the guard reads it anew
    at least once a second."""
    race_and_judge(hub, caching_nodes, tmp_path)


def race_and_judge(hub: FakeHub, two_nodes: TwoNodes, tmp_path: Path) -> None:
    one, two = commit_files(1), commit_files(50)
    first = hub.add_repo(REPO, one)
    rels = sorted(one)
    runs, second = race_two_writers(hub, two_nodes, tmp_path, one, two)
    commits = {"1": first, "2": second}
    backing = two_nodes.backing / "model"
    seen = on_disk(backing, one, two)
    assert "?" not in seen.values(), seen

    # No writer recorded a validator for bytes it did not write.
    wrong = recorded_validators_name_the_bytes(hub, backing, commits, seen)
    assert wrong == [], f"validators of another commit than the bytes: {wrong} ({seen})"
    mixed = len(set(seen.values())) > 1
    if mixed:
        # A writer that left its files among another commit's does not
        # report success, and no reader accepts the set.
        assert any(run.returncode != 0 for run in runs), f"both exited 0 on {seen}"
        for run in runs:
            if run.returncode != 0:
                run.failed("ModelSourceChanged", retryable=True)
        reader = Pod(tmp_path)
        verify = reader.run("verify", env=env(hub, two_nodes.node2 / "model", rels))
        verify.failed("ModelCacheIncomplete")
        hub.cdn.clear_log()
        warm = reader.run(env=env(hub, two_nodes.node2 / "model", rels))
        warm.failed("ModelCacheIncomplete")
        assert hub.cdn.requests(method="GET") == [], "a refused warm start fetched files"
    else:
        for run in runs:
            if run.returncode != 0:
                run.failed("ModelSourceChanged", retryable=True)
    # The Job retried: one commit, every file proven, accepted.
    again = Pod(tmp_path, stager=True).run(env=env(hub, two_nodes.node1 / "model", rels))
    again.ok()
    settled = on_disk(backing, one, two)
    assert len(set(settled.values())) == 1 and "?" not in settled.values(), settled
    assert recorded_validators_name_the_bytes(hub, backing, commits, settled) == []
    reader = Pod(tmp_path)
    reader.run("verify", env=env(hub, two_nodes.node2 / "model", rels)).ok()
    reader.run(env=env(hub, two_nodes.node2 / "model", rels)).ok(
        files=len(rels), fetched=0, reused=len(rels)
    )


@contextlib.contextmanager
def paused_pair(
    hub: FakeHub, nodes: TwoNodes, tmp_path: Path, rels: list[str], two: dict[str, bytes]
) -> Iterator[tuple[Paused, Paused]]:
    """A (commit 1) recorded its commit and published rels[0], and is
    stopped; B, which listed main at commit 2 before A recorded anything
    (its listing held until A stopped), recorded commit 2 and is stopped
    before its first publish. Both are killed on the way out if still
    running."""
    a_listed, b_listed, release_b = threading.Event(), threading.Event(), threading.Event()
    calls: list[int] = []

    def hold_listings() -> None:
        calls.append(1)
        if len(calls) == 1:  # A's: commit 1; main moves; B lists before A goes on
            hub.move_branch(REPO, "main", two)
            a_listed.set()
            b_listed.wait(30)
        elif len(calls) == 2:  # B's: commit 2, held until A published its first file
            b_listed.set()
            release_b.wait(60)

    hub.on_api(hold_listings)
    cache_a, cache_b = nodes.node1 / "model", nodes.node2 / "model"
    flags_a, pause_a = pause_flags([cache_a / rels[0]])
    flags_b, pause_b = pause_flags([cache_b / ".llmkube-validators"], times=1)
    a, b = Pod(tmp_path, stager=True), Pod(tmp_path, stager=True)
    proc_a = a.popen(
        env={**env(hub, cache_a, rels, **PATIENT, **ONE_AT_A_TIME), **pause_a},
        python_flags=flags_a,
    )
    procs = [proc_a]
    try:
        assert a_listed.wait(60), "writer A never listed"
        proc_b = b.popen(
            env={**env(hub, cache_b, rels, **PATIENT, **ONE_AT_A_TIME), **pause_b},
            python_flags=flags_b,
        )
        procs.append(proc_b)
        await_stopped(proc_a, 60)  # A recorded commit 1 and published rels[0]
        release_b.set()
        await_stopped(proc_b, 60)  # B recorded commit 2, published nothing yet
        yield Paused(a, proc_a), Paused(b, proc_b)
    finally:
        hub.on_api(None)
        release_b.set()
        for proc in procs:
            _reap(proc)


@dataclass
class Paused:
    pod: Pod
    proc: subprocess.Popen[str]

    def resume(self) -> Run:
        os.kill(self.proc.pid, signal.SIGCONT)
        return self.pod.finish(self.proc, timeout=120)


def test_an_overtaken_writer_stops_and_leaves_its_entry_mixed_and_the_owner_answers_it(
    hub: FakeHub, two_nodes: TwoNodes, tmp_path: Path
) -> None:
    """Deterministic (paused_pair): A goes on: before its next publish it
    sees B's commit, publishes nothing more, leaves its writer's entry as
    mixed (its file is still there) and fails, retryable; a reader refuses
    the model. B goes on, publishes every file of commit 2 over A's and,
    its end finding every file its own, clears A's entry: one commit,
    accepted."""
    one, two = commit_files(1), commit_files(50)
    first = hub.add_repo(REPO, one)
    rels = sorted(one)
    backing = two_nodes.backing / "model"
    with paused_pair(hub, two_nodes, tmp_path, rels, two) as (a, b):
        run_a = a.resume()
        run_a.failed("ModelSourceChanged", retryable=True)
        assert "another writer of the model staged commit" in run_a.term["message"]
        assert on_disk(backing, one, two) == {rels[0]: "1", **{r: "?" for r in rels[1:]}}
        assert read_run_record(str(backing)).mixed, "A left its file beside commit 2 unmarked"
        # A's file is A's: if a validator is recorded for it, commit 1's.
        recorded = read_run_record(str(backing)).validators.get(rels[0], "")
        assert recorded.strip('"') in ("", hub.file(REPO, rels[0], first).sha256)
        run_b = b.resume()
    run_b.ok(files=len(rels), fetched=len(rels))
    assert on_disk(backing, one, two) == dict.fromkeys(rels, "2")
    assert not read_run_record(str(backing)).mixed, "the owner of every file left A's entry"
    reader = Pod(tmp_path)
    cache_b = two_nodes.node2 / "model"
    reader.run("verify", env=env(hub, cache_b, rels)).ok()
    reader.run(env=env(hub, cache_b, rels)).ok(files=len(rels), fetched=0, reused=len(rels))


def test_two_writers_killed_leave_a_file_of_one_commit_under_the_others_record(
    hub: FakeHub, two_nodes: TwoNodes, tmp_path: Path
) -> None:
    """Both writers die where paused_pair stops them: A's file of commit 1
    is on disk, the run record names B's commit 2. Before the writers'
    entries, the Job's retry finished the model from the recorded commit
    2, kept A's file (its size matches) and exited 0 on a mixed set that
    `verify` accepted. A's entry (commit 1, beside a record of commit 2)
    now refuses it, and the retry proves every file by its bytes."""
    one, two = commit_files(1), commit_files(50)
    first = hub.add_repo(REPO, one)
    rels = sorted(one)
    backing = two_nodes.backing / "model"
    with paused_pair(hub, two_nodes, tmp_path, rels, two) as (a, b):
        for paused in (a, b):
            paused.proc.kill()
            paused.proc.wait()
            paused.pod.finish(paused.proc)
    assert on_disk(backing, one, two)[rels[0]] == "1"
    assert read_run_record(str(backing)).run().commit == hub.commit_of(REPO)

    retry = Pod(tmp_path, stager=True).run(env=env(hub, two_nodes.node1 / "model", rels))
    assert on_disk(backing, one, two) == dict.fromkeys(rels, "2"), "a mixed set was finished"
    retry.ok()
    assert retry.has_line("proving every file by its bytes"), retry.stderr
    commits = {"1": first, "2": hub.commit_of(REPO)}
    assert recorded_validators_name_the_bytes(hub, backing, commits, dict.fromkeys(rels, "2")) == []
    reader = Pod(tmp_path)
    reader.run("verify", env=env(hub, two_nodes.node2 / "model", rels)).ok()


def test_a_set_left_mixed_is_refused_by_readers_and_settled_by_a_writer_from_its_bytes(
    hub: FakeHub, two_nodes: TwoNodes, tmp_path: Path
) -> None:
    """A complete set of commit 1 whose second file holds commit 2's bytes
    (another writer renamed its file over it: the same size, so every file
    matches its size record, and the record still names commit 1's sha256
    for it), with the entry the overtaken writer left. `verify` and a
    serving pod's warm start refuse it without a fetch; the next writer
    proves each file by its bytes (no recorded validator trusted), fetches
    only the foreign one and clears the entry."""
    one, two = commit_files(1), commit_files(50)
    first = hub.add_repo(REPO, one)
    second = hub.move_branch(REPO, "main", two)
    hub.move_branch(REPO, "main", one, commit=first)  # main is commit 1 again
    rels = sorted(one)
    cache = two_nodes.node1 / "model"
    Pod(tmp_path, stager=True).run(env=env(hub, cache, rels)).ok(files=4, fetched=4)
    backing = two_nodes.backing / "model"
    foreign = rels[1]
    tmp = backing / (foreign + ".other-writer")
    tmp.write_bytes(two[foreign])
    os.replace(tmp, backing / foreign)
    # What the overtaken writer left: its entry, mixed.
    (backing / WRITERS_NAME).mkdir(exist_ok=True)  # a writer left it, empty
    (backing / WRITERS_NAME / "0123456789abcdef").write_text(
        json.dumps({"commit": second, "mixed": True})
    )

    reader = Pod(tmp_path)
    hub.cdn.clear_log()
    verify = reader.run("verify", env=env(hub, two_nodes.node2 / "model", rels))
    verify.failed("ModelCacheIncomplete")
    assert "more than one commit" in verify.term["message"], verify.term
    warm = reader.run(env=env(hub, two_nodes.node2 / "model", rels))
    warm.failed("ModelCacheIncomplete")
    assert hub.cdn.requests(method="GET") == [], "a refused warm start fetched files"

    settled = Pod(tmp_path, stager=True).run(env=env(hub, cache, rels))
    settled.ok(files=4, fetched=1, reused=3)
    assert settled.has_line("proving every file by its bytes"), settled.stderr
    assert on_disk(backing, one, two) == dict.fromkeys(rels, "1")
    assert list((backing / WRITERS_NAME).iterdir()) == []
    commits = {"1": first, "2": second}
    assert recorded_validators_name_the_bytes(hub, backing, commits, dict.fromkeys(rels, "1")) == []
    reader.run("verify", env=env(hub, two_nodes.node2 / "model", rels)).ok()
    reader.run(env=env(hub, two_nodes.node2 / "model", rels)).ok(files=4, fetched=0, reused=4)


def test_two_writers_of_one_commit_replace_each_others_files_and_both_succeed(
    hub: FakeHub, two_nodes: TwoNodes, tmp_path: Path
) -> None:
    """No false alarm: a pod and its replacement at the same commit (main
    does not move), both listing before either publishes. A publishes its
    first file and stops; B publishes all four, the first over A's; A goes
    on and publishes the other three over B's. The file A finds replaced
    holds its bytes (hashed once): both exit 0, no writer's entry is left,
    readers accept."""
    one = commit_files(1)
    hub.add_repo(REPO, one)
    rels = sorted(one)
    a_listed, b_listed = threading.Event(), threading.Event()
    calls: list[int] = []

    def list_both_first() -> None:
        calls.append(1)
        if len(calls) == 1:
            a_listed.set()
            b_listed.wait(30)
        elif len(calls) == 2:
            b_listed.set()

    hub.on_api(list_both_first)
    cache_a, cache_b = two_nodes.node1 / "model", two_nodes.node2 / "model"
    flags_a, pause_a = pause_flags([cache_a / rels[0]], times=1)
    a, b = Pod(tmp_path, stager=True), Pod(tmp_path, stager=True)
    proc_a = a.popen(
        env={**env(hub, cache_a, rels, **PATIENT, **ONE_AT_A_TIME), **pause_a},
        python_flags=flags_a,
    )
    try:
        assert a_listed.wait(60), "writer A never listed"
        proc_b = b.popen(env=env(hub, cache_b, rels, **PATIENT, **ONE_AT_A_TIME))
        await_stopped(proc_a, 60)
        run_b = b.finish(proc_b, timeout=120)
        os.kill(proc_a.pid, signal.SIGCONT)
        run_a = a.finish(proc_a, timeout=120)
    finally:
        hub.on_api(None)
        _reap(proc_a)
    run_b.ok(files=len(rels), fetched=len(rels))
    run_a.ok(files=len(rels), fetched=len(rels))
    backing = two_nodes.backing / "model"
    assert on_disk(backing, one, one) == dict.fromkeys(rels, "1")
    assert not read_run_record(str(backing)).mixed
    assert not any((backing / WRITERS_NAME).iterdir())
    reader = Pod(tmp_path)
    reader.run("verify", env=env(hub, cache_b, rels)).ok()
    reader.run(env=env(hub, cache_b, rels)).ok(files=len(rels), fetched=0, reused=len(rels))


def test_the_owner_proves_the_set_when_the_overtaken_writer_was_killed(
    hub: FakeHub, two_nodes: TwoNodes, tmp_path: Path
) -> None:
    """A dies where paused_pair stops it (its entry of commit 1 left, its
    file still there); B goes on and publishes every file. B's entry check
    at its end finds A's entry of another commit: B hashes every file it
    published against commit 2 and, all of them proven, clears it: exit 0,
    one commit, accepted without a retry."""
    one, two = commit_files(1), commit_files(50)
    hub.add_repo(REPO, one)
    rels = sorted(one)
    backing = two_nodes.backing / "model"
    with paused_pair(hub, two_nodes, tmp_path, rels, two) as (a, b):
        a.proc.kill()
        a.proc.wait()
        a.pod.finish(a.proc)
        assert read_run_record(str(backing)).mixed, "a dead writer of commit 1 went unseen"
        run_b = b.resume()
    run_b.ok(files=len(rels), fetched=len(rels))
    assert on_disk(backing, one, two) == dict.fromkeys(rels, "2")
    assert not read_run_record(str(backing)).mixed
    reader = Pod(tmp_path)
    reader.run("verify", env=env(hub, two_nodes.node2 / "model", rels)).ok()
