"""Review of #21 item 4 as an adversary: the Job's commit claim
(`.llmkube-validators.job-commit`) left behind or made hostile."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.harness.hub import FakeHub
from tests.harness.pod import Pod
from tests.harness.sharded_hub import REPO, on_disk_commit, repo_files, share_env

CLAIM = ".llmkube-validators.job-commit"


def test_a_claim_of_a_commit_the_hub_no_longer_has_does_not_fail_every_job(
    hub: FakeHub, tmp_path: Path
) -> None:
    """A Job died with its claim in place, and the claimed commit was then
    force-pushed away on the hub. Every later Job's shares took the claim
    and listed at a commit nobody has: the Job failed forever, until
    somebody found and deleted the file by hand."""
    one = repo_files()
    hub.add_repo(REPO, one)
    cache = tmp_path / "models" / "m"
    cache.mkdir(parents=True)
    gone = {"revision": "main", "commit": "f" * 40, "id": "0123456789abcdef"}
    (cache / CLAIM).write_text(json.dumps(gone))
    rels = sorted(one)
    stager = Pod(tmp_path, stager=True)
    runs = [stager.run(env=share_env(hub, cache, rels, index)) for index in range(2)]
    for run in runs:
        run.ok()
    assert on_disk_commit(cache, one, one) == {"1"}


def test_a_claim_that_is_a_directory_does_not_let_each_share_take_its_own_commit(
    hub: FakeHub, tmp_path: Path
) -> None:
    """A directory at the claim's name can be neither read nor removed:
    claim_job_commit gave up after three tries and answered the share's own
    commit as the Job's, so each share staged the commit it resolved (a
    branch moving between them: the two-commit set of #21 item 4)."""
    one = repo_files()
    hub.add_repo(REPO, one)
    cache = tmp_path / "models" / "m"
    (cache / CLAIM).mkdir(parents=True)
    rels = sorted(one)
    run = Pod(tmp_path, stager=True).run(env=share_env(hub, cache, rels, 0))
    run.failed("ModelCacheUnwritable")
    assert CLAIM in run.term["message"], run.term
    assert not any((cache / rel).exists() for rel in rels), "a share staged without a claim"
    assert os.path.isdir(cache / CLAIM)


def test_a_file_missing_at_a_claimed_commit_the_hub_has_keeps_the_claim(
    hub: FakeHub, tmp_path: Path
) -> None:
    """The other side of dropping a gone commit's claim: a listed file the
    repo lacks is the file's reason, and the Job's claim (live shares may
    be staging at it) is left alone."""
    one = repo_files()
    commit = hub.add_repo(REPO, one)
    cache = tmp_path / "models" / "m"
    cache.mkdir(parents=True)
    held = {"revision": "main", "commit": commit, "id": "0123456789abcdef"}
    (cache / CLAIM).write_text(json.dumps(held))
    rels = [*sorted(one), "unet/not-there.safetensors"]
    runs = [Pod(tmp_path, stager=True).run(env=share_env(hub, cache, rels, i)) for i in range(2)]
    assert any(run.returncode != 0 for run in runs)
    for run in runs:
        if run.returncode != 0:
            run.failed("ModelSourceNotFound")
    assert json.loads((cache / CLAIM).read_text()) == held
