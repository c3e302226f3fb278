"""The local dry run as a person uses it (#13 item 9): relative CACHE_DIR and
MODEL_PATH from any directory, as a non-root user, and nothing written where
it does not belong.

The CLI runs as uid 65534 (when the suite runs as root, through `setpriv`)
in a directory that uid owns, with a Python audit hook that records every
attempt to create, write, rename or remove a file: an attempt is caught even
when permissions would make it fail, so "nothing tries to write
/dev/termination-log, $HOME or the working directory" is what is checked, not
merely that nothing got written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.origin import Origin
from tests.harness.pod import ROOT, SHORT_BUDGET
from tests.harness.sample import gguf_like

pytestmark = pytest.mark.e2e

NOBODY = 65534
MODEL = "/files/model.gguf"
DATA = gguf_like(300_000, seed=9)
DEFAULT_TERMINATION_LOG = Path("/dev/termination-log")

# Runs the CLI under an audit hook that reports write-like file operations
# on the inherited descriptor AUDIT_FD (os.write raises no audit event).
AUDITED_CLI = r"""
import os, runpy, sys
fd = int(os.environ.pop("AUDIT_FD"))
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
PATH_ARGS = {
    "os.mkdir": (0,), "os.rename": (0, 1), "os.remove": (0,), "os.rmdir": (0,),
    "os.link": (0, 1), "os.symlink": (1,), "os.truncate": (0,), "os.chmod": (0,),
    "os.chown": (0,), "os.utime": (0,), "os.mkfifo": (0,), "os.mknod": (0,),
    "shutil.copyfile": (1,), "shutil.rmtree": (0,),
    "tempfile.mkstemp": (0,), "tempfile.mkdtemp": (0,),
}
def hook(event, args):
    if event == "open":
        path, mode, flags = args
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags or 0) & WRITE
        targets = [path] if writes else []
    elif event in PATH_ARGS:
        targets = [args[i] for i in PATH_ARGS[event]]
    else:
        return
    for target in targets:
        if isinstance(target, int):
            continue
        path = os.path.abspath(os.fsdecode(os.fspath(target)))
        if path.startswith("/proc/self/fd/"):  # a reopened descriptor: its file
            try:
                path = os.readlink(path)
            except OSError:
                pass
        os.write(fd, f"{event}\t{path}\n".encode())
sys.addaudithook(hook)
sys.argv = ["llmkube-stager", *sys.argv[1:]]
runpy.run_module("llmkube_stager", run_name="__main__", alter_sys=True)
"""


@dataclass
class Local:
    """A person's directory: `work` (the cwd) and `home`, owned by the uid
    the CLI runs as."""

    work: Path
    home: Path
    uid: int


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    writes: list[tuple[str, str]]

    def __str__(self) -> str:
        return (
            f"rc={self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n"
            f"{self.stderr}\n--- write attempts ---\n{self.writes}"
        )


def _as_user() -> list[str]:
    if os.geteuid() != 0:
        return []  # already a non-root user
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to run the CLI as a non-root uid")
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@pytest.fixture
def local() -> Iterator[Local]:
    # Not under tmp_path: pytest makes that 0700 for root, closed to uid 65534.
    base = Path(tempfile.mkdtemp(prefix="llmkube-local-", dir="/tmp"))
    work, home = base / "work", base / "home"
    work.mkdir()
    home.mkdir()
    uid = NOBODY if os.geteuid() == 0 else os.geteuid()
    for path in (base, work, home):
        if os.geteuid() == 0:
            os.chown(path, uid, uid)
        path.chmod(0o755)
    try:
        yield Local(work, home, uid)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_cli(local: Local, *args: str, env: dict[str, str]) -> Result:
    child_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(local.home),
        "LANG": "C.UTF-8",
        # The interpreter's own bytecode cache is not the agent's doing.
        "PYTHONDONTWRITEBYTECODE": "1",
        # The package of this checkout, whatever the working directory.
        "PYTHONPATH": str(ROOT),
        **SHORT_BUDGET,
        **env,
    }
    read_fd, write_fd = os.pipe()
    child_env["AUDIT_FD"] = str(write_fd)
    try:
        proc = subprocess.Popen(
            [*_as_user(), sys.executable, "-c", AUDITED_CLI, *args],
            env=child_env,
            cwd=local.work,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=(write_fd,),
        )
    finally:
        os.close(write_fd)
    with os.fdopen(read_fd, "rb") as audit:
        out, err = proc.communicate(timeout=60)
        lines = audit.read().decode().splitlines()
    writes = [tuple(line.split("\t", 1)) for line in lines]
    return Result(proc.returncode, out, err, writes)  # type: ignore[arg-type]


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

    plan = run_cli(local, "plan", env=env)
    assert plan.returncode == 0, str(plan)
    assert "fetch" in plan.stdout, str(plan)
    assert plan.writes == [], str(plan)
    assert origin.requests() == []
    assert _tree(local.work) == set()

    stage = run_cli(local, "stage", env=env)
    assert stage.returncode == 0, str(stage)
    dest = local.work / "cache" / "k" / "model.gguf"
    assert dest.read_bytes() == DATA
    assert os.stat(dest).st_uid == local.uid
    cache = str(local.work / "cache")
    outside = [w for w in stage.writes if not w[1].startswith(cache + "/") and w[1] != cache]
    assert outside == [], str(stage)  # not the cwd itself, not $HOME, not /dev

    for args in (("verify",), ("inspect", "cache/k"), ("plan",)):
        before = _tree(local.work)
        result = run_cli(local, *args, env=env)
        assert result.returncode == 0, str(result)
        assert result.writes == [], str(result)
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
    result = run_cli(local, "verify", "--model-path", "/nonexistent/m.gguf", env=env)
    assert result.returncode == 4, str(result)  # ModelCacheEmpty
    assert ("open", "/proc/version") in result.writes, str(result)
