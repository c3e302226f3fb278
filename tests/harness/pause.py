"""The CLI under a Python audit hook that stops the process (SIGSTOP) right
after a rename onto one of the chosen names: a writer frozen between its
publish rename and its stamp, deterministically, without touching the
agent's modules (#21 item 2).

`Pod.popen(..., python_flags=pause_flags(paths))`: the hook arms on the
`os.rename` audit event (raised before the rename) whose destination is
one of `paths` (resolved, also when given relative to a directory
descriptor) and stops the process at the next audit event, i.e. once the
rename returned and before the next file operation; `times=N` stops only
after the first N such renames. `stopped(pid)` tells
when it is; SIGCONT resumes it.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable

PAUSE_VAR = "LLMKUBE_TEST_PAUSE_AFTER_RENAME_TO"

_PAUSING_CLI = r"""
import os, runpy, signal, sys
targets = set(os.environ.pop("LLMKUBE_TEST_PAUSE_AFTER_RENAME_TO").split("\n"))
left = [int(os.environ.pop("LLMKUBE_TEST_PAUSE_TIMES", "0")) or -1]
armed = []
def hook(event, args):
    if armed:
        armed.clear()
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    if event != "os.rename" or left[0] == 0:
        return
    dst, dst_fd = os.fsdecode(os.fspath(args[1])), args[3]
    if not dst.startswith("/") and isinstance(dst_fd, int) and dst_fd >= 0:
        dst = os.path.join(os.readlink(f"/proc/self/fd/{dst_fd}"), dst)
    if os.path.realpath(dst) in targets:
        armed.append(dst)
        left[0] -= 1
sys.addaudithook(hook)
# python -c CODE -m llmkube_stager ARGS...: argv is ["-c", "-m", "llmkube_stager", ARGS...]
sys.argv = ["llmkube-stager", *sys.argv[3:]]
runpy.run_module("llmkube_stager", run_name="__main__", alter_sys=True)
"""


def pause_flags(
    paths: Iterable[os.PathLike[str] | str], times: int | None = None
) -> tuple[list[str], dict[str, str]]:
    """(python_flags, env) for Pod.popen: stop after a rename onto `paths`;
    `times`: only after the first so many (None: after every one)."""
    targets = "\n".join(os.path.realpath(p) for p in paths)
    env = {PAUSE_VAR: targets}
    if times is not None:
        env["LLMKUBE_TEST_PAUSE_TIMES"] = str(times)
    return ["-c", _PAUSING_CLI], env


def stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0] == "T"


def await_stopped(proc: subprocess.Popen[str], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not stopped(proc.pid):
        if proc.poll() is not None:
            raise AssertionError(f"the paused run exited ({proc.returncode}) before its pause")
        if time.monotonic() > deadline:
            raise AssertionError(f"process {proc.pid} never reached its pause")
        time.sleep(0.01)
