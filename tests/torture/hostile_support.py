"""Support of the hostile torture tests (#11): a sandbox holding a cache volume
and a sibling directory that must never change, the CLI run as a subprocess
(as an unprivileged uid where a mode-000 file must really be unreadable: the
tests run as root, for whom nothing is), and planting helpers for symlinks,
FIFOs, directories and unreadable files.

The child gets a minimal environment (never the developer's os.environ) and a
wall-clock budget: a run that does not end within it is a hang, and fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llmkube_stager.layout import partial_key, validator_of

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
BUDGET_S = 30.0
FAST = {
    "LLMKUBE_CONNECT_TIMEOUT": "2",
    "LLMKUBE_STALL_TIMEOUT": "2",
    "LLMKUBE_RETRIES": "0",
    "LLMKUBE_MAX_RETRY_WAIT": "1",
    "LLMKUBE_LOCK_TIMEOUT": "5",
}


@dataclass
class Result:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    term_raw: bytes | None
    seconds: float

    @property
    def term(self) -> dict[str, Any]:
        assert self.term_raw is not None, f"no termination message was written\n{self}"
        doc = json.loads(self.term_raw)
        assert isinstance(doc, dict), doc
        return doc

    @property
    def reason(self) -> str:
        return str(self.term["reason"])

    def __str__(self) -> str:
        return (
            f"args={self.args} rc={self.returncode} in {self.seconds:.1f}s\n--- stdout ---\n"
            f"{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-6000:]}\n--- termination ---\n"
            f"{self.term_raw!r}"
        )

    def ended_with_a_reason(self) -> Result:
        """No hang (the runner enforces the budget), no traceback, no exit 3,
        and for stage/verify a termination message naming a reason."""
        assert self.returncode in (0, 1, 2, 4), str(self)
        assert "Traceback" not in self.stderr, str(self)
        if self.args and self.args[0] in ("stage", "verify"):
            assert self.term["reason"], str(self)
        return self

    def failed(self, reason: str, exit_code: int | None = None) -> dict[str, Any]:
        self.ended_with_a_reason()
        doc = self.term
        assert doc["outcome"] == "failed" and doc["reason"] == reason, str(self)
        if exit_code is not None:
            assert self.returncode == exit_code, str(self)
        else:
            assert self.returncode != 0, str(self)
        return doc

    def ok(self) -> dict[str, Any]:
        assert self.returncode == 0, str(self)
        assert "Traceback" not in self.stderr, str(self)
        return self.term if self.args[0] in ("stage", "verify") else {}


class Sandbox:
    """A world-traversable directory with `volume/` (the cache volume; the
    model directory is `volume/k`) and `outside/` beside it, which holds a
    file a symlink may point at and must be byte-for-byte the same after
    every run. `uid` runs the CLI as that user (the volume is theirs)."""

    def __init__(self, base: Path, uid: int | None = None) -> None:
        self.base = base
        self.uid = uid
        self.volume = base / "volume"
        self.cache = self.volume / "k"
        self.outside = base / "outside"
        self.victim = self.outside / "victim.bin"
        self.term_path = base / "term" / "termination-log"
        for d in (self.volume, self.outside, self.term_path.parent, base / "home"):
            d.mkdir(parents=True, exist_ok=True)
        self.victim.write_bytes(b"outside bytes that no run may touch\n")
        if uid is not None:
            for d in (self.volume, self.term_path.parent, base / "home"):
                os.chown(d, uid, uid)
        self.env: dict[str, str] = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(base / "home"),
            "LANG": "C.UTF-8",
            "LLMKUBE_TERMINATION_LOG": str(self.term_path),
            **FAST,
        }

    # -- shapes -----------------------------------------------------------------------

    def single(self, url: str, name: str = "model.gguf") -> Path:
        dest = self.cache / name
        self.env.update(MODEL_SOURCE=url, CACHE_DIR=str(self.cache), MODEL_PATH=str(dest))
        return dest

    def multi(self, base_url: str, files: list[str]) -> Path:
        self.env.update(
            MODEL_SOURCE=base_url, CACHE_DIR=str(self.cache), MODEL_FILES="\n".join(files)
        )
        return self.cache

    def own(self) -> None:
        """Hand everything under the volume to the run's uid (after seeding as root)."""
        if self.uid is None:
            return
        for path in [self.volume, *self.volume.rglob("*")]:
            os.lchown(path, self.uid, self.uid)

    # -- running ----------------------------------------------------------------------

    def run(
        self, *args: str, env: Mapping[str, str | None] | None = None, timeout: float = BUDGET_S
    ) -> Result:
        if self.term_path.exists():
            self.term_path.unlink()
        merged = {**self.env, **(env or {})}
        child_env = {k: v for k, v in merged.items() if v is not None}
        cmd = [sys.executable, "-m", "llmkube_stager", *(args or ("stage",))]
        if self.uid is not None:
            cmd = ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", *cmd]
        started = time.monotonic()
        try:
            proc = subprocess.run(
                cmd,
                env=child_env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(
                f"{args} did not end within its {timeout:g}s budget (a hang)\n{exc.stderr!r}"
            ) from None
        term = self.term_path.read_bytes() if self.term_path.exists() else None
        return Result(
            tuple(args or ("stage",)),
            proc.returncode,
            proc.stdout,
            proc.stderr,
            term,
            time.monotonic() - started,
        )


@contextlib.contextmanager
def open_sandbox(uid: int | None = None) -> Iterator[Sandbox]:
    """A sandbox under a fresh world-traversable directory; `uid` runs the CLI
    as that user, for whom a mode-000 file is really unreadable."""
    if uid is not None and (os.geteuid() != 0 or shutil.which("setpriv") is None):
        pytest.skip("needs root and setpriv (util-linux) to run the CLI as another uid")
    base = Path(tempfile.mkdtemp(prefix="llmkube-hostile-"))
    os.chmod(base, 0o755)
    try:
        yield Sandbox(base, uid=uid)
    finally:
        # rm(1), not shutil.rmtree: a 1,100-deep tree exceeds Python's recursion limit.
        subprocess.run(["chmod", "-R", "u+rwX", str(base)], check=False, capture_output=True)
        subprocess.run(["rm", "-rf", str(base)], check=False)


# -- what was outside, before and after ----------------------------------------------------


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every path under `root` (symlinks not followed) with type, mode, size,
    mtime and content hash; the root's own entry too."""
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


# -- planting ------------------------------------------------------------------------------

KINDS = ("symlink", "dangling", "fifo", "dir", "unreadable")


def plant(path: Path, kind: str, sandbox: Sandbox) -> None:
    """Put a hostile thing at `path`: a symlink to the outside victim, a
    dangling symlink to a name outside (O_CREAT through it would create it),
    a FIFO (open(2) blocks on it), a directory, or a file of mode 000 with a
    plausible content (unreadable only for a non-root run)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        path.symlink_to(sandbox.victim)
    elif kind == "dangling":
        path.symlink_to(sandbox.outside / f"created-through-{path.name}")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
        (path / "inner").write_bytes(b"x")
    elif kind == "unreadable":
        path.write_bytes(b"12\n")
        os.chmod(path, 0)
    else:
        raise ValueError(kind)


def key_of(size: int, etag: str) -> str:
    """The partial key the agent derives for an origin answer (layout.partial_key)."""
    return partial_key(validator_of(size, etag))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
