"""`llmkube-stager stage` end to end: a subprocess with a pod-like environment
against the loopback origin; exit codes, termination message (CONTRACT §5),
bytes and records on disk (§4), requests made, logs (§6, spec §13)."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmkube_stager.layout import ATOMIC_TMP_INFIX
from tests.harness.contract import CONTRACT_VARS, flag_of
from tests.harness.disk import debris, partials_of, record_of
from tests.harness.origin import Blackhole, Fault, Origin, closed_port_url
from tests.harness.pod import Pod, import_lines, wait_for
from tests.harness.sample import gguf_like, write_sample_tree
from tests.harness.schema import validate_termination
from tests.harness.tlsca import tls_server_context

pytestmark = pytest.mark.e2e

MODEL = "/m/model.gguf"
DATA = gguf_like(3 << 20, seed=11)


@pytest.fixture
def sample_repo(tmp_path: Path, origin: Origin) -> tuple[str, dict[str, bytes]]:
    """A multi-file repo served at <origin>/org/repo/resolve/main/ (with a subdirectory)."""
    tree = tmp_path / "upstream"
    layout = write_sample_tree(str(tree), gguf_size=64 << 10, shard_size=300 << 10)
    origin.serve_directory(str(tree / "multi"), prefix="/org/repo/resolve/main")
    files = {rel: (tree / "multi" / rel).read_bytes() for rel in layout["multi"]}
    return origin.url + "/org/repo/resolve/main/", files


# -- success, cold then warm ---------------------------------------------------------


def test_single_file_cold_then_warm(pod: Pod, origin: Origin) -> None:
    origin.put(MODEL, DATA)
    dest = pod.single(origin.url + MODEL)

    cold = pod.run("stage")
    doc = cold.ok(files=1, fetched=1, reused=0, nbytes=len(DATA)).term
    assert doc["source"] == origin.url + MODEL
    assert dest.read_bytes() == DATA
    assert record_of(dest) == str(len(DATA))
    assert debris(pod.models) == []
    gets = origin.requests(MODEL, "GET")
    assert len(gets) == 1 and gets[0].status == 200
    assert "Downloading model..." in cold.stderr
    assert "Model downloaded successfully" in cold.stderr
    assert cold.stdout == ""

    before = dest.stat()
    origin.clear_log()
    warm = pod.run("stage")
    warm.ok(files=1, fetched=0, reused=1, nbytes=0)
    assert origin.requests() == [], "a warm start must not contact the origin"
    assert "Model already cached, skipping download" in warm.stderr
    after = dest.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (
        before.st_ino,
        before.st_mtime_ns,
        before.st_size,
    )


def test_multi_file_cold_then_warm(
    pod: Pod, origin: Origin, sample_repo: tuple[str, dict[str, bytes]]
) -> None:
    base, files = sample_repo
    cache_dir = pod.multi(base, files)
    total = sum(len(b) for b in files.values())

    cold = pod.run("stage")
    cold.ok(files=4, fetched=4, reused=0, nbytes=total)
    for rel, data in files.items():
        dest = cache_dir / rel
        assert dest.read_bytes() == data, rel
        assert record_of(dest) == str(len(data)), rel
        assert f"Downloading model artifact {rel}..." in cold.stderr
    assert (cache_dir / "tokenizer" / "tokenizer.json").is_file()
    assert debris(cache_dir) == []
    assert sorted(r.path for r in origin.requests(method="GET")) == sorted(
        "/org/repo/resolve/main/" + rel for rel in files
    )

    origin.clear_log()
    warm = pod.run("stage")
    doc = warm.ok(files=4, fetched=0, reused=4, nbytes=0).term
    assert doc["stats"]["reused"] == doc["stats"]["files"]
    assert origin.requests() == []
    for rel in files:
        assert f"Model artifact {rel} already cached, skipping download" in warm.stderr


def test_warm_start_needs_no_origin(
    pod: Pod, origin: Origin, sample_repo: tuple[str, dict[str, bytes]]
) -> None:
    """spec §8.4: a warm cache serves with the origin gone (a legacy file too)."""
    base, files = sample_repo
    cache_dir = pod.multi(base, files)
    assert pod.run("stage").returncode == 0
    # One file from before size records existed: kept as-is and backfilled.
    (cache_dir / "config.json.llmkube-size").unlink()
    # Gone at the same address: another address is another source, which the
    # directory does not hold (#46 item 2).
    origin.close()
    run = pod.run("stage")
    run.ok(files=4, fetched=0, reused=3, kept=1, nbytes=0)
    assert record_of(cache_dir / "config.json") == str(len(files["config.json"]))
    assert "Model artifact config.json already cached, skipping download" in run.stderr


def test_emptydir_single_file_without_cache_dir(pod: Pod, origin: Origin) -> None:
    """spec §2.1: the uncached single-file shape sets CACHE_DIR to ""."""
    origin.put(MODEL, DATA)
    dest = pod.models / "ns-model.gguf"
    pod.env.update(MODEL_SOURCE=origin.url + MODEL, CACHE_DIR="", MODEL_PATH=str(dest))
    cold = pod.run("stage")
    cold.ok(files=1, fetched=1, reused=0, nbytes=len(DATA))
    assert dest.read_bytes() == DATA
    origin.clear_log()
    warm = pod.run("stage")
    warm.ok(files=1, fetched=0, reused=1, nbytes=0)
    assert "Model already exists, skipping download" in warm.stderr
    assert origin.requests() == []


def test_file_names_needing_percent_encoding(pod: Pod, origin: Origin) -> None:
    names = {"my model.bin": b"a" * 10, "модель/вес.bin": b"b" * 20, "q?x#y.bin": b"c" * 5}
    for rel, data in names.items():
        origin.put("/r/" + rel, data)
    cache_dir = pod.multi(origin.url + "/r/", names)
    run = pod.run("stage")
    run.ok(files=3, fetched=3, reused=0, nbytes=35)
    for rel, data in names.items():
        assert (cache_dir / rel).read_bytes() == data
    paths = {r.path for r in origin.requests(method="GET")}
    assert "/r/my%20model.bin" in paths and "/r/q%3Fx%23y.bin" in paths


# -- the termination file ------------------------------------------------------------


def test_termination_message_is_written_in_place(pod: Pod, origin: Origin) -> None:
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    pod.term_path.write_bytes(b"x" * 10_000)  # longer than any message: must be truncated
    alias = pod.tmp / "termination-log.alias"
    os.link(pod.term_path, alias)  # a rename onto the path would split the two names
    inode = pod.term_path.stat().st_ino

    ok = pod.run("stage", fresh_term=False)
    ok.ok(files=1, fetched=1, reused=0)
    assert pod.term_path.stat().st_ino == inode
    assert alias.read_bytes() == ok.term_raw

    origin.remove(MODEL)
    pod.single(origin.url + MODEL, key="other")
    failed = pod.run("stage", fresh_term=False)
    failed.failed("ModelSourceNotFound", exit_code=4, retryable=False)
    assert pod.term_path.stat().st_ino == inode
    assert alias.read_bytes() == failed.term_raw


@pytest.mark.parametrize("present", [True, False], ids=["success", "failure"])
def test_unwritable_termination_path_is_skipped_quietly(
    pod: Pod, origin: Origin, present: bool
) -> None:
    if present:
        origin.put(MODEL, DATA)
    dest = pod.single(origin.url + MODEL)
    missing_dir = pod.tmp / "no-such-dir"
    run = pod.run("stage", env={"LLMKUBE_TERMINATION_LOG": str(missing_dir / "termination-log")})
    assert run.returncode == (0 if present else 4), str(run)
    assert "Traceback" not in run.stderr
    assert not missing_dir.exists()
    assert dest.is_file() is present
    if not present:
        assert "ERROR: ModelSourceNotFound:" in run.stderr


# -- failures ------------------------------------------------------------------------


def test_not_found_single_file(pod: Pod, origin: Origin) -> None:
    dest = pod.single(origin.url + MODEL)
    run = pod.run("stage")
    doc = run.failed("ModelSourceNotFound", exit_code=4, retryable=False).term
    assert doc["file"] == "model.gguf"
    assert doc["source"] == origin.url + MODEL
    assert not dest.exists()
    assert partials_of(dest) == []
    assert len(origin.requests(MODEL)) >= 1
    assert all(r.status == 404 for r in origin.requests(MODEL))


def test_closed_port_is_unreachable_and_retryable(pod: Pod) -> None:
    dest = pod.single(closed_port_url() + MODEL)
    run = pod.run("stage")
    doc = run.failed("ModelSourceUnreachable", exit_code=1, retryable=True).term
    assert doc["file"] == "model.gguf"
    assert not dest.exists()


def test_blackhole_times_out_as_unreachable(pod: Pod) -> None:
    with Blackhole("accept") as hole:
        pod.single(hole.url + MODEL)
        run = pod.run("stage", env={"LLMKUBE_RETRIES": "0"}, timeout=30)
    run.failed("ModelSourceUnreachable", exit_code=1, retryable=True)


@pytest.mark.parametrize(
    ("status", "reason", "retryable"),
    [
        (401, "ModelSourceUnauthorized", False),
        (403, "ModelSourceUnauthorized", False),
        (429, "ModelSourceRateLimited", True),
    ],
)
def test_http_status_reasons(
    pod: Pod, origin: Origin, status: int, reason: str, retryable: bool
) -> None:
    origin.put(MODEL, DATA)
    origin.set_fault(MODEL, Fault(status=status, retry_after="0" if status == 429 else None))
    dest = pod.single(origin.url + MODEL)
    run = pod.run("stage")
    run.failed(reason, exit_code=1 if retryable else 4, retryable=retryable)
    assert not dest.exists()


def test_hf_repo_missing_on_the_mirror_is_not_found(pod: Pod, origin: Origin) -> None:
    """A repo-shaped URL on HF_ENDPOINT that the mirror does not have: the
    origin answered, so it is NotFound, never Unreachable."""
    pod.env["HF_ENDPOINT"] = origin.url
    dest = pod.single(origin.url + "/org/no-such-repo/resolve/main/model.gguf")
    run = pod.run("stage")
    run.failed("ModelSourceNotFound", exit_code=4, retryable=False)
    assert not dest.exists()
    assert origin.requests(), "the mirror was never asked"


def test_multi_file_not_found_logs_failed_to_download(
    pod: Pod, origin: Origin, sample_repo: tuple[str, dict[str, bytes]]
) -> None:
    base, files = sample_repo
    rels = ["config.json", "missing/weights.safetensors", "model-00001-of-00002.safetensors"]
    cache_dir = pod.multi(base, rels)
    run = pod.run("stage")
    doc = run.failed("ModelSourceNotFound", exit_code=4, retryable=False).term
    assert doc["file"] == "missing/weights.safetensors"
    assert "failed to download missing/weights.safetensors" in run.stderr
    # The file before the failure was published properly, the missing one not at all.
    assert (cache_dir / "config.json").read_bytes() == files["config.json"]
    assert record_of(cache_dir / "config.json") == str(len(files["config.json"]))
    assert not (cache_dir / "missing" / "weights.safetensors").exists()


def test_oversized_failure_message_is_cut_to_valid_json(pod: Pod, origin: Origin) -> None:
    long_path = "/m/" + "very-long-directory-name/" * 250 + "model.gguf"  # ~6 KB URL
    pod.single(origin.url + long_path)
    run = pod.run("stage")
    doc = run.failed("ModelSourceNotFound", exit_code=4, retryable=False, log_line=False).term
    assert len(run.term_raw or b"") <= 2048  # the pod budget (docs/operations.md)
    assert doc["message"].endswith(doc["remedy"])


# -- configuration errors (exit 2, before any I/O) -----------------------------------


def _single_env(pod: Pod, origin: Origin) -> None:
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)


CONFIG_ERRORS = [
    pytest.param({"MODEL_SOURCE": None}, "MODEL_SOURCE", id="missing-source"),
    pytest.param({"MODEL_SOURCE": "  "}, "MODEL_SOURCE", id="blank-source"),
    pytest.param({"LLMKUBE_CONNECT_TIMEOUT": "abc"}, "LLMKUBE_CONNECT_TIMEOUT", id="connect-abc"),
    pytest.param({"LLMKUBE_STALL_TIMEOUT": "0"}, "LLMKUBE_STALL_TIMEOUT", id="stall-zero"),
    pytest.param({"LLMKUBE_MAX_RETRY_WAIT": "nan"}, "LLMKUBE_MAX_RETRY_WAIT", id="retry-wait-nan"),
    pytest.param({"LLMKUBE_LOCK_TIMEOUT": "abc"}, "LLMKUBE_LOCK_TIMEOUT", id="lock-timeout-abc"),
    pytest.param({"LLMKUBE_RETRIES": "-1"}, "LLMKUBE_RETRIES", id="retries-negative"),
    pytest.param({"LLMKUBE_LOG_FORMAT": "xml"}, "LLMKUBE_LOG_FORMAT", id="log-format-xml"),
    # The values the scripts tolerated are not errors: test_dropin_config.py.
    pytest.param({"MODEL_SHA256": "abc123"}, "MODEL_SHA256", id="sha256-short"),
    pytest.param({"MODEL_FILES": "a.gguf\nb.gguf"}, "MODEL_FILES", id="both-path-and-files"),
    pytest.param({"MODEL_PATH": None}, "MODEL_PATH", id="neither-path-nor-files"),
    pytest.param(
        {"MODEL_PATH": None, "CACHE_DIR": None, "MODEL_FILES": "a.gguf"},
        "CACHE_DIR",
        id="files-without-cache-dir",
    ),
    pytest.param({"MODEL_PATH": "~/models/k1/model.gguf"}, "MODEL_PATH", id="unexpanded-tilde"),
    pytest.param({"MODEL_SOURCE": "ftp://127.0.0.1/m.gguf"}, "MODEL_SOURCE", id="ftp-scheme"),
    pytest.param({"MODEL_SOURCE": "http:///m.gguf"}, "MODEL_SOURCE", id="no-host"),
    pytest.param(
        {"MODEL_SOURCE": "http://127.0.0.1:99999999/m.gguf"}, "MODEL_SOURCE", id="bad-port"
    ),
]


@pytest.mark.parametrize(("overrides", "var"), CONFIG_ERRORS)
def test_config_errors_exit_2_and_touch_nothing(
    pod: Pod, origin: Origin, overrides: dict[str, str | None], var: str
) -> None:
    _single_env(pod, origin)
    run = pod.run("stage", env=overrides)
    doc = run.failed("InvalidConfiguration", exit_code=2, retryable=False).term
    assert var in doc["message"], doc["message"]
    if var == "MODEL_FILES":
        assert "MODEL_PATH" in doc["message"]
    assert not pod.models.exists(), "a configuration error must leave the disk untouched"
    assert origin.requests() == []


def test_flag_wins_over_valid_env(pod: Pod, origin: Origin) -> None:
    _single_env(pod, origin)
    run = pod.run("stage", "--llmkube-connect-timeout", "abc")
    doc = run.failed("InvalidConfiguration", exit_code=2, retryable=False).term
    assert "LLMKUBE_CONNECT_TIMEOUT" in doc["message"]
    assert not pod.models.exists()
    assert origin.requests() == []


def test_flag_wins_over_invalid_env(pod: Pod, origin: Origin) -> None:
    _single_env(pod, origin)
    good = pod.env["MODEL_SOURCE"]
    run = pod.run(
        "stage",
        "--model-source",
        good,
        "--llmkube-connect-timeout",
        "2",
        env={"MODEL_SOURCE": "ftp://bad.invalid/x", "LLMKUBE_CONNECT_TIMEOUT": "abc"},
    )
    run.ok(files=1, fetched=1, reused=0, nbytes=len(DATA))
    assert len(origin.requests(MODEL, "GET")) == 1


@pytest.mark.parametrize(
    "args", [("--no-such-flag",), ("--model-source",)], ids=["unknown", "bare"]
)
def test_usage_error_writes_invalid_configuration(
    pod: Pod, origin: Origin, args: tuple[str, ...]
) -> None:
    _single_env(pod, origin)
    run = pod.run("stage", *args)
    assert run.returncode == 2, str(run)
    assert not pod.models.exists()
    assert origin.requests() == []
    doc = run.failed("InvalidConfiguration", exit_code=2, retryable=False).term
    assert args[0] in doc["message"]


INVALID_FILE_SETS = {
    "absolute": ["config.json", "/etc/passwd"],
    "dotdot": ["config.json", "sub/../../escape.bin"],
    "duplicate": ["config.json", "model.gguf", "config.json"],
    "dot-part": ["./config.json"],
    "reserved-record-name": ["model.gguf.llmkube-size"],
}


@pytest.mark.parametrize("files", INVALID_FILE_SETS.values(), ids=INVALID_FILE_SETS.keys())
def test_invalid_file_set_env(pod: Pod, origin: Origin, files: list[str]) -> None:
    origin.put("/repo/config.json", b"{}")
    pod.multi(origin.url + "/repo/", files)
    run = pod.run("stage")
    run.failed("InvalidFileSet", exit_code=2, retryable=False)
    assert not pod.models.exists()
    assert origin.requests() == []


def test_invalid_file_set_control_char_via_flag(pod: Pod, origin: Origin) -> None:
    origin.put("/repo/config.json", b"{}")
    pod.multi(origin.url + "/repo/", ["config.json"])
    run = pod.run("stage", "--model-files", "config.json\nweights\x01.bin")
    doc = run.failed("InvalidFileSet", exit_code=2, retryable=False).term
    assert "\x01" not in run.stderr  # shown escaped, never raw
    assert doc["reason"] == "InvalidFileSet"
    assert not pod.models.exists()
    assert origin.requests() == []


# -- logs ------------------------------------------------------------------------------


def _throttled_pair(origin: Origin, base: str) -> list[str]:
    """Two files; the big one throttled so that progress lines get printed."""
    origin.put(base + "config.json", b'{"a": 1}\n')
    origin.put(base + "big.bin", gguf_like(2 << 20, seed=5))
    origin.set_fault(base + "big.bin", Fault(rate_bytes_per_s=5 << 20))
    return ["config.json", "big.bin"]


def test_json_logs_every_line_is_an_event(pod: Pod, origin: Origin) -> None:
    files = _throttled_pair(origin, "/repo/")
    pod.multi(origin.url + "/repo/", files)
    env = {"LLMKUBE_LOG_FORMAT": "json", "PROGRESS_INTERVAL": "0.1"}
    ok = pod.run("stage", env=env)
    ok.ok(files=2, fetched=2, reused=0)

    origin.set_fault("/repo/gone.bin", Fault(status=500))
    pod.multi(origin.url + "/repo/", ["config.json", "gone.bin"], key="k3")
    failed = pod.run("stage", env=env)
    assert failed.returncode == 1, str(failed)  # a 500: retryable

    invalid = pod.run("stage", env={**env, "LLMKUBE_RETRIES": "many"})
    assert invalid.returncode == 2, str(invalid)

    for run in (ok, failed, invalid):
        lines = run.stderr.splitlines()
        assert lines
        events = []
        for line in lines:
            record = json.loads(line)
            assert isinstance(record, dict), line
            for key in ("level", "event", "msg"):
                assert key in record, line
            events.append(record)
        if run is ok:
            names = {e["event"] for e in events}
            assert {"download_start", "progress"} <= names, names
        elif run is invalid:
            assert "LLMKUBE_RETRIES" in events[-1]["msg"]
            assert events[-1]["msg"] == invalid.term["message"]
        else:
            last_error = [e for e in events if e["level"] == "error"][-1]
            assert last_error["msg"] == failed.term["message"]
            assert any(e["level"] == "warning" for e in events), "the 500 retry is not logged"


def test_json_logs_usage_error_is_json_too(pod: Pod, origin: Origin) -> None:
    _single_env(pod, origin)
    run = pod.run("stage", "--no-such-flag", env={"LLMKUBE_LOG_FORMAT": "json"})
    assert run.returncode == 2, str(run)
    assert run.term["reason"] == "InvalidConfiguration"
    lines = run.stderr.splitlines()
    assert any("--no-such-flag" in line for line in lines)
    for line in lines:
        assert isinstance(json.loads(line), dict), line


def test_text_logs_have_progress_lines_and_no_carriage_return(pod: Pod, origin: Origin) -> None:
    files = _throttled_pair(origin, "/repo/")
    pod.multi(origin.url + "/repo/", files)
    run = pod.run("stage", env={"PROGRESS_INTERVAL": "0.1"})
    run.ok(files=2, fetched=2, reused=0)
    assert "\r" not in run.stderr
    assert re.search(r"^Downloaded \d+ MiB of 2 MiB \(\d+%\)", run.stderr, re.M), run.stderr
    for line in run.stderr.splitlines():
        assert not line.startswith("{"), line


def test_hang_up_mid_body_is_resumed_within_the_run(pod: Pod, origin: Origin) -> None:
    origin.put(MODEL, DATA)
    origin.set_fault(MODEL, Fault(truncate_after=1 << 20, times=1, methods=("GET",)))
    dest = pod.single(origin.url + MODEL)
    run = pod.run("stage")
    run.ok(files=1, fetched=1, reused=0, nbytes=len(DATA))
    first, second = origin.requests(MODEL, "GET")
    assert first.status == 200 and "range" not in first.headers
    assert second.status == 206 and second.headers["range"] == f"bytes={1 << 20}-"
    assert dest.read_bytes() == DATA
    assert debris(pod.models) == []


def test_concurrent_stagers_transfer_once(pod: Pod, origin: Origin) -> None:
    """Writers on one (non-FUSE) cache: one transfers, a second waits for the
    lock and reuses the result, a third gives up after LLMKUBE_LOCK_TIMEOUT."""
    data = gguf_like(3 << 20, seed=8)
    origin.put(MODEL, data)
    # The first writer's body stalls after 1 MiB; it holds the lock for its
    # whole 3 s stall timeout (a window that does not depend on machine load),
    # then resumes with a Range request and publishes.
    origin.set_fault(MODEL, Fault(stall_after=1 << 20, times=1, methods=("GET",)))
    dest = pod.single(origin.url + MODEL)
    term_a, term_b = pod.tmp / "term-a", pod.tmp / "term-b"
    first = pod.popen(
        "stage", env={"LLMKUBE_TERMINATION_LOG": str(term_a), "LLMKUBE_STALL_TIMEOUT": "3"}
    )
    wait_for(lambda: bool(origin.requests(MODEL, "GET")), 15, "the first writer's GET", first)
    second = pod.popen("stage", env={"LLMKUBE_TERMINATION_LOG": str(term_b)})
    impatient = pod.run("stage", env={"LLMKUBE_LOCK_TIMEOUT": "0.3"})
    a = pod.finish(first)
    b = pod.finish(second)

    assert a.returncode == 0, str(a)
    assert validate_termination(term_a.read_bytes())["stats"]["fetched"] == 1
    assert b.returncode == 0, str(b)
    assert validate_termination(term_b.read_bytes())["stats"]["reused"] == 1
    impatient.failed("ModelCacheLockTimeout", exit_code=1, retryable=True)
    assert dest.read_bytes() == data
    gets = origin.requests(MODEL, "GET")
    assert [g.status for g in gets] == [200, 206], "the model was transferred more than once"
    assert gets[1].headers["range"] == f"bytes={1 << 20}-"


# -- SIGTERM and resume --------------------------------------------------------------


def test_sigterm_keeps_partial_and_next_run_resumes(pod: Pod, origin: Origin) -> None:
    data = gguf_like(8 << 20, seed=21)
    origin.put(MODEL, data)
    origin.set_fault(MODEL, Fault(rate_bytes_per_s=4 << 20))  # ~2 s for the whole file
    dest = pod.single(origin.url + MODEL)

    proc = pod.popen("stage")

    def partial_has_bytes() -> bool:
        return any(p.stat().st_size > 0 for p in partials_of(dest))

    wait_for(partial_has_bytes, 15, "a partial with bytes in it", proc)
    proc.send_signal(signal.SIGTERM)
    cancelled = pod.finish(proc)
    doc = cancelled.failed("ModelTransferCancelled", exit_code=1, retryable=True).term
    assert doc["file"] == "model.gguf"
    assert not dest.exists()
    (partial,) = partials_of(dest)
    kept = partial.stat().st_size
    assert 0 < kept < len(data)
    assert partial.read_bytes() == data[:kept]

    origin.set_fault(MODEL, None)
    origin.clear_log()
    resumed = pod.run("stage")
    resumed.ok(files=1, fetched=1, reused=0, nbytes=len(data) - kept)
    gets = origin.requests(MODEL, "GET")
    assert len(gets) == 1, gets
    assert gets[0].headers.get("range") == f"bytes={kept}-"
    assert gets[0].status == 206
    assert dest.read_bytes() == data
    assert record_of(dest) == str(len(data))
    assert partials_of(dest) == []


# -- warm start imports no HTTP library ----------------------------------------------

_HTTP_MODULES = ("httpx", "http.client", "ssl", "boto3", "huggingface_hub")
# Write-path libraries (#15): the lock and the free-space preflight only.
_WRITE_PATH_MODULES = ("filelock", "psutil")


def _http_imports(stderr: str) -> set[str]:
    return {
        m
        for m in import_lines(stderr)
        if any(m == name or m.startswith(name + ".") for name in _HTTP_MODULES)
    }


def _imported(stderr: str, names: tuple[str, ...]) -> set[str]:
    return {
        m
        for m in import_lines(stderr)
        if any(m == name or m.startswith(name + ".") for name in names)
    }


def test_warm_start_imports_no_http_library(pod: Pod, origin: Origin) -> None:
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    cold = pod.run("stage", python_flags=("-X", "importtime"))
    assert cold.returncode == 0, str(cold)
    # The check can fail: a cold run does pull in the HTTP stack, the lock
    # (filelock) and the free-space preflight (psutil). A plain origin needs
    # no httpx at all: probes and bodies go through http.client (#16).
    assert {"http.client", "ssl"} <= _http_imports(cold.stderr)
    assert {"filelock", "psutil"} <= _imported(cold.stderr, _WRITE_PATH_MODULES)

    warm = pod.run("stage", python_flags=("-X", "importtime"))
    warm.ok(files=1, fetched=0, reused=1)
    assert len(import_lines(warm.stderr)) > 20  # importtime output really was captured
    assert _http_imports(warm.stderr) == set()
    assert _imported(warm.stderr, _WRITE_PATH_MODULES) == set()


# What a warm start of a bare `stage` (the operator's pods pass no option)
# need not load (#16): click (entry.py runs the command without it), OpenSSL
# (no byte is hashed on a stamp hit or an unpinned reuse), `secrets`.
_WARM_NEEDLESS = ("click", "hashlib", "_hashlib", "secrets", "random")


def test_bare_warm_start_imports_no_click_and_no_openssl(pod: Pod, origin: Origin) -> None:
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    assert pod.run("stage").returncode == 0
    warm = pod.run("stage", python_flags=("-X", "importtime"))
    warm.ok(files=1, fetched=0, reused=1)
    assert len(import_lines(warm.stderr)) > 20  # importtime output really was captured
    assert _imported(warm.stderr, _WARM_NEEDLESS) == set()
    # The check can fail: the same command with an option goes through click.
    flagged = pod.run(
        "stage", "--llmkube-refresh-policy", "IfNotPresent", python_flags=("-X", "importtime")
    )
    flagged.ok(files=1, fetched=0, reused=1)
    assert "click" in _imported(flagged.stderr, _WARM_NEEDLESS)


# -- TLS -------------------------------------------------------------------------------


@pytest.fixture
def tls_origin(tmp_path: Path) -> Iterator[tuple[Origin, Path]]:
    """An https origin with a private CA; yields it and a CA directory."""
    ctx, certs = tls_server_context(tmp_path)
    with Origin(tls=ctx) as srv:
        yield srv, certs


def test_tls_untrusted_then_trusted_through_ca_dir(
    pod: Pod, tls_origin: tuple[Origin, Path], tmp_path: Path
) -> None:
    origin, certs = tls_origin
    origin.put(MODEL, DATA)
    dest = pod.single(origin.url + MODEL)
    empty = tmp_path / "no-certs"
    empty.mkdir()

    untrusted = pod.run("stage", env={"LLMKUBE_CA_DIR": str(empty)})
    untrusted.failed("ModelSourceUntrusted", exit_code=4, retryable=False)
    assert not dest.exists()

    trusted = pod.run("stage", env={"LLMKUBE_CA_DIR": str(certs)})
    trusted.ok(files=1, fetched=1, reused=0, nbytes=len(DATA))
    assert dest.read_bytes() == DATA


# -- --help ----------------------------------------------------------------------------


def test_help_of_every_command(pod: Pod) -> None:
    top = pod.run("--help")
    assert top.returncode == 0, str(top)
    section = top.stdout.split("Commands:", 1)[1]
    commands = re.findall(r"^\s{2}(\w[\w-]*)", section, re.M)
    assert {"stage", "plan"} <= set(commands), top.stdout
    for command in commands:
        run = pod.run(command, "--help")
        assert run.returncode == 0, str(run)
        assert "Usage:" in run.stdout
        assert run.term_raw is None, "--help must not write a termination message"
        if command in ("stage", "plan"):
            for var in CONTRACT_VARS:
                assert flag_of(var) in run.stdout, f"{command} --help lacks {flag_of(var)}"
    plan_help = pod.run("plan", "--help").stdout
    assert "--json" in plan_help and "--probe" in plan_help


def test_sigkill_during_widened_ranges_resumes_from_the_journal(pod: Pod, origin: Origin) -> None:
    """One stream, widened to ranged connections on a capped origin, killed
    with SIGKILL (no handler runs): the next run asks only for what the
    journal does not vouch for, and publishes the exact bytes (#6)."""
    size = 48 << 20
    data = gguf_like(size, seed=22)
    origin.put(MODEL, data, rate_bytes_per_s=6 << 20)
    dest = pod.single(origin.url + MODEL)
    proc = pod.popen("stage", env={"LLMKUBE_CONNECTIONS": "4"})

    def journaled() -> int:
        """What the committed journal vouches for. A kill may land between
        the write of the journal's atomic temp and its rename: that temp
        vouches for nothing (it flaked 1 in 5-8 counting it)."""
        total = 0
        for path in dest.parent.glob("*.llmkube-journal*") if dest.parent.is_dir() else []:
            if ATOMIC_TMP_INFIX in path.name:
                continue
            try:
                total = max(total, sum(e - s for s, e in json.loads(path.read_text())["done"]))
            except (OSError, ValueError, KeyError):
                continue
        return total

    wait_for(lambda: journaled() >= 12 << 20, 20, "a journal of 12 MiB", proc)
    proc.kill()
    proc.wait()
    kept = journaled()
    assert kept < size

    origin.put(MODEL, data)  # the same bytes and ETag, uncapped
    origin.clear_log()
    resumed = pod.run("stage", env={"LLMKUBE_CONNECTIONS": "4"})

    resumed.ok(files=1, fetched=1, reused=0)
    gets = origin.requests(MODEL, "GET")
    assert gets and all("range" in g.headers for g in gets), "a GET from byte 0"
    assert sum(g.body_bytes for g in gets) <= size - kept
    assert dest.read_bytes() == data
    assert record_of(dest) == str(size)
    assert partials_of(dest) == []
    leftovers = [*dest.parent.glob("*.llmkube-segs*"), *dest.parent.glob("*.llmkube-journal*")]
    # A journal temp the kill left is atomic-write debris: the sweep removes
    # it after its 10 minutes (scenario 63), not this run.
    leftovers = [p for p in leftovers if ATOMIC_TMP_INFIX not in p.name]
    listing = [p.name for p in dest.parent.iterdir()]
    assert leftovers == [], (listing, [p.read_text()[:300] for p in leftovers], resumed.stderr)


def test_a_40_file_warm_start_makes_no_request_and_imports_no_write_library(
    pod: Pod, origin: Origin
) -> None:
    names = [f"shard-{i:02d}.bin" for i in range(40)]
    for name in names:
        origin.put(f"/m/{name}", DATA[:1000] + name.encode())
    pod.multi(origin.url + "/m", names)
    assert pod.run("stage").returncode == 0
    origin.clear_log()

    warm = pod.run("stage", python_flags=("-X", "importtime"))

    warm.ok(files=40, fetched=0, reused=40)
    assert origin.requests() == []
    modules = _HTTP_MODULES + _WRITE_PATH_MODULES
    assert _imported(warm.stderr, modules) == set()
