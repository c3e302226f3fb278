"""What each command loads on a warm cache (#45 item 2): a warm start is
paid at every pod start and by thousands of the suite's runs, so a command
imports only what its run needs. Each command runs as a subprocess under
`python -X importtime` against a cache a first run filled from a loopback
origin; the origin sees no request from any of them.

Heavy for every command here: the cloud SDKs and HTTP stacks (no byte moves),
cryptography and model-signing (no signing key is set), and OpenSSL's hashlib
(no byte is hashed: the model is unpinned, and a plan or an inspection reads
no signature record without an anchor). click is heavy for a bare command
(entry.py runs it without click); psutil for the commands that do not name the
cache's mount (`plan` and `inspect` do: their filesystem line comes from the
mount table). `--help` and `--version` run no command, so they load none of
the commands' machinery."""

from __future__ import annotations

import pytest

from tests.harness.origin import Origin
from tests.harness.pod import Pod, import_lines

MODEL = "/m/model.gguf"
DATA = b"GGUF" + bytes(range(256)) * 40

_HEAVY = (
    "httpx",
    "httpcore",
    "h2",
    "anyio",
    "boto3",
    "botocore",
    "s3transfer",
    "huggingface_hub",
    "google",
    "azure",
    "cryptography",
    "model_signing",
    "sigstore",
    "filelock",
    "ssl",
    "http.client",
    "hashlib",
    "_hashlib",
)
_NO_MOUNT_TABLE = ("psutil",)
_NO_CLICK = ("click",)
# `--help` prints the variable table and runs no command: no boundary (and
# so no logger, termination message or value types), no command body.
_NO_COMMAND = ("llmkube_stager.boundary", "llmkube_stager.commands", "llmkube_stager.model")

# command line -> what it must not import beyond `_HEAVY`
_COMMANDS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("stage",): _NO_MOUNT_TABLE + _NO_CLICK,
    ("verify",): _NO_MOUNT_TABLE + _NO_CLICK,
    ("plan",): _NO_CLICK,
    ("inspect",): _NO_CLICK,
    ("--help",): _NO_MOUNT_TABLE + _NO_COMMAND,
    ("--version",): _NO_MOUNT_TABLE + _NO_COMMAND,
}


def loaded(stderr: str, names: tuple[str, ...]) -> set[str]:
    """The modules of `names` (or their submodules) an importtime log shows."""
    return {m for m in import_lines(stderr) if any(m == n or m.startswith(n + ".") for n in names)}


@pytest.fixture
def warm_pod(pod: Pod, origin: Origin) -> Pod:
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    first = pod.run("stage")
    first.ok(files=1, fetched=1, reused=0, nbytes=len(DATA))
    origin.clear_log()
    return pod


@pytest.mark.parametrize("args", list(_COMMANDS), ids=[" ".join(a) for a in _COMMANDS])
def test_a_warm_command_imports_only_what_it_needs(
    warm_pod: Pod, origin: Origin, args: tuple[str, ...]
) -> None:
    run = warm_pod.run(*args, python_flags=("-X", "importtime"))
    assert run.returncode == 0, str(run)
    assert len(import_lines(run.stderr)) > 20  # importtime output really was captured
    assert loaded(run.stderr, _HEAVY + _COMMANDS[args]) == set()
    assert origin.requests() == []


def test_the_check_sees_a_heavy_import(warm_pod: Pod) -> None:
    """The same check on a run that needs click and the mount table: an
    option goes through click, and `plan` reads the mount table."""
    run = warm_pod.run("plan", "--json", python_flags=("-X", "importtime"))
    assert run.returncode == 0, str(run)
    assert loaded(run.stderr, _NO_CLICK + _NO_MOUNT_TABLE) >= {"click", "psutil"}
