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
from tests.harness.operator_commands import by_name, write_catalogue
from tests.harness.origin import Origin
from tests.harness.pod import Pod, Run
from tests.harness.sample import payload

DATA = payload(64 * 1024, seed=30)
SCRIPT = by_name("single http IfNotPresent cache").script
AGENT_LINE = (
    "llmkube-stager: running the suite's single http IfNotPresent cache command "
    "(single-file http IfNotPresent)"
)
# python -c CODE ARGS...: argv is ["-c", "-m", "llmkube_stager", ARGS...] (Pod.run's shape);
# the suite's commands are its catalogue, as a site's file would add them.
_AS_SH = [
    "-c",
    "import sys; from llmkube_stager.operator.shell import main; "
    "from tests.harness.operator_commands import catalogue; main(sys.argv[3:], catalogue())",
]


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


CANARY = "CANARY-39-5d1c"


def test_an_unknown_download_is_refused_before_any_request_and_shows_no_value(
    origin: Origin, tmp_path: Path
) -> None:
    """#39 item 2: a near miss that carries a credential in an attached option."""
    origin.put("/m/model.gguf", DATA)
    pod = Pod(tmp_path)
    env = pod.single_env(origin.url + "/m/model.gguf")
    script = SCRIPT.replace("curl ", f"curl -uadmin:{CANARY} -HX-Api-Key:{CANARY} ", 1)
    run = as_sh(pod, ["-c", script], env)
    assert run.returncode == 2, run
    assert origin.requests() == [], "refused before any I/O"
    assert not pod.dest().exists()
    term = pod.term_path.read_text()
    doc = json.loads(term)
    assert doc["reason"] == "InvalidConfiguration", doc
    assert "nearest known command: the suite's single http IfNotPresent cache command" in term
    assert "command 7" in term and "differs" in term, term
    for text in (term, run.stderr, run.stdout):
        assert CANARY not in text
        assert "admin" not in text and "X-Api-Key" not in text


def test_check_command_names_the_command_and_what_the_agent_does(tmp_path: Path) -> None:
    """#39 item 5: a pod's command as JSON (kubectl's jsonpath), a whole pod,
    and a refusal; the verdicts print no value of the script."""
    pod = Pod(tmp_path)
    site = tmp_path / "catalogue"
    check = ["check-command", "--catalogue", str(write_catalogue(site)), "-"]
    argv = json.dumps(["sh", "-c", SCRIPT])
    run = pod.run(*check, stdin=argv)
    assert run.returncode == 0, run
    assert "the suite's single http IfNotPresent cache command (LLMKube suite)" in run.stdout
    assert "the agent runs it: stage MODEL_PATH from an http(s) or hf:// MODEL_SOURCE" in run.stdout
    bad = SCRIPT.replace("curl ", f"curl -uadmin:{CANARY} ", 1)
    manifest = {
        "kind": "Pod",
        "spec": {
            "initContainers": [
                {"name": "prep", "command": ["sh", "-c", "chown 100:100 /models"]},
                {"name": "model-downloader", "command": ["sh", "-c", bad]},
            ],
            "containers": [{"name": "server", "image": "x", "args": ["--model", "m"]}],
        },
    }
    run = pod.run(*check, "--json", stdin=json.dumps(manifest))
    assert run.returncode == 1, run
    verdicts = json.loads(run.stdout)
    assert [(v["container"], v["action"]) for v in verdicts] == [
        ("prep", "sh"),
        ("model-downloader", "refused"),
    ]
    assert "nearest known command" in verdicts[1]["detail"]
    assert CANARY not in run.stdout + run.stderr
    run = pod.run(*check, stdin="{not json")
    assert run.returncode == 0, run  # read as a script, which downloads nothing
    assert "/bin/sh" in run.stdout
