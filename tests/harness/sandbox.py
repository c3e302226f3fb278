"""The hostile torture tests' world (#11): a sandbox holding a cache volume
and a sibling directory that must never change, the CLI run through the one
runner (tests/harness/pod.py: a minimal environment, a deadline, no stdin;
as an unprivileged uid where a mode-000 file must really be unreadable: the
tests run as root, for whom nothing is), and planting helpers for symlinks,
FIFOs, directories and unreadable files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llmkube_stager.layout import partial_key, validator_of
from tests.harness.features import missing_feature
from tests.harness.pod import Pod, Run, as_user

# A run that does not end within this is a hang.
BUDGET_S = 30.0
FAST = {
    "LLMKUBE_CONNECT_TIMEOUT": "2",
    "LLMKUBE_STALL_TIMEOUT": "2",
    "LLMKUBE_RETRIES": "0",
    "LLMKUBE_MAX_RETRY_WAIT": "1",
    "LLMKUBE_LOCK_TIMEOUT": "5",
}


class Sandbox(Pod):
    """A pod in a world-traversable directory with `volume/` (the cache
    volume; the model directory is `volume/k`) and `outside/` beside it,
    which holds a file a symlink may point at and must be byte-for-byte the
    same after every run. `uid` runs the CLI as that user (the volume is
    theirs)."""

    def __init__(self, base: Path, uid: int | None = None) -> None:
        super().__init__(
            base,
            budget=FAST,
            wrapper=() if uid is None else as_user(uid),
            term_path=base / "term" / "termination-log",
        )
        self.base = base
        self.uid = uid
        self.volume = self.models = base / "volume"
        self.cache = self.cache_dir = self.volume / "k"
        self.outside = base / "outside"
        self.victim = self.outside / "victim.bin"
        for d in (self.volume, self.outside, self.term_path.parent):
            d.mkdir(parents=True, exist_ok=True)
        self.victim.write_bytes(b"outside bytes that no run may touch\n")
        if uid is not None:
            for d in (self.volume, self.term_path.parent, base / "home"):
                os.chown(d, uid, uid)

    # -- shapes -----------------------------------------------------------------------

    def single(self, source: str, name: str = "model.gguf", key: str = "k") -> Path:
        return super().single(source, name, key)

    def multi(self, source: str, files: Any, key: str = "k") -> Path:
        return super().multi(source, files, key)

    def own(self) -> None:
        """Hand everything under the volume to the run's uid (after seeding as root)."""
        if self.uid is None:
            return
        for path in [self.volume, *self.volume.rglob("*")]:
            os.lchown(path, self.uid, self.uid)

    def run(self, *args: str, timeout: float = BUDGET_S, **kwargs: Any) -> Run:
        return super().run(*args, timeout=timeout, **kwargs)


@contextlib.contextmanager
def open_sandbox(uid: int | None = None) -> Iterator[Sandbox]:
    """A sandbox under a fresh world-traversable directory; `uid` runs the CLI
    as that user, for whom a mode-000 file is really unreadable."""
    if uid is not None and (os.geteuid() != 0 or shutil.which("setpriv") is None):
        missing_feature("root and setpriv (util-linux), to run the CLI as another uid")
    # Not under tmp_path: pytest makes that 0700 for root, closed to other uids.
    base = Path(tempfile.mkdtemp(prefix="llmkube-hostile-"))
    os.chmod(base, 0o755)
    try:
        yield Sandbox(base, uid=uid)
    finally:
        # rm(1), not shutil.rmtree: a 1,100-deep tree exceeds Python's recursion limit.
        subprocess.run(["chmod", "-R", "u+rwX", str(base)], check=False, capture_output=True)
        subprocess.run(["rm", "-rf", str(base)], check=False)


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
