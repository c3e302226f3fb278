"""Helpers for the end-to-end tests: run `llmkube-stager` as a subprocess with a
pod-like environment and look at everything it left behind.

The child gets a minimal environment (PATH, HOME, LANG and what the test sets),
never the developer's os.environ, so no stray credential can leak into a test
and no stray setting can make one pass.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness.tlsca import make_ca

# The checkout the tests belong to: the child runs with it as its working
# directory, so `python -m llmkube_stager` imports this tree's package.
ROOT = Path(__file__).resolve().parents[2]

MAX_TERMINATION_BYTES = 4096
SHORT_TIMEOUTS = {
    "LLMKUBE_CONNECT_TIMEOUT": "1",
    "LLMKUBE_STALL_TIMEOUT": "1",
    "LLMKUBE_RETRIES": "1",
    "LLMKUBE_MAX_RETRY_WAIT": "1",
}
# Every variable of CONTRACT §3; each must also be a flag.
CONTRACT_VARS = (
    "MODEL_SOURCE",
    "CACHE_DIR",
    "MODEL_PATH",
    "MODEL_FILES",
    "S3_BUCKET",
    "S3_KEY",
    "S3_PREFIX",
    "MODEL_SHA256",
    "MODEL_FILE_SHA256",
    "LLMKUBE_REFRESH_POLICY",
    "LLMKUBE_PREFETCH_STAGER",
    "HF_TOKEN",
    "HF_ENDPOINT",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "LLMKUBE_CA_DIR",
    "LLMKUBE_HOST_MODEL",
    "LLMKUBE_TERMINATION_LOG",
    "PROGRESS_INTERVAL",
    "LLMKUBE_LOG_FORMAT",
    "LLMKUBE_CONNECT_TIMEOUT",
    "LLMKUBE_STALL_TIMEOUT",
    "LLMKUBE_RETRIES",
    "LLMKUBE_LOCK_TIMEOUT",
)
# Partials of `<dest>`: the shell's `<dest>.<key>.tmp` or a per-writer
# `<dest>.<key>.<writer>.llmkube-part.tmp` (`.llmkube-part` before #14)
# (spec §4.2, CONTRACT §4).
_PARTIAL_RE = r"\.[0-9a-f]{12}(?:\.tmp|\.[0-9a-f]+\.llmkube-part(?:\.tmp)?)"


def flag_of(var: str) -> str:
    return "--" + var.lower().replace("_", "-")


@dataclass
class Run:
    """One finished CLI run."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    term_raw: bytes | None

    @property
    def term(self) -> dict[str, Any]:
        assert self.term_raw is not None, f"no termination message was written\n{self}"
        doc = json.loads(self.term_raw)
        assert isinstance(doc, dict), doc
        return doc

    def __str__(self) -> str:
        return (
            f"args={self.args} rc={self.returncode}\n--- stdout ---\n{self.stdout}"
            f"\n--- stderr ---\n{self.stderr}\n--- termination ---\n{self.term_raw!r}"
        )


class Pod:
    """A pod-like sandbox under one tmp directory: a cache volume, a
    termination-log path and the environment the operator would set."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.models = tmp / "models"  # the cache volume; not created until staging
        self.term_path = tmp / "termination-log"
        home = tmp / "home"
        home.mkdir(exist_ok=True)
        self.env: dict[str, str] = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "LLMKUBE_TERMINATION_LOG": str(self.term_path),
            **SHORT_TIMEOUTS,
        }

    # -- environment shapes ---------------------------------------------------------

    def single(self, source: str, name: str = "model.gguf", key: str = "k1") -> Path:
        """Single-file env (cached path); returns MODEL_PATH."""
        cache_dir = self.models / key
        dest = cache_dir / name
        self.env.update(MODEL_SOURCE=source, CACHE_DIR=str(cache_dir), MODEL_PATH=str(dest))
        return dest

    def multi(self, base_url: str, files: Iterable[str], key: str = "k2") -> Path:
        """Multi-file env; returns CACHE_DIR."""
        cache_dir = self.models / key
        self.env.update(
            MODEL_SOURCE=base_url, CACHE_DIR=str(cache_dir), MODEL_FILES="\n".join(files)
        )
        return cache_dir

    # -- running --------------------------------------------------------------------

    def _child_env(self, env: Mapping[str, str | None] | None) -> dict[str, str]:
        merged: dict[str, str | None] = {**self.env, **(env or {})}
        return {k: v for k, v in merged.items() if v is not None}

    def command(self, args: Iterable[str], python_flags: Iterable[str] = ()) -> list[str]:
        return [sys.executable, *python_flags, "-m", "llmkube_stager", *args]

    def run(
        self,
        *args: str,
        env: Mapping[str, str | None] | None = None,
        python_flags: Iterable[str] = (),
        fresh_term: bool = True,
        timeout: float = 60,
    ) -> Run:
        """Run the CLI to completion. `env` overrides (None removes a variable).
        With `fresh_term` the termination file is removed first, so a run that
        writes nothing cannot pass on a previous run's message."""
        if fresh_term and self.term_path.exists():
            self.term_path.unlink()
        proc = subprocess.run(
            self.command(args or ("stage",), python_flags),
            env=self._child_env(env),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Run(
            tuple(args),
            proc.returncode,
            proc.stdout,
            proc.stderr,
            self.read_term(),
        )

    def popen(
        self, *args: str, env: Mapping[str, str | None] | None = None
    ) -> subprocess.Popen[str]:
        if self.term_path.exists():
            self.term_path.unlink()
        return subprocess.Popen(
            self.command(args or ("stage",)),
            env=self._child_env(env),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(
        self, proc: subprocess.Popen[str], args: tuple[str, ...], timeout: float = 30
    ) -> Run:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"the stager did not exit in {timeout}s\n{err}") from None
        return Run(args, proc.returncode, out, err, self.read_term())

    def read_term(self) -> bytes | None:
        try:
            return self.term_path.read_bytes()
        except FileNotFoundError:
            return None


# -- assertions ---------------------------------------------------------------------


def assert_compact_termination(run: Run) -> dict[str, Any]:
    """CONTRACT §5: one compact JSON object of at most 4096 bytes with the four
    mandatory keys."""
    raw = run.term_raw
    assert raw is not None, f"no termination message\n{run}"
    assert len(raw) <= MAX_TERMINATION_BYTES, len(raw)
    doc = run.term
    compact = json.dumps(doc, separators=(",", ":")).encode()
    assert raw.rstrip(b"\n") == compact, f"termination message is not compact JSON: {raw!r}"
    for key in ("v", "outcome", "reason", "retryable"):
        assert key in doc, f"termination message lacks {key!r}: {doc}"
    assert doc["v"] == 1
    assert isinstance(doc["retryable"], bool)
    return doc


def assert_success(
    run: Run, *, files: int, fetched: int, reused: int, kept: int = 0, nbytes: int | None = None
) -> dict[str, Any]:
    assert run.returncode == 0, str(run)
    doc = assert_compact_termination(run)
    assert doc["outcome"] == "succeeded", doc
    assert doc["reason"] == "ModelTransferSucceeded", doc
    assert doc["retryable"] is False, doc
    stats = doc["stats"]
    for key in ("files", "fetched", "reused", "kept", "bytes", "seconds"):
        assert key in stats, f"stats lacks {key!r}: {stats}"
    assert (stats["files"], stats["fetched"], stats["reused"], stats["kept"]) == (
        files,
        fetched,
        reused,
        kept,
    ), stats
    if nbytes is not None:
        assert stats["bytes"] == nbytes, stats
    assert isinstance(stats["seconds"], int | float) and stats["seconds"] >= 0, stats
    assert "Traceback" not in run.stderr, run.stderr
    return doc


def assert_failure(
    run: Run, reason: str, *, exit_code: int, retryable: bool, log_line: bool = True
) -> dict[str, Any]:
    """Failure message shape (CONTRACT §5) and the same line in the log."""
    assert run.returncode == exit_code, str(run)
    doc = assert_compact_termination(run)
    assert doc["outcome"] == "failed", doc
    assert doc["reason"] == reason, doc
    assert doc["retryable"] is retryable, doc
    message, remedy = doc["message"], doc["remedy"]
    assert message.startswith(f"ERROR: {reason}:"), message
    assert remedy, doc
    assert message.endswith(remedy), (message, remedy)
    if log_line:
        assert message in run.stderr, f"the log does not carry the failure line\n{run}"
    assert "Traceback" not in run.stderr, run.stderr
    return doc


def partials_of(dest: Path) -> list[Path]:
    pattern = re.compile(re.escape(dest.name) + _PARTIAL_RE)
    if not dest.parent.is_dir():
        return []
    return sorted(p for p in dest.parent.iterdir() if pattern.fullmatch(p.name))


def debris(directory: Path) -> list[Path]:
    """Leftover temp files of any kind under a directory."""
    if not directory.exists():
        return []
    names = re.compile(r".*(\.tmp|\.llmkube-part|\.llmkube-tmp\.[A-Za-z0-9]{6})")
    return sorted(p for p in directory.rglob("*") if names.fullmatch(p.name))


def record_of(dest: Path) -> str:
    return (dest.parent / (dest.name + ".llmkube-size")).read_text()


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every path under `root` with its type, mode, size, mtime and content hash."""
    result: dict[str, tuple[Any, ...]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest = ""
        if path.is_file() and not path.is_symlink():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        result[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    st = root.lstat()
    result["."] = (st.st_mode, st.st_mtime_ns)
    return result


def import_lines(stderr: str) -> set[str]:
    """Module names from `python -X importtime` output."""
    mods = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                mods.add(name)
    return mods


def wait_for(predicate: Any, timeout: float, what: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the stager exited early ({proc.returncode}) waiting for {what}")
        if time.monotonic() > deadline:
            proc.send_signal(signal.SIGKILL)
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def tls_server_context(tmp: Path) -> tuple[ssl.SSLContext, Path]:
    """A private CA and a certificate for 127.0.0.1: the server context for
    `Origin(tls=...)` and a directory holding only the CA, fit for
    LLMKUBE_CA_DIR."""
    ca = make_ca(tmp / "pki")
    return ca.server_context(), ca.ca_dir
