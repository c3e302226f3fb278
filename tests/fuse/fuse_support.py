"""Helpers of the real-mount tests: mount/unmount bindfs and bind mounts, run
`python -m llmkube_stager` as a pod would, and look at what it left behind.

The child gets a minimal pod-like environment (never the developer's
os.environ), so no stray setting can make a test pass.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness.contract import exit_code_of
from tests.harness.origin import Origin, RequestRecord
from tests.harness.schema import checked_termination, validate_termination

# The checkout these tests belong to: the child runs there, so
# `python -m llmkube_stager` imports this tree's package.
ROOT = Path(__file__).resolve().parents[2]

LOCK_NAME = ".llmkube.lock"
RECORD_SUFFIX = ".llmkube-size"
FUSE_MAGIC_HEX = "65735546"
TEN_MINUTES_S = 600.0

# What the brief prescribes for every run: fail fast, never hang a test.
POD_TIMEOUTS = {
    "LLMKUBE_CONNECT_TIMEOUT": "1",
    "LLMKUBE_STALL_TIMEOUT": "2",
    "LLMKUBE_RETRIES": "1",
    "LLMKUBE_MAX_RETRY_WAIT": "1",
}

REMEDY_HTTP = (
    "set spec.modelCache.prefetch: true on every InferenceService using this claim, or use "
    "storage with cross-node flock support"
)


# -- mounts -------------------------------------------------------------------------


@dataclass
class FuseCache:
    """A backing directory and a bindfs mount of it: the backing side is what
    the "storage" holds, the mount is what the pod sees."""

    backing: Path
    mnt: Path


@dataclass
class TwoNodes:
    """One backing directory seen through two independent bindfs mounts:
    like two nodes mounting one BlobFuse container."""

    backing: Path
    node1: Path
    node2: Path


@dataclass
class ReadOnlyCache:
    backing: Path
    mnt: Path


def _run_quiet(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)


def is_mounted(path: Path) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split(" - ", 1)[0].split()
            if len(fields) >= 5 and fields[4].encode().decode("unicode_escape") == target:
                return True
    return False


def mountinfo_line(path: Path) -> str:
    target = os.path.realpath(path)
    found = ""
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split(" - ", 1)[0].split()
            if len(fields) >= 5 and fields[4] == target:
                found = line.strip()
    return found


def mount_bindfs(src: Path, mnt: Path, *, subtype: bool = True, options: str = "") -> None:
    """`bindfs --no-allow-other SRC MNT`. bindfs 1.14 labels its mount plain
    `fuse` with the source directory as fsname; `-o subtype=bindfs` makes the
    mount table say `fuse.bindfs`, the way libfuse drivers such as blobfuse2
    name themselves (the issue's "driver name (e.g. `fuse.bindfs`)")."""
    mnt.mkdir(parents=True, exist_ok=True)
    cmd = ["bindfs", "--no-allow-other"]
    opts = ",".join(o for o in ("subtype=bindfs" if subtype else "", options) if o)
    if opts:
        cmd += ["-o", opts]
    proc = _run_quiet([*cmd, str(src), str(mnt)])
    if proc.returncode != 0:
        raise RuntimeError(f"bindfs {src} {mnt} failed: {proc.stderr.strip()}")
    deadline = time.monotonic() + 5
    while not is_mounted(mnt):
        if time.monotonic() > deadline:
            raise RuntimeError(f"bindfs did not show up in the mount table at {mnt}")
        time.sleep(0.02)


def mount_ro_bind(src: Path, mnt: Path) -> None:
    """A real read-only bind mount: `mount --bind` then remount ro."""
    mnt.mkdir(parents=True, exist_ok=True)
    proc = _run_quiet(["mount", "--bind", str(src), str(mnt)])
    if proc.returncode != 0:
        raise RuntimeError(f"mount --bind failed: {proc.stderr.strip()}")
    proc = _run_quiet(["mount", "-o", "remount,bind,ro", str(mnt)])
    if proc.returncode != 0:
        unmount(mnt)
        raise RuntimeError(f"remount,bind,ro failed: {proc.stderr.strip()}")


def unmount(mnt: Path) -> None:
    """Robust teardown: fusermount3 -u, umount, then lazy variants, retried
    while a just-exited child still holds the mount busy."""
    if not is_mounted(mnt):
        return
    attempts = (
        ["fusermount3", "-u", str(mnt)],
        ["umount", str(mnt)],
        ["fusermount3", "-uz", str(mnt)],
        ["umount", "-l", str(mnt)],
    )
    deadline = time.monotonic() + 10
    while True:
        for cmd in attempts:
            if shutil.which(cmd[0]) is None:
                continue
            _run_quiet(cmd)
            if not is_mounted(mnt):
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"could not unmount {mnt}: {mountinfo_line(mnt)}")
        time.sleep(0.1)


# -- looking at a directory ---------------------------------------------------------


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every path under `root` (the backing directory, not a mount) with its
    type, size, mtime and content hash: a pod that writes nothing leaves it
    identical."""
    result: dict[str, tuple[Any, ...]] = {}
    if not root.exists():
        return result
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest = ""
        if path.is_file() and not path.is_symlink():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        result[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    st = root.lstat()
    result["."] = (st.st_mode, st.st_mtime_ns)
    return result


def names(root: Path) -> list[str]:
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def make_old(path: Path, age_s: float) -> None:
    when = time.time() - age_s
    os.utime(path, (when, when))


def write_file(path: Path, data: bytes, *, record: int | None = None, age_s: float = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if record is not None:
        Path(str(path) + RECORD_SUFFIX).write_text(str(record))
    if age_s:
        make_old(path, age_s)
    return path


def record_of(dest: Path) -> str | None:
    try:
        return Path(str(dest) + RECORD_SUFFIX).read_text()
    except FileNotFoundError:
        return None


_TEMP_RE = re.compile(r".*(\.tmp|\.llmkube-part|\.llmkube-tmp\.[A-Za-z0-9]{6})")


def temp_files(root: Path) -> list[str]:
    return [n for n in names(root) if _TEMP_RE.fullmatch(n)]


def payload(size: int, seed: int) -> bytes:
    """Deterministic bytes that differ per seed at every offset block, so a
    splice or a zero-filled hole can never look right."""
    block = hashlib.sha256(f"seed-{seed}".encode()).digest()
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(block + counter.to_bytes(8, "big")).digest()
        counter += 1
    return bytes(out[:size])


# -- running the CLI ----------------------------------------------------------------


@dataclass
class Run:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    term_raw: bytes | None

    @property
    def term(self) -> dict[str, Any]:
        assert self.term_raw, f"no termination message was written\n{self}"
        doc = validate_termination(self.term_raw)
        assert isinstance(doc, dict), doc
        return doc

    def __str__(self) -> str:
        return (
            f"args={self.args} rc={self.returncode}\n--- stdout ---\n{self.stdout}"
            f"\n--- stderr ---\n{self.stderr}\n--- termination ---\n{self.term_raw!r}"
        )


class Pod:
    """One pod-like CLI caller with its own termination-log file."""

    _count = 0

    def __init__(self, tmp: Path, env: Mapping[str, str], *, stager: bool = False) -> None:
        Pod._count += 1
        self.term_path = tmp / f"termination-{Pod._count}.log"
        home = tmp / "home"
        home.mkdir(exist_ok=True)
        self.env: dict[str, str] = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "LLMKUBE_TERMINATION_LOG": str(self.term_path),
            **POD_TIMEOUTS,
            **env,
        }
        if stager:
            self.env["LLMKUBE_PREFETCH_STAGER"] = "true"

    def command(self, args: Iterable[str]) -> list[str]:
        return [sys.executable, "-m", "llmkube_stager", *args]

    def run(self, *args: str, env: Mapping[str, str] | None = None, timeout: float = 60) -> Run:
        self.term_path.unlink(missing_ok=True)
        proc = subprocess.run(
            self.command(args or ("stage",)),
            env={**self.env, **(env or {})},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Run(tuple(args), proc.returncode, proc.stdout, proc.stderr, self._term())

    def start(self, *args: str) -> subprocess.Popen[str]:
        self.term_path.unlink(missing_ok=True)
        return subprocess.Popen(
            self.command(args or ("stage",)),
            env=self.env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(self, proc: subprocess.Popen[str], timeout: float = 60) -> Run:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"the stager did not exit in {timeout}s\n{err}") from None
        args = tuple(str(a) for a in proc.args[3:]) if isinstance(proc.args, list) else ()
        return Run(args, proc.returncode, out, err, self._term())

    def _term(self) -> bytes | None:
        try:
            return checked_termination(self.term_path.read_bytes())
        except FileNotFoundError:
            return None


def single_env(source: str, cache_dir: Path, name: str = "model.gguf") -> dict[str, str]:
    return {
        "MODEL_SOURCE": source,
        "CACHE_DIR": str(cache_dir),
        "MODEL_PATH": str(cache_dir / name),
    }


def multi_env(base_url: str, cache_dir: Path, files: Iterable[str]) -> dict[str, str]:
    return {
        "MODEL_SOURCE": base_url.rstrip("/") + "/",
        "CACHE_DIR": str(cache_dir),
        "MODEL_FILES": "\n".join(files),
    }


# -- assertions ---------------------------------------------------------------------


def assert_ok(run: Run) -> dict[str, Any]:
    assert run.returncode == 0, str(run)
    doc = run.term
    assert doc["outcome"] == "succeeded", doc
    assert doc["reason"] == "ModelTransferSucceeded", doc
    assert "Traceback" not in run.stderr, run.stderr
    return doc


def assert_failed(run: Run, reason: str, *, exit_code: int | None = None) -> dict[str, Any]:
    """CONTRACT §5: `message` starts `ERROR: <Reason>:`, ends with the remedy,
    which is the `remedy` field verbatim, and the log carries the same line.
    The exit code is the contract's for the reason unless given."""
    assert run.returncode == (exit_code_of(reason) if exit_code is None else exit_code), str(run)
    assert "Traceback" not in run.stderr, run.stderr
    doc = run.term
    assert doc["outcome"] == "failed", doc
    assert doc["reason"] == reason, doc
    assert doc["message"].startswith(f"ERROR: {reason}:"), doc
    assert doc["remedy"] and doc["message"].endswith(doc["remedy"]), doc
    assert doc["message"] in run.stderr, f"the log does not carry the failure line\n{run}"
    return doc


def gets(origin: Origin, path: str | None = None) -> list[RequestRecord]:
    return origin.requests(path, "GET")
