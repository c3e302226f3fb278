"""Helpers of the source tests: a pod-like sandbox that runs the stage
pipeline in-process (recording retry waits) or the CLI as a subprocess, and
looks at what it left on disk.

The subprocess gets a minimal environment (never the developer's
os.environ), so no stray credential, CA directory or host-model mount can
make a test pass or leak.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import secrets
import string
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmkube_stager.cache.fs import probe_fs
from llmkube_stager.config import load_config
from llmkube_stager.errors import StagerError
from llmkube_stager.logs import Log, Redactor
from llmkube_stager.model import Decision, Outcome
from llmkube_stager.stage import Effects, run_stage

ROOT = Path(__file__).resolve().parents[2]
FAST_ENV = {
    "LLMKUBE_CONNECT_TIMEOUT": "2",
    "LLMKUBE_STALL_TIMEOUT": "2",
    "LLMKUBE_RETRIES": "2",
    "LLMKUBE_MAX_RETRY_WAIT": "5",
}
RECORD_SUFFIX = ".llmkube-size"
_DEBRIS_RE = re.compile(
    r".*(\.[0-9a-f]{12}\.tmp|\.llmkube-part|\.llmkube-tmp\.[A-Za-z0-9]{6}|\.sha256-rejected)"
)
_ALNUM = string.ascii_letters + string.digits


def canary(prefix: str, n: int = 32) -> str:
    """A random secret; any 12-character piece of it in an output is a leak.
    Deliberately not shaped like an hf_/AKIA token, so that shape-based
    redaction cannot hide a leak of the value itself."""
    return prefix + "".join(secrets.choice(_ALNUM) for _ in range(n))


def leaks(secret: str, *texts: str) -> list[str]:
    """Pieces (12 chars) of `secret` found in `texts`."""
    pieces = {secret[i : i + 12] for i in range(0, max(1, len(secret) - 11))}
    return sorted(p for p in pieces for t in texts if p in t)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class StageRun:
    log: str
    sleeps: list[float]
    outcome: Outcome | None = None
    error: StagerError | None = None

    @property
    def reason(self) -> str | None:
        return None if self.error is None else self.error.reason.value

    @property
    def detail(self) -> str:
        return "" if self.error is None else self.error.detail

    def has_line(self, text: str) -> bool:
        return any(text in line for line in self.log.splitlines())

    def count(self, *decisions: Decision) -> int:
        assert self.outcome is not None
        return self.outcome.count(*decisions)


@dataclass
class CliRun:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    term_raw: bytes | None

    @property
    def term(self) -> dict[str, Any]:
        assert self.term_raw is not None, f"no termination message\n{self}"
        doc = json.loads(self.term_raw)
        assert isinstance(doc, dict)
        return doc

    @property
    def outputs(self) -> str:
        term = (self.term_raw or b"").decode("utf-8", "replace")
        return "\n".join((self.stdout, self.stderr, term))

    def __str__(self) -> str:
        return (
            f"rc={self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n"
            f"{self.stderr}\n--- termination ---\n{self.term_raw!r}"
        )


@dataclass
class Sandbox:
    """A pod-like layout under one tmp directory."""

    tmp: Path
    key: str = "0123456789abcdef"
    base_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cache_dir = self.tmp / "models" / self.key
        self.term_path = self.tmp / "termination-log"
        # Point the defaults (/custom-certs, /host-model/model.gguf) at nothing,
        # whatever this machine has there.
        self.base_env = {
            "LLMKUBE_CA_DIR": str(self.tmp / "no-custom-certs"),
            "LLMKUBE_HOST_MODEL": str(self.tmp / "no-host-model" / "model.gguf"),
            "LLMKUBE_TERMINATION_LOG": str(self.term_path),
            **FAST_ENV,
            **self.base_env,
        }

    # -- environments ------------------------------------------------------------------

    def single(self, source: str, name: str = "model.gguf", **extra: str) -> dict[str, str]:
        return {
            **self.base_env,
            "MODEL_SOURCE": source,
            "CACHE_DIR": str(self.cache_dir),
            "MODEL_PATH": str(self.cache_dir / name),
            **extra,
        }

    def multi(self, source: str, files: Iterable[str], **extra: str) -> dict[str, str]:
        return {
            **self.base_env,
            "MODEL_SOURCE": source,
            "CACHE_DIR": str(self.cache_dir),
            "MODEL_FILES": "\n".join(files),
            **extra,
        }

    def dest(self, rel: str = "model.gguf") -> Path:
        return self.cache_dir / rel

    # -- in-process --------------------------------------------------------------------

    def stage(self, env: Mapping[str, str]) -> StageRun:
        config = load_config(dict(env), {})
        stream = io.StringIO()
        log = Log(stream, "text", Redactor(config.secrets.values()))
        sleeps: list[float] = []
        run = StageRun(log="", sleeps=sleeps)
        try:
            _, run.outcome = run_stage(
                config, Effects(log=log, probe_fs=probe_fs, sleep=sleeps.append)
            )
        except StagerError as err:
            run.error = err
        run.log = stream.getvalue()
        return run

    def ok(self, env: Mapping[str, str]) -> StageRun:
        run = self.stage(env)
        assert run.error is None, f"stage failed: {run.reason}: {run.detail}\n{run.log}"
        return run

    def fails(self, env: Mapping[str, str], reason: str) -> StageRun:
        run = self.stage(env)
        assert run.error is not None, f"stage succeeded, expected {reason}\n{run.log}"
        assert run.reason == reason, f"{run.reason}: {run.detail}\n{run.log}"
        return run

    # -- subprocess --------------------------------------------------------------------

    def cli(
        self,
        env: Mapping[str, str],
        *args: str,
        timeout: float = 60,
        wrapper: Sequence[str] = (),
    ) -> CliRun:
        """The CLI as a subprocess; `wrapper` runs it (e.g. in a namespace)."""
        if self.term_path.exists():
            self.term_path.unlink()
        home = self.tmp / "home"
        home.mkdir(exist_ok=True)
        child = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            **env,
        }
        proc = subprocess.run(
            [*wrapper, sys.executable, "-m", "llmkube_stager", *(args or ("stage",))],
            env=child,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        try:
            term = self.term_path.read_bytes()
        except FileNotFoundError:
            term = None
        return CliRun(tuple(args), proc.returncode, proc.stdout, proc.stderr, term)


# -- the cache on disk ---------------------------------------------------------------------


def record(dest: Path) -> str | None:
    path = Path(str(dest) + RECORD_SUFFIX)
    return path.read_text() if path.exists() else None


def tree(root: Path) -> dict[str, bytes]:
    """Every regular file under `root` (relative path -> bytes)."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def debris(root: Path) -> list[str]:
    """Partials, temps and markers left under `root`."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if _DEBRIS_RE.fullmatch(p.name))


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Path -> (mode, size, mtime_ns) of everything under `root`, root included."""
    out = {}
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        out[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def seed_old(path: Path, data: bytes, age_s: float = 3600.0) -> Path:
    """A file an earlier (dead) writer left: old mtime, so it is idle."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    old = time.time() - age_s
    os.utime(path, (old, old))
    return path


def shell_partial(dest: Path, size: int | None, etag: str | None) -> Path:
    """The scripts' resumable partial `<dest>.<key>.tmp`, key = first 12 hex
    of sha256(`CL<size>ET<etag>`) (spec §4.2)."""
    validator = f"CL{'' if size is None else size}ET{etag or ''}"
    return Path(f"{dest}.{sha256(validator.encode())[:12]}.tmp")


def assert_success(run: CliRun, *, files: int, fetched: int, reused: int = 0) -> dict[str, Any]:
    assert run.returncode == 0, str(run)
    doc = run.term
    assert doc["outcome"] == "succeeded" and doc["reason"] == "ModelTransferSucceeded", doc
    stats = doc["stats"]
    assert (stats["files"], stats["fetched"], stats["reused"]) == (files, fetched, reused), stats
    assert "Traceback" not in run.stderr, run.stderr
    return doc


def assert_failure(run: CliRun, reason: str, *, retryable: bool) -> dict[str, Any]:
    assert run.returncode == 1, str(run)
    doc = run.term
    assert doc["outcome"] == "failed" and doc["reason"] == reason, doc
    assert doc["retryable"] is retryable, doc
    assert doc["message"].startswith(f"ERROR: {reason}:"), doc
    assert doc["message"].endswith(doc["remedy"]), doc
    assert "Traceback" not in run.stderr, run.stderr
    return doc


# One canary token per test session: the fake hub accepts exactly this one.
HF_TOKEN = canary("hfcanary")
