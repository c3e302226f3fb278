"""Fixtures for the in-process HTTP staging integration tests.

`run_stage` is called in-process against the loopback `Origin` (real sockets on
127.0.0.1) and real files under `tmp_path`. Retry waits go through an injected
`sleep` that records the requested seconds and returns at once, so retry tests
are fast and can assert the waits. Everything is exposed through fixtures (no
helper module to import), so the tests work whether or not this directory is
a package.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from llmkube_stager.cache.fs import probe_fs
from llmkube_stager.config import load_config
from llmkube_stager.errors import StagerError
from llmkube_stager.logs import Log, Redactor
from llmkube_stager.model import Outcome
from llmkube_stager.stage import Effects, run_stage
from tests.harness.origin import Origin

# Short budgets so failure paths end in about a second; a test overrides them.
FAST_ENV = {
    "LLMKUBE_CONNECT_TIMEOUT": "1",
    "LLMKUBE_STALL_TIMEOUT": "1",
    "LLMKUBE_RETRIES": "2",
}
RECORD_SUFFIX = ".llmkube-size"
LOCK_NAME = ".llmkube.lock"


@dataclass
class StageRun:
    """What one in-process `run_stage` did."""

    log: str
    sleeps: list[float]
    elapsed_s: float
    outcome: Outcome | None = None
    error: StagerError | None = None
    config_env: dict[str, str] = field(default_factory=dict)

    @property
    def lines(self) -> list[str]:
        return self.log.splitlines()

    @property
    def reason(self) -> str | None:
        return None if self.error is None else self.error.reason.value

    def has_line(self, text: str) -> bool:
        return any(text in line for line in self.lines)


class Stager:
    """Builds pod-like environments and runs the stage pipeline in-process."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.cache_dir = tmp_path / "cache" / "0123456789abcdef"

    # --- environments -------------------------------------------------------------

    def single_env(self, source: str, name: str = "model.gguf", **extra: str) -> dict[str, str]:
        return {
            "MODEL_SOURCE": source,
            "CACHE_DIR": str(self.cache_dir),
            "MODEL_PATH": str(self.cache_dir / name),
            **FAST_ENV,
            **extra,
        }

    def multi_env(self, base_url: str, files: list[str], **extra: str) -> dict[str, str]:
        return {
            "MODEL_SOURCE": base_url,
            "CACHE_DIR": str(self.cache_dir),
            "MODEL_FILES": "\n".join(files),
            **FAST_ENV,
            **extra,
        }

    def dest(self, rel: str = "model.gguf") -> Path:
        return self.cache_dir / rel

    # --- running ------------------------------------------------------------------

    def run(
        self,
        env: dict[str, str],
        redactor: Redactor | None = None,
        on_sleep: Callable[[int], None] | None = None,
        max_sleeps: int = 50,
    ) -> StageRun:
        """`on_sleep(n)` runs at the n-th retry wait (1-based), between two
        attempts, e.g. to change the upstream. More than `max_sleeps` waits is
        an unbounded retry loop: it fails the test instead of spinning."""
        config = load_config(env, {})
        stream = io.StringIO()
        log = Log(stream, "text", redactor or Redactor(config.secrets.values()))
        sleeps: list[float] = []

        def sleep(seconds: float) -> None:
            sleeps.append(seconds)
            assert len(sleeps) <= max_sleeps, (
                f"more than {max_sleeps} retry waits: the retries are unbounded\n"
                + stream.getvalue()[-2000:]
            )
            if on_sleep is not None:
                on_sleep(len(sleeps))

        started = time.monotonic()
        outcome: Outcome | None = None
        error: StagerError | None = None
        try:
            _, outcome = run_stage(config, Effects(log=log, probe_fs=probe_fs, sleep=sleep))
        except StagerError as err:
            error = err
        return StageRun(
            log=stream.getvalue(),
            sleeps=sleeps,
            elapsed_s=time.monotonic() - started,
            outcome=outcome,
            error=error,
            config_env=dict(env),
        )

    def ok(self, env: dict[str, str], **kwargs: Any) -> StageRun:
        result = self.run(env, **kwargs)
        if result.error is not None:
            pytest.fail(
                f"stage failed with {result.reason}: {result.error.detail}\n--- log ---\n"
                + result.log
            )
        return result

    def fails(self, env: dict[str, str], **kwargs: Any) -> StageRun:
        result = self.run(env, **kwargs)
        assert result.error is not None, "stage succeeded but was expected to fail:\n" + result.log
        return result

    # --- the cache on disk ----------------------------------------------------------

    @staticmethod
    def record(dest: Path) -> bytes | None:
        """Raw bytes of `<dest>.llmkube-size`, None when absent."""
        path = Path(str(dest) + RECORD_SUFFIX)
        return path.read_bytes() if path.exists() else None

    @staticmethod
    def write_record(dest: Path, size: int) -> None:
        Path(str(dest) + RECORD_SUFFIX).write_bytes(str(size).encode())

    @staticmethod
    def shell_partial(dest: Path, size: int | None, etag: str | None) -> Path:
        """The shell scripts' resumable partial name (spec §4.2): `<dest>.<key>.tmp`,
        key = first 12 hex of sha256 of `CL<content-length>ET<etag>`."""
        validator = f"CL{'' if size is None else size}ET{etag or ''}"
        key = hashlib.sha256(validator.encode()).hexdigest()[:12]
        return Path(f"{dest}.{key}.tmp")

    @staticmethod
    def seed(path: Path, data: bytes, age_s: float = 3600.0) -> Path:
        """Write a file left by an earlier (dead) writer: old mtime, so no
        liveness rule can mistake it for a transfer in progress."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        old = time.time() - age_s
        os.utime(path, (old, old))
        return path

    @staticmethod
    def partials(dest: Path) -> dict[str, int]:
        """Every leftover next to `dest` that belongs to it (partials, temps),
        name -> size; the published file and its size record excluded."""
        base = dest.name
        out: dict[str, int] = {}
        for entry in dest.parent.iterdir():
            name = entry.name
            if name.startswith(base + ".") and name != base + RECORD_SUFFIX:
                out[name] = entry.stat().st_size
        return out

    @staticmethod
    def names(directory: Path) -> set[str]:
        """Files under `directory` (relative, recursive), the lock file excluded."""
        return {
            str(p.relative_to(directory))
            for p in directory.rglob("*")
            if p.is_file() and p.name != LOCK_NAME
        }


def payload(size: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


@pytest.fixture
def stager(tmp_path: Path) -> Stager:
    return Stager(tmp_path)


@pytest.fixture
def origin() -> Iterator[Origin]:
    with Origin() as srv:
        yield srv


@pytest.fixture
def origin_b() -> Iterator[Origin]:
    """A second, independent host (redirect target)."""
    with Origin() as srv:
        yield srv


@pytest.fixture
def make_payload():  # type: ignore[no-untyped-def]
    """Deterministic pseudo-random bytes: make_payload(size, seed=1)."""
    return payload


@pytest.fixture
def watchdog() -> Iterator[Callable[[float, Callable[[], None]], None]]:
    """watchdog(seconds, action): run `action` (e.g. close the origin) if the test
    is still running after `seconds`, so a missing timeout in the code under test
    fails the test's elapsed-time bound instead of hanging the suite."""
    timers: list[threading.Timer] = []

    def arm(seconds: float, action: Callable[[], None]) -> None:
        timer = threading.Timer(seconds, action)
        timer.daemon = True
        timer.start()
        timers.append(timer)

    yield arm
    for timer in timers:
        timer.cancel()
