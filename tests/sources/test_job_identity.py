"""#29 item 6: a dead Job's commit claim. A sharded Hugging Face prefetch
Job that dies before every share finishes leaves its claim
(`.llmkube-validators.job-commit`, cache/jobclaim.py); before the fix the
next Job for the same revision, after `main` moved, took it, staged the
dead Job's commit and exited 0. A claim now names its Job (LLMKUBE_JOB_ID,
the pod's `batch.kubernetes.io/controller-uid` label through the downward
API): a retried pod of the same Job keeps it, a new Job resolves anew."""

from __future__ import annotations

import json
from pathlib import Path

from llmkube_stager.cache.runrecord import read_run_record
from tests.harness.hub import FakeHub
from tests.harness.pause import await_stopped, pause_flags
from tests.harness.pod import Pod
from tests.harness.sharded_hub import REPO, env, moved_files, on_disk_commit, repo_files
from tests.harness.sharded_hub import share_env as _share_env

CLAIM = ".llmkube-validators.job-commit"
JOB_1 = "0c1d2e3f-1111-4abc-9def-0123456789ab"  # controller-uids, as the label carries them
JOB_2 = "0c1d2e3f-2222-4abc-9def-0123456789ab"


def share_env(hub: FakeHub, cache: Path, rels: list[str], index: int, job: str, **extra: str):
    return _share_env(hub, cache, rels, index, LLMKUBE_JOB_ID=job, **extra)


def claim_of(cache: Path) -> dict[str, str]:
    return json.loads((cache / CLAIM).read_text())


def test_a_new_job_after_main_moved_stages_the_new_commit_not_the_dead_jobs_onchange(
    hub: FakeHub, tmp_path: Path
) -> None:
    """Job 1's share 0 staged commit 1 and share 1 never ran (the Job
    failed): its claim stays. main moves. Job 2 (OnChange) took Job 1's
    claim and staged commit 1 again, exit 0, before the fix."""
    one, two = repo_files(), moved_files()
    first = hub.add_repo(REPO, one)
    cache = tmp_path / "models" / "m"
    rels = sorted(one)
    onchange = {"LLMKUBE_REFRESH_POLICY": "OnChange"}
    stager = Pod(tmp_path, stager=True)
    stager.run(env=share_env(hub, cache, rels, 0, JOB_1, **onchange)).ok()
    assert claim_of(cache)["commit"] == first  # share 1 never ran: the claim stays
    second = hub.move_branch(REPO, "main", two)

    runs = [stager.run(env=share_env(hub, cache, rels, i, JOB_2, **onchange)) for i in range(2)]
    for run in runs:
        run.ok()
    assert on_disk_commit(cache, one, two) == {"2"}, "the new Job staged the dead Job's commit"
    assert runs[0].has_line("by another Job"), runs[0].stderr
    record = read_run_record(str(cache))
    assert {record.run("0-of-2").commit, record.run("1-of-2").commit} == {second}
    assert not (cache / CLAIM).exists(), "Job 2's claim outlived Job 2"
    Pod(tmp_path).run("verify", env=env(hub, cache, rels)).ok()


def test_a_new_job_resolves_anew_when_the_dead_job_died_before_publishing(
    hub: FakeHub, tmp_path: Path
) -> None:
    """IfNotPresent: Job 1's share 0 claimed commit 1 and was killed right
    after recording its share, nothing published (no file for IfNotPresent
    to keep). main moves; Job 2 staged commit 1 before the fix."""
    one, two = repo_files(), moved_files()
    first = hub.add_repo(REPO, one)
    cache = tmp_path / "models" / "m"
    cache.mkdir(parents=True)
    rels = sorted(one)
    flags, pause = pause_flags([cache / ".llmkube-shards"], times=1)
    dying = Pod(tmp_path, stager=True)
    proc = dying.popen(env={**share_env(hub, cache, rels, 0, JOB_1), **pause}, python_flags=flags)
    try:
        await_stopped(proc, 60)
    finally:
        proc.kill()
        proc.wait()
    dying.finish(proc)
    assert claim_of(cache)["commit"] == first
    assert not any((cache / rel).exists() for rel in rels)
    hub.move_branch(REPO, "main", two)

    stager = Pod(tmp_path, stager=True)
    for index in range(2):
        stager.run(env=share_env(hub, cache, rels, index, JOB_2)).ok()
    assert on_disk_commit(cache, one, two) == {"2"}, "the new Job staged the dead Job's commit"
    assert not (cache / CLAIM).exists()
    Pod(tmp_path).run("verify", env=env(hub, cache, rels)).ok()


def test_a_retried_pod_of_the_same_job_keeps_its_claim(hub: FakeHub, tmp_path: Path) -> None:
    """The other side: Job 1's share 1 runs late (its pod retried) after
    main moved; it is the same Job, so it stages the claimed commit and the
    set is one commit, the claim gone once both shares are whole."""
    one, two = repo_files(), moved_files()
    hub.add_repo(REPO, one)
    cache = tmp_path / "models" / "m"
    rels = sorted(one)
    stager = Pod(tmp_path, stager=True)
    stager.run(env=share_env(hub, cache, rels, 0, JOB_1)).ok()
    hub.move_branch(REPO, "main", two)
    stager.run(env=share_env(hub, cache, rels, 1, JOB_1)).ok()
    assert on_disk_commit(cache, one, two) == {"1"}
    assert not (cache / CLAIM).exists()
    Pod(tmp_path).run("verify", env=env(hub, cache, rels)).ok()


def test_a_claim_without_an_identity_is_another_jobs_to_a_pod_that_has_one(
    hub: FakeHub, tmp_path: Path
) -> None:
    """Compatibility: a claim written before #29 (no `job`) is a Job's of
    unknown identity. A pod given LLMKUBE_JOB_ID takes it for another
    Job's and resolves anew; a pod not given one keeps the old behavior
    (takes it as its Job's: set the variable)."""
    one, two = repo_files(), moved_files()
    first = hub.add_repo(REPO, one)
    hub.move_branch(REPO, "main", two)
    rels = sorted(one)
    old = {"revision": "main", "commit": first, "id": "0123456789abcdef"}

    with_id = tmp_path / "models" / "with-id"
    with_id.mkdir(parents=True)
    (with_id / CLAIM).write_text(json.dumps(old))
    stager = Pod(tmp_path, stager=True)
    for index in range(2):
        stager.run(env=share_env(hub, with_id, rels, index, JOB_2)).ok()
    assert on_disk_commit(with_id, one, two) == {"2"}

    without = tmp_path / "models" / "without-id"
    without.mkdir(parents=True)
    (without / CLAIM).write_text(json.dumps(old))
    for index in range(2):
        stager.run(env=_share_env(hub, without, rels, index)).ok()
    assert on_disk_commit(without, one, two) == {"1"}
    assert not (without / CLAIM).exists()


def test_the_claim_names_the_job_and_a_malformed_identity_is_refused(
    hub: FakeHub, tmp_path: Path
) -> None:
    one = repo_files()
    hub.add_repo(REPO, one)
    cache = tmp_path / "models" / "m"
    rels = sorted(one)
    stager = Pod(tmp_path, stager=True)
    stager.run(env=share_env(hub, cache, rels, 0, JOB_1)).ok()
    assert claim_of(cache)["job"] == JOB_1
    bad = stager.run(env=share_env(hub, cache, rels, 1, "job 1\nx"))
    bad.failed("InvalidConfiguration")
    assert "LLMKUBE_JOB_ID" in bad.term["message"], bad.term
