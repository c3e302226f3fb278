"""The local dry run as a person uses it (#13 item 9): relative CACHE_DIR and
MODEL_PATH from any directory, as a non-root user, and nothing written where
it does not belong.

The CLI runs as uid 65534 (when the suite runs as root, through `setpriv`)
in a directory that uid owns, under the audit hook of `Pod.run(audit=True)`
(tests/harness/audit.py), which records every attempt to create, write,
rename or remove a file: an attempt is caught even when permissions would
make it fail, so "nothing tries to write /dev/termination-log, $HOME or the
working directory" is what is checked, not merely that nothing got written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.features import missing_feature
from tests.harness.origin import Origin
from tests.harness.pod import NOBODY, Pod, Run, as_user
from tests.harness.sample import gguf_like

pytestmark = pytest.mark.e2e

MODEL = "/files/model.gguf"
DATA = gguf_like(300_000, seed=9)
DEFAULT_TERMINATION_LOG = Path("/dev/termination-log")


@dataclass
class Local:
    """A person's directory: `work` (the cwd) and `home`, owned by the uid
    the CLI runs as, and a pod that runs the CLI there as that uid with no
    termination-log setting (the default, /dev/termination-log, applies)."""

    work: Path
    home: Path
    uid: int
    pod: Pod

    def run(self, *args: str, env: dict[str, str]) -> Run:
        return self.pod.run(*args, env={"LLMKUBE_TERMINATION_LOG": None, **env}, audit=True)


def _as_user() -> list[str]:
    if os.geteuid() != 0:
        return []  # already a non-root user
    if shutil.which("setpriv") is None:
        missing_feature("setpriv (util-linux) is needed to run the CLI as a non-root uid")
    return as_user(NOBODY)


@pytest.fixture
def local() -> Iterator[Local]:
    # Not under tmp_path: pytest makes that 0700 for root, closed to uid 65534.
    base = Path(tempfile.mkdtemp(prefix="llmkube-local-", dir="/tmp"))
    work, home = base / "work", base / "home"
    work.mkdir()
    pod = Pod(base, wrapper=_as_user(), cwd=work)  # HOME is base/home
    uid = NOBODY if os.geteuid() == 0 else os.geteuid()
    for path in (base, work, home):
        if os.geteuid() == 0:
            os.chown(path, uid, uid)
        path.chmod(0o755)
    try:
        yield Local(work, home, uid, pod)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_plan_stage_verify_inspect_with_relative_paths_as_a_non_root_user(
    local: Local, origin: Origin
) -> None:
    origin.put(MODEL, DATA)
    env = {
        "MODEL_SOURCE": origin.url + MODEL,
        "CACHE_DIR": "cache/k",
        "MODEL_PATH": "cache/k/model.gguf",
    }
    # The audit hook records every write attempt, so a machine that has a
    # termination log (a developer's, written by an older build) proves as much.
    term_before = _stat_or_none(DEFAULT_TERMINATION_LOG)

    plan = local.run("plan", env=env)
    assert plan.returncode == 0, str(plan)
    assert "fetch" in plan.stdout, str(plan)
    assert plan.writes == [], str(plan)
    assert origin.requests() == []
    assert _tree(local.work) == set()

    stage = local.run("stage", env=env)
    assert stage.returncode == 0, str(stage)
    dest = local.work / "cache" / "k" / "model.gguf"
    assert dest.read_bytes() == DATA
    assert os.stat(dest).st_uid == local.uid
    cache = str(local.work / "cache")
    # A machine that already has /dev/termination-log (a pod, or a
    # developer's, written by an older build) gets the message there.
    allowed = {str(DEFAULT_TERMINATION_LOG)} if term_before is not None else set()
    outside = [
        w
        for w in stage.writes
        if not w[1].startswith((cache + "/", "dirfd:")) and w[1] != cache and w[1] not in allowed
    ]
    assert outside == [], str(stage)  # not the cwd itself, not $HOME, not /dev
    # What was written relative to a directory descriptor did not land in
    # the working directory or $HOME.
    for _event, path in stage.writes:
        if path.startswith("dirfd:"):
            name = path.removeprefix("dirfd:")
            assert not (local.work / name).exists() and not (local.home / name).exists()

    for args in (("verify",), ("inspect", "cache/k"), ("plan",)):
        before = _tree(local.work)
        result = local.run(*args, env=env)
        assert result.returncode == 0, str(result)
        assert [w for w in result.writes if w[1] not in allowed] == [], str(result)
        assert _tree(local.work) == before
    assert "reuse" in result.stdout, str(result)

    assert _tree(local.home) == set()
    assert _stat_or_none(DEFAULT_TERMINATION_LOG) == term_before


def _stat_or_none(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_size


def test_the_audit_sees_an_attempt_that_permissions_refuse(local: Local) -> None:
    """The check can fail: a write the uid is not allowed is still reported."""
    env = {"LLMKUBE_TERMINATION_LOG": "/proc/version", "MODEL_SOURCE": "http://127.0.0.1:9/m"}
    result = local.run("verify", "--model-path", "/nonexistent/m.gguf", env=env)
    assert result.returncode == 4, str(result)  # ModelCacheEmpty
    assert ("open", "/proc/version") in result.writes, str(result)
