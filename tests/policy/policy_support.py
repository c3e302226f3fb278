"""Helpers for the refresh-policy and sha256-pin tests (tests/policy).

`Pod` runs `llmkube-stager stage` the way an init container does: as a
subprocess with a minimal pod-like environment (`run`), or in-process through
`run_stage` (`run_in`) when a test needs a filesystem the host cannot give it
(FUSE, read-only) or many fast starts. Both return the same `Result`: exit code,
log text, termination document, wall time.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmkube_stager.config import load_config
from llmkube_stager.errors import StagerError
from llmkube_stager.logs import Log, Redactor, display_url
from llmkube_stager.model import FsInfo
from llmkube_stager.termination import encode, failure_doc, failure_message, success_doc
from tests.harness.contract import exit_code_of
from tests.harness.origin import Origin
from tests.harness.schema import validate_termination

ROOT = Path(__file__).resolve().parents[2]
REPO = "/org/repo/resolve/main"
FAST = {
    "LLMKUBE_CONNECT_TIMEOUT": "1",
    "LLMKUBE_STALL_TIMEOUT": "1",
    "LLMKUBE_RETRIES": "1",
    "LLMKUBE_MAX_RETRY_WAIT": "1",
}
ON_CHANGE = {"LLMKUBE_REFRESH_POLICY": "OnChange"}
RECORD = ".llmkube-size"
STAMP = ".sha256"
_MARKER_RE = re.compile(r"\.([0-9a-f]{64})\.sha256-rejected")
_LEFTOVER_RE = re.compile(r".*(\.tmp|\.llmkube-part|\.llmkube-tmp\.[A-Za-z0-9]{6})")


def payload(size: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fuse_fs(path: str) -> FsInfo:
    """What probe_fs reports on a BlobFuse mount (spec §9.2)."""
    return FsInfo(path, "fuse.blobfuse2", "blobfuse2", is_fuse=True, read_only=False, free_bytes=0)


def read_only_fs(path: str) -> FsInfo:
    return FsInfo(path, "ext4", "ext4", is_fuse=False, read_only=True, free_bytes=10**12)


@dataclass
class Result:
    """One finished `stage`."""

    rc: int
    log: str
    term: dict[str, Any] | None
    seconds: float
    sleeps: list[float] = field(default_factory=list)

    @property
    def lines(self) -> list[str]:
        return self.log.splitlines()

    @property
    def warnings(self) -> list[str]:
        return [line for line in self.lines if line.startswith("WARNING: ")]

    def line_with(self, text: str) -> str:
        found = [line for line in self.lines if text in line]
        assert found, f"no log line contains {text!r}\n{self}"
        return found[0]

    @property
    def stats(self) -> tuple[int, int, int, int]:
        """(files, fetched, reused, kept) of a successful run."""
        assert self.term is not None and self.term["outcome"] == "succeeded", str(self)
        s = self.term["stats"]
        return s["files"], s["fetched"], s["reused"], s["kept"]

    @property
    def reason(self) -> str | None:
        return None if self.term is None else self.term["reason"]

    def ok(self) -> Result:
        assert self.rc == 0, str(self)
        assert self.term is not None and self.term["outcome"] == "succeeded", str(self)
        assert "Traceback" not in self.log, str(self)
        return self

    def failed(self, reason: str, rc: int | None = None) -> Result:
        """The contract's exit code for the reason unless `rc` is given."""
        assert self.rc == (exit_code_of(reason) if rc is None else rc), str(self)
        assert self.term is not None, str(self)
        assert self.term["outcome"] == "failed", str(self)
        assert self.term["reason"] == reason, str(self)
        assert self.term["message"].startswith(f"ERROR: {reason}:"), str(self)
        assert "Traceback" not in self.log, str(self)
        return self

    def __str__(self) -> str:
        return (
            f"rc={self.rc} seconds={self.seconds:.2f}\n--- log ---\n{self.log}"
            f"--- termination ---\n{json.dumps(self.term)}"
        )


class Pod:
    """A pod-like sandbox: a cache volume under tmp, a termination-log path and
    the environment the operator sets."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.models = tmp / "models"
        self.term_path = tmp / "termination-log"
        home = tmp / "home"
        home.mkdir(exist_ok=True)
        self.env: dict[str, str] = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "LLMKUBE_TERMINATION_LOG": str(self.term_path),
            **FAST,
        }

    def single(self, source: str, name: str = "model.gguf", key: str = "k1") -> Path:
        """Single-file env; returns MODEL_PATH."""
        cache_dir = self.models / key
        dest = cache_dir / name
        self.env.update(MODEL_SOURCE=source, CACHE_DIR=str(cache_dir), MODEL_PATH=str(dest))
        self.env.pop("MODEL_FILES", None)
        return dest

    def multi(self, base_url: str, files: Iterable[str], key: str = "k2") -> Path:
        """Multi-file env; returns CACHE_DIR."""
        cache_dir = self.models / key
        self.env.update(
            MODEL_SOURCE=base_url, CACHE_DIR=str(cache_dir), MODEL_FILES="\n".join(files)
        )
        self.env.pop("MODEL_PATH", None)
        return cache_dir

    def _env(self, overrides: Mapping[str, str | None]) -> dict[str, str]:
        merged: dict[str, str | None] = {**self.env, **overrides}
        return {k: v for k, v in merged.items() if v is not None}

    def run(self, timeout: float = 60, **overrides: str | None) -> Result:
        """`python -m llmkube_stager stage` as a subprocess."""
        if self.term_path.exists():
            self.term_path.unlink()
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "llmkube_stager", "stage"],
            env=self._env(overrides),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        seconds = time.monotonic() - started
        raw = self.term_path.read_bytes() if self.term_path.exists() else None
        term = None if raw is None else validate_termination(raw)
        assert proc.stdout == "", proc.stdout
        return Result(proc.returncode, proc.stderr, term, seconds)

    def run_in(
        self,
        fs: Callable[[str], FsInfo] | None = None,
        role: str | None = None,
        **overrides: str | None,
    ) -> Result:
        """In-process `run_stage` with a recording no-op sleep; `fs` replaces
        the filesystem probe. The termination document is built as the CLI
        builds it."""
        from llmkube_stager.cache.fs import probe_fs
        from llmkube_stager.stage import Effects, run_stage

        if role == "stager":
            overrides = {"LLMKUBE_PREFETCH_STAGER": "true", **overrides}
        env = self._env(overrides)
        stream = io.StringIO()
        sleeps: list[float] = []
        started = time.monotonic()
        redact = Redactor()
        log = Log(stream, "text", redact)
        try:
            config = load_config(env, {})
            redact = Redactor(config.secrets.values())
            log = Log(stream, "text", redact)
            prepared, outcome = run_stage(
                config, Effects(log=log, probe_fs=fs or probe_fs, sleep=sleeps.append)
            )
        except StagerError as err:
            log.error("failed", failure_message(err, redact), reason=err.reason.value)
            data = encode(failure_doc(err, display_url(env["MODEL_SOURCE"]), redact))
            doc = validate_termination(data)
            return Result(err.exit_code, stream.getvalue(), doc, time.monotonic() - started, sleeps)
        doc = validate_termination(encode(success_doc(outcome, prepared.manifest.display_source)))
        log.info("staged", doc["message"])
        return Result(0, stream.getvalue(), doc, time.monotonic() - started, sleeps)


# -- the cache on disk ----------------------------------------------------------------


def seed(dest: Path, data: bytes, record: int | str | None = "auto", age_s: float = 0) -> Path:
    """Put a cached file in place, with its size record ("auto": its size;
    None: no record, a legacy cache; int: that number)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    if age_s:
        old = time.time() - age_s
        os.utime(dest, (old, old))
    rec = Path(str(dest) + RECORD)
    if record == "auto":
        rec.write_bytes(str(len(data)).encode())
    elif record is not None:
        rec.write_bytes(str(record).encode())
    elif rec.exists():
        rec.unlink()
    return dest


def record(dest: Path) -> str | None:
    path = Path(str(dest) + RECORD)
    return path.read_text() if path.exists() else None


def stamp(dest: Path) -> str | None:
    path = Path(str(dest) + STAMP)
    return path.read_text() if path.exists() else None


def write_stamp(dest: Path, digest: str) -> None:
    st = dest.stat()
    Path(str(dest) + STAMP).write_text(f"{digest} {st.st_size} {int(st.st_mtime)}")


def stamp_triple(dest: Path, digest: str) -> str:
    """The stamp the shared format requires for `dest` as it is now."""
    st = dest.stat()
    return f"{digest} {st.st_size} {int(st.st_mtime)}"


def markers(dest: Path) -> list[str]:
    """Expected digests of `<file>.<expected>.sha256-rejected` markers."""
    if not dest.parent.is_dir():
        return []
    found = []
    for entry in dest.parent.iterdir():
        if entry.name.startswith(dest.name + "."):
            match = _MARKER_RE.fullmatch(entry.name[len(dest.name) :])
            if match:
                found.append(match.group(1))
    return sorted(found)


def leftovers(directory: Path) -> list[str]:
    """Partials and temp files of any kind under a directory."""
    if not directory.exists():
        return []
    return sorted(
        str(p.relative_to(directory))
        for p in directory.rglob("*")
        if _LEFTOVER_RE.fullmatch(p.name)
    )


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every path under `root` with its mode, size, mtime and content hash."""
    result: dict[str, tuple[Any, ...]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest = sha(path.read_bytes()) if path.is_file() else ""
        result[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return result


# -- the origin -----------------------------------------------------------------------


def serve_repo(origin: Origin, files: Mapping[str, bytes]) -> str:
    """Put a multi-file repo at <origin>/org/repo/resolve/main/; returns the base URL."""
    for rel, data in files.items():
        origin.put(f"{REPO}/{rel}", data)
    return origin.url + REPO + "/"


def methods(origin: Origin, path: str | None = None) -> Counter[str]:
    """HEAD/GET counts the origin received (for one path, or all)."""
    return Counter(r.method for r in origin.requests(path))


class CountingListener:
    """A 127.0.0.1 listener that accepts and counts connections and never
    answers (a blackhole whose connections can be counted)."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.05)
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._held.append(conn)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._held)

    def __enter__(self) -> CountingListener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(1.0)
        with self._lock:
            for conn in self._held:
                conn.close()
        self._sock.close()
