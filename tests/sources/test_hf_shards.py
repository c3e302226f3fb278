"""A sharded prefetch of a Hugging Face model (#16 item 4): four pods at
once record the hub's blob ids and the commit without losing each other's
(each share its own validators file), take their sizes from the hub's
listing (one API call each, no HEAD per file), and an OnChange start after
them knows every file for what it is: nothing fetched again."""

from __future__ import annotations

from pathlib import Path

from llmkube_stager.cache.runrecord import read_run_record
from tests.harness.hub import FakeHub
from tests.harness.pod import Pod
from tests.harness.sharded_hub import (
    REPO,
    env,
    moved_files,
    on_disk_commit,
    repo_files,
    share_env,
)

SHARDS = 4


def test_four_shares_record_every_blob_id_and_one_commit(hub: FakeHub, tmp_path: Path) -> None:
    files = repo_files()
    commit = hub.add_repo(REPO, files)
    cache = tmp_path / "models" / "m"
    rels = sorted(files)
    pods = [Pod(tmp_path, stager=True) for _ in range(SHARDS)]
    procs = [
        pods[i].popen(
            env=env(hub, cache, rels, LLMKUBE_SHARDS=str(SHARDS), JOB_COMPLETION_INDEX=str(i))
        )
        for i in range(SHARDS)
    ]
    for pod, proc in zip(pods, procs, strict=True):
        pod.finish(proc, timeout=120).ok()

    for rel, data in files.items():
        assert (cache / rel).read_bytes() == data, rel
    record = read_run_record(str(cache))
    for rel in rels:
        assert record.validators.get(rel), f"the blob id of {rel} was lost"
    recorded = {record.run(f"{i}-of-{SHARDS}").commit for i in range(SHARDS)}
    assert recorded == {commit}
    for index in range(SHARDS):
        # Each share's own record, under the name the format gives it.
        assert (cache / f".llmkube-validators.{index}-of-{SHARDS}").is_file()
    # Sizes came from the hub's listing: no HEAD per file, one API call a pod.
    assert len(hub.requests("api")) == SHARDS

    hub.cdn.clear_log()
    after = Pod(tmp_path).run(env=env(hub, cache, rels, LLMKUBE_REFRESH_POLICY="OnChange"))
    after.ok(files=len(rels), fetched=0, reused=len(rels))
    assert hub.cdn.requests(method="GET") == []


# -- #21 item 4: one commit per model ---------------------------------------------------


def test_a_branch_moving_while_the_job_runs_ends_in_one_commit(
    hub: FakeHub, tmp_path: Path
) -> None:
    """Share 0's listing resolves main to commit 1; main then moves and
    share 1's resolves it to commit 2, before either publishes. Before the
    fix each share staged its own commit, both failed ModelSourceChanged,
    and the model on disk was half commit 1, half commit 2."""
    import threading

    one, two = repo_files(), moved_files()
    first = hub.add_repo(REPO, one)
    first_listed, second_listed = threading.Event(), threading.Event()
    calls: list[int] = []

    def move_between_listings() -> None:
        calls.append(1)
        if len(calls) == 1:
            hub.move_branch(REPO, "main", two)
            first_listed.set()
            second_listed.wait(20)  # the other share lists before this one goes on
        elif len(calls) == 2:
            second_listed.set()

    hub.on_api(move_between_listings)
    cache = tmp_path / "models" / "m"
    rels = sorted(one)
    pods = [Pod(tmp_path, stager=True) for _ in range(2)]
    # Patient clients: a share whose listing waits in the hook must not
    # time out and ask again (at the moved branch), however slow the other
    # share's start is on a loaded machine.
    patient = {"LLMKUBE_STALL_TIMEOUT": "30", "LLMKUBE_CONNECT_TIMEOUT": "5"}
    # Share 0 starts; share 1 only once share 0's listing (commit 1) is
    # computed and main has moved, so share 1's is of commit 2.
    procs = [pods[0].popen(env=share_env(hub, cache, rels, 0, **patient))]
    assert first_listed.wait(30), "share 0 never listed"
    procs.append(pods[1].popen(env=share_env(hub, cache, rels, 1, **patient)))
    runs = [pod.finish(proc, timeout=120) for pod, proc in zip(pods, procs, strict=True)]
    hub.on_api(None)
    assert second_listed.is_set(), "the shares did not list on both sides of the move"

    seen = on_disk_commit(cache, one, two)
    assert len(seen) == 1 and "?" not in seen, f"the model on disk mixes commits: {seen}"
    for run in runs:
        run.ok()
    relisted = [run for run in runs if run.has_line("another share of the Job claimed commit")]
    assert len(relisted) == 1, "the share that lost the claim did not list again\n" + "\n".join(
        [str(r) for r in hub.requests("api")] + [run.stderr[-3000:] for run in runs]
    )
    assert len(hub.requests("api")) == 3, "two listings and one listing again"
    record = read_run_record(str(cache))
    assert {record.run("0-of-2").commit, record.run("1-of-2").commit} == {
        first if seen == {"1"} else hub.commit_of(REPO)
    }
    reader = Pod(tmp_path)
    reader.run("verify", env=env(hub, cache, rels)).ok()
    assert not (cache / ".llmkube-validators.job-commit").exists(), "the claim outlived the Job"


def _staged_by_two_shares(
    hub: FakeHub, tmp_path: Path, files: dict[str, bytes]
) -> tuple[Path, list[str], Pod]:
    """A Job of two shares staged `files` (commit 1 of main); returns the
    cache, the model's files and the stager pod."""
    hub.add_repo(REPO, files)
    cache = tmp_path / "models" / "m"
    rels = sorted(files)
    stager = Pod(tmp_path, stager=True)
    for index in range(2):
        stager.run(env=share_env(hub, cache, rels, index)).ok()
    return cache, rels, stager


def test_a_reader_refuses_a_job_half_done_at_a_new_commit_and_a_rerun_converges(
    hub: FakeHub, tmp_path: Path
) -> None:
    """A Job stages commit 1; main moves; the next Job's share 0 refreshes
    its files to commit 2 and share 1 has not run yet: the set on disk is
    mixed for real. `verify` and a serving pod's warm start exited 0 on it
    before the fix; now both refuse it, and share 1 (the Job retried) ends
    it in commit 2."""
    one, two = repo_files(), moved_files()
    cache, rels, stager = _staged_by_two_shares(hub, tmp_path, one)
    second = hub.move_branch(REPO, "main", two)

    onchange = {"LLMKUBE_REFRESH_POLICY": "OnChange"}
    stager.run(env=share_env(hub, cache, rels, 0, **onchange)).ok()
    assert on_disk_commit(cache, one, two) == {"1", "2"}, "not the mixed set this test needs"

    reader = Pod(tmp_path)
    hub.cdn.clear_log()
    verify = reader.run("verify", env=env(hub, cache, rels))
    verify.failed("ModelCacheIncomplete")
    assert "more than one commit" in verify.term["message"], verify.term
    warm = reader.run(env=env(hub, cache, rels))
    warm.failed("ModelCacheIncomplete")
    assert hub.cdn.requests(method="GET") == [], "a refused warm start fetched files"

    stager.run(env=share_env(hub, cache, rels, 1, **onchange)).ok()
    assert on_disk_commit(cache, one, two) == {"2"}
    record = read_run_record(str(cache))
    assert {record.run("0-of-2").commit, record.run("1-of-2").commit} == {second}
    reader.run("verify", env=env(hub, cache, rels)).ok()
    reader.run(env=env(hub, cache, rels)).ok(files=len(rels), fetched=0, reused=len(rels))


def test_a_serving_pod_that_refreshes_a_sharded_model_leaves_one_commit(
    hub: FakeHub, tmp_path: Path
) -> None:
    """A Job staged commit 1; main moved; an unsharded OnChange pod refreshed
    the whole model to commit 2. The shares' records still say commit 1:
    the pod's own record says which share commits its run superseded, so
    readers see one commit (a judgement that counted every record would
    refuse this model for ever)."""
    one, two = repo_files(), moved_files()
    cache, rels, stager = _staged_by_two_shares(hub, tmp_path, one)
    hub.move_branch(REPO, "main", two)
    serving = Pod(tmp_path)
    serving.run(env=env(hub, cache, rels, LLMKUBE_REFRESH_POLICY="OnChange")).ok()
    assert on_disk_commit(cache, one, two) == {"2"}
    serving.run("verify", env=env(hub, cache, rels)).ok()
    serving.run(env=env(hub, cache, rels)).ok(files=len(rels), fetched=0, reused=len(rels))
    # A file lost later is fetched again from the commit the others are of.
    lost = "unet/shard-3.safetensors"
    (cache / lost).unlink()
    hub.move_branch(REPO, "main", one)  # main moves on again: no matter
    serving.run(env=env(hub, cache, rels)).ok(files=len(rels), fetched=1, reused=len(rels) - 1)
    assert (cache / lost).read_bytes() == two[lost], "finished from another commit"
    hub.move_branch(REPO, "main", two)

    # The next Job (main unchanged) verifies its shares at commit 2 and
    # records it: readers still see one commit.
    for index in range(2):
        stager.run(env=share_env(hub, cache, rels, index, LLMKUBE_REFRESH_POLICY="OnChange")).ok()
    serving.run("verify", env=env(hub, cache, rels)).ok()
