"""The image's `sh` (llmkube_stager/operator/shell.py, #30 item 1) on this
host: `sh -c SCRIPT` with the options a pod spec may add (`sh -ec`,
`sh -e -c`, `sh -xc`) runs an operator download command as the agent; an
option the agent cannot honour leaves the arguments to /bin/sh unchanged.
Run as the image runs it (its `main`, a process of its own), against a
loopback origin; on this host /bin/sh has curl, so only the agent's own
log line and termination message tell who ran the script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmkube_stager.operator.shell import command_script
from tests.harness.operator_commands import single_file
from tests.harness.origin import Origin
from tests.harness.pod import Pod, Run
from tests.harness.sample import payload

DATA = payload(64 * 1024, seed=30)
SCRIPT = single_file("http", cached=True)
AGENT_LINE = "llmkube-stager: running the operator's single-file http IfNotPresent command"
# python -c CODE ARGS...: argv is ["-c", "-m", "llmkube_stager", ARGS...] (Pod.run's shape)
_AS_SH = ["-c", "import sys; from llmkube_stager.operator.shell import main; main(sys.argv[3:])"]


def as_sh(pod: Pod, args: list[str], env: dict[str, str]) -> Run:
    return pod.run(*args, env=env, python_flags=_AS_SH)


@pytest.mark.parametrize(
    "args",
    [["-ec", SCRIPT], ["-e", "-c", SCRIPT], ["-xc", SCRIPT], ["-c", "-e", SCRIPT],
     ["-ec", "--", SCRIPT], ["-exc", SCRIPT, "sh", "extra"]],
    ids=["-ec", "-e -c", "-xc", "-c -e", "-ec --", "-exc with $0 and args"],
)  # fmt: skip
def test_sh_with_options_the_agent_honours_runs_the_agent(
    origin: Origin, tmp_path: Path, args: list[str]
) -> None:
    origin.put("/m/model.gguf", DATA)
    pod = Pod(tmp_path)
    env = pod.single_env(origin.url + "/m/model.gguf")
    run = as_sh(pod, args, env)
    assert run.returncode == 0, run
    assert AGENT_LINE in run.stderr, run
    doc = json.loads(pod.term_path.read_bytes())
    assert (doc["outcome"], doc["stats"]["fetched"]) == ("succeeded", 1), doc
    assert pod.dest().read_bytes() == DATA


@pytest.mark.parametrize(
    "args",
    [["-nc", SCRIPT], ["-uc", SCRIPT], ["-fc", SCRIPT], ["-o", "pipefail", "-c", SCRIPT],
     ["+e", "-c", SCRIPT]],
    ids=["-nc", "-uc", "-fc", "-o pipefail", "+e"],
)  # fmt: skip
def test_sh_with_an_option_the_agent_cannot_honour_is_the_real_shell(
    origin: Origin, tmp_path: Path, args: list[str]
) -> None:
    origin.put("/m/model.gguf", DATA)
    pod = Pod(tmp_path)
    env = pod.single_env(origin.url + "/m/model.gguf")
    run = as_sh(pod, args, env)
    assert AGENT_LINE not in run.stderr, run
    assert not pod.term_path.exists(), "the agent ran"
    if args[0] == "-nc":  # read, never run: nothing fetched, nothing written
        assert run.returncode == 0, run
        assert origin.requests() == []
        assert not pod.dest().exists()


def test_command_script_reads_the_operand_after_the_options() -> None:
    assert command_script(["-c", "echo a", "name", "b"]) == "echo a"
    assert command_script(["-e", "-x", "-c", "echo a"]) == "echo a"
    assert command_script(["-c"]) is None
    assert command_script(["-e", "script.sh"]) is None  # a file, not -c
    assert command_script(["script.sh", "-c", "x"]) is None
    assert command_script(["-ce", "-", "x"]) == "x"  # POSIX: a lone `-` ends the options
