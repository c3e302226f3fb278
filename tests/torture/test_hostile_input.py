"""Hostile input (#11): every configuration mistake is `InvalidConfiguration`
or `InvalidFileSet`, exit 2, before any I/O (nothing on disk: the volume
stays empty), never a retryable reason and never "a bug" (exit 3).

Environment strings are capped by the kernel at 128 KiB each (MAX_ARG_STRLEN),
so the CLI gets the largest value exec allows; the 1 MB values go through
`load_config` in test_properties.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.disk import snapshot
from tests.harness.origin import Origin
from tests.harness.pod import ROOT, Run
from tests.harness.sandbox import Sandbox

pytestmark = pytest.mark.torture

BIG = 120 * 1024  # under MAX_ARG_STRLEN (32 pages) with the name
PIN = "ab" * 32


@pytest.fixture
def origin(origin: Origin) -> Origin:
    """The suite's origin, serving the model."""
    origin.put("/m/model.gguf", b"weights")
    return origin


def _refused(run: Run, box: Sandbox, reason: str) -> None:
    if box.env.get("LLMKUBE_TERMINATION_LOG", "/").startswith("/") is False:
        # No termination message where a relative path would put it (the
        # working directory); the log says why.
        assert run.returncode == 2 and f"ERROR: {reason}:" in run.stderr, str(run)
        assert not Path(ROOT, box.env["LLMKUBE_TERMINATION_LOG"]).exists()
        return
    doc = run.failed(reason, exit_code=2).term
    assert doc["retryable"] is False, doc
    assert len(run.term_raw or b"") <= 4096
    assert list(box.volume.iterdir()) == [], f"something was written before the refusal\n{run}"


# -- MODEL_FILES ---------------------------------------------------------------------------

FILE_SETS = {
    "dotdot": "../escape.bin",
    "dotdot-middle": "a/../../b.bin",
    "absolute": "/etc/passwd",
    "control": "a\x01b.bin",
    "escape": "a\x1b[31mred.bin",
    "delete": "a\x7f.bin",
    "tab": "a\tb.bin",
    "carriage-return": "model.gguf\r",
    "duplicate": "model.gguf\nmodel.gguf",
    "empty-part": "a//b.bin",
    "dot-part": "./model.gguf",
    "stamp-of-another": "model.gguf\nmodel.gguf.sha256",
    "any-stamp-name": "weights.sha256",
    "record-name": "model.gguf.llmkube-size",
    "lock-name": ".llmkube.lock",
    "lock-dir": ".llmkube.lock/x.bin",
    "validators": ".llmkube-validators",
    "part-suffix": "a.llmkube-part",
    "name-256": "n" * 256,
    "name-221": "n" * 221,
    "name-218": "n" * 218,
    "utf8-name-too-long": "é" * 110,  # 220 bytes
    "dir-256": "d" * 256 + "/a.bin",
    "path-max": "/".join(["d" * 200] * 21) + "/a.bin",
    "file-and-dir": "a\na/b.bin",
}


# torture-quick takes these; `make torture` all of them.
QUICK = frozenset(
    {
        "dotdot",
        "absolute",
        "control",
        "duplicate",
        "stamp-of-another",
        "name-221",
        "path-max",
        "dotdot-cache-dir",
        "dir-model-path",
        "timeout-overflow",
        "no-proxy-cidr",
        "relative-termination-log",
        "url-unclosed-ipv6",
        "MODEL_FILES",
        "HTTPS_PROXY",
        "LLMKUBE_CONNECT_TIMEOUT",
    }
)


def _params(table: dict[str, object]) -> list[object]:
    return [
        pytest.param(value, id=key, marks=() if key in QUICK else (pytest.mark.slow,))
        for key, value in table.items()
    ]


@pytest.mark.parametrize("files", _params(FILE_SETS))
def test_a_bad_file_list_is_refused_before_any_io(
    sandbox: Sandbox, origin: Origin, files: str
) -> None:
    sandbox.multi(origin.url + "/m", [])
    sandbox.env["MODEL_FILES"] = files

    run = sandbox.run("stage")

    _refused(run, sandbox, "InvalidFileSet")
    assert origin.requests() == []


def test_a_name_that_holds_the_suffixes_is_staged(sandbox: Sandbox, origin: Origin) -> None:
    """The limit is exact: 217 bytes leave room for the longest suffix."""
    name = "n" * 208 + ".gguf"
    assert len(name) == 213
    origin.put(f"/m/{name}", b"weights")
    sandbox.multi(origin.url + "/m", [name])

    sandbox.run("stage").ok()

    assert (sandbox.cache / name).read_bytes() == b"weights"


@pytest.mark.parametrize(
    ("name", "pinned"), [("n" * 218, False), ("n" * 156, True)], ids=["unpinned", "pinned"]
)
def test_a_long_single_file_name_is_refused(
    sandbox: Sandbox, origin: Origin, name: str, pinned: bool
) -> None:
    sandbox.single(origin.url + "/m/model.gguf", name=name)
    if pinned:
        sandbox.env["MODEL_SHA256"] = PIN

    _refused(sandbox.run("stage"), sandbox, "InvalidFileSet")


# -- every other configuration mistake -----------------------------------------------------

CONFIG = {
    # A relative CACHE_DIR is a person's local run (#13 item 9); climbing
    # out of a named directory is not.
    "climbing-relative-cache-dir": {"CACHE_DIR": "models/../../k"},
    "dotdot-cache-dir": {"CACHE_DIR": "/models/../etc"},
    "control-cache-dir": {"CACHE_DIR": "/models/k\x01"},
    "climbing-relative-model-path": {"MODEL_PATH": "k/../../model.gguf", "MODEL_FILES": None},
    "dir-model-path": {"MODEL_PATH": "/models/k/", "MODEL_FILES": None},
    "dotdot-model-path": {"MODEL_PATH": "/models/k/../../etc/x", "MODEL_FILES": None},
    "both-modes": {"MODEL_PATH": "/models/k/model.gguf"},
    "neither-mode": {"MODEL_FILES": None},
    "no-source": {"MODEL_SOURCE": None},
    "log-format": {"LLMKUBE_LOG_FORMAT": "xml"},
    "direct-io": {"LLMKUBE_DIRECT_IO": "sometimes"},
    "connections-zero": {"LLMKUBE_CONNECTIONS": "0"},
    "connections-huge": {"LLMKUBE_CONNECTIONS": "9" * 40},
    "connections-word": {"LLMKUBE_CONNECTIONS": "eight"},
    "retries-negative": {"LLMKUBE_RETRIES": "-1"},
    "timeout-nan": {"LLMKUBE_CONNECT_TIMEOUT": "nan"},
    "timeout-inf": {"LLMKUBE_STALL_TIMEOUT": "inf"},
    "timeout-overflow": {"LLMKUBE_LOCK_TIMEOUT": "1e999"},
    "timeout-zero": {"LLMKUBE_LOCK_TIMEOUT": "0"},
    "retry-wait-negative": {"LLMKUBE_MAX_RETRY_WAIT": "-5"},
    "pin-empty": {"MODEL_FILE_SHA256": ""},
    "pin-short": {"MODEL_FILE_SHA256": "abc model.gguf"},
    "pin-orphan": {"MODEL_FILE_SHA256": f"{PIN} other.gguf"},
    "pin-single-in-multi": {"MODEL_SHA256": PIN},
    "proxy-garbage": {"HTTPS_PROXY": "::not a url::"},
    "proxy-scheme": {"HTTPS_PROXY": "ftp://proxy:21"},
    "no-proxy-cidr": {"NO_PROXY": "10.0.0.0/99"},
    "relative-allowed-root": {"LLMKUBE_ALLOWED_HOST_ROOTS": "host-models"},
    "relative-host-model": {"MODEL_SOURCE": "file:///host/m.gguf", "LLMKUBE_HOST_MODEL": "m.gguf"},
    "relative-termination-log": {"LLMKUBE_TERMINATION_LOG": "termination-log"},
    "unknown-scheme": {"MODEL_SOURCE": "gopher://127.0.0.1/m"},
    "url-without-host": {"MODEL_SOURCE": "http:///m"},
    "url-unclosed-ipv6": {"MODEL_SOURCE": "http://[::1/m"},
    "url-bad-port": {"MODEL_SOURCE": "http://127.0.0.1:99999/m"},
    "url-control": {"MODEL_SOURCE": "http://127.0.0.1/m\x01"},
    "pvc-dotdot": {"MODEL_SOURCE": "pvc://claim/../../etc/passwd", "MODEL_FILES": None},
}


@pytest.mark.parametrize("env", _params(CONFIG))
def test_a_configuration_mistake_is_invalid_configuration(
    sandbox: Sandbox, origin: Origin, env: dict[str, str | None]
) -> None:
    sandbox.multi(origin.url + "/m", ["model.gguf"])
    before = snapshot(sandbox.base)

    sandbox.env.update({k: v for k, v in env.items() if v is not None})
    run = sandbox.run("stage", env=env)

    _refused(run, sandbox, "InvalidConfiguration")
    assert origin.requests() == []
    assert {k for k in snapshot(sandbox.base) if "term" not in k} == {
        k for k in before if "term" not in k
    }


# -- huge values ---------------------------------------------------------------------------

HUGE_VALUES = {
    "MODEL_SOURCE": "http://127.0.0.1:9/" + "a" * BIG,
    "CACHE_DIR": "/" + "c" * BIG,
    "MODEL_FILES": "\n".join(f"f{i}.bin" for i in range(BIG // 10)),
    "MODEL_FILE_SHA256": "\n".join(f"{PIN} f{i}.bin" for i in range(BIG // 80)),
    "HF_TOKEN": "hf_" + "t" * BIG,
    "AWS_SECRET_ACCESS_KEY": "s" * BIG,
    "HTTPS_PROXY": "http://u:" + "p" * BIG + "@127.0.0.1:9",
    "NO_PROXY": ",".join(f"h{i}.example" for i in range(BIG // 12))[:BIG],
    "LLMKUBE_CONNECT_TIMEOUT": "1" * BIG,
    "LLMKUBE_TERMINATION_LOG": "/" + "t" * BIG,
}


@pytest.mark.parametrize("var", _params({k: k for k in HUGE_VALUES}))
def test_a_huge_value_ends_with_a_reason_and_a_bounded_message(
    sandbox: Sandbox, origin: Origin, var: str
) -> None:
    sandbox.multi(origin.url + "/m", ["model.gguf"])
    if var == "MODEL_FILE_SHA256":
        sandbox.env["MODEL_FILES"] = "\n".join(f"f{i}.bin" for i in range(BIG // 80))
    before = snapshot(sandbox.outside)

    run = sandbox.run("stage", env={var: HUGE_VALUES[var]}, timeout=60)

    assert run.returncode in (0, 1, 2, 4), str(run)
    assert "Traceback" not in run.stderr, str(run)
    assert snapshot(sandbox.outside) == before
    if var != "LLMKUBE_TERMINATION_LOG":
        assert len(run.term_raw or b"") <= 4096, len(run.term_raw or b"")
        run.ended_with_a_reason()
    assert len(run.stderr) < 64 * 1024, "the huge value was echoed into the log"
