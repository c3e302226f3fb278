"""Progress lines every PROGRESS_INTERVAL seconds (spec §5.4).

`Downloaded <N> MiB of <T> MiB (<P>%)`, or `Downloaded <N> MiB` without a
known total; N counts the bytes in the partial, resumed bytes included, as the
old `download_with_progress` did by stat-ing the file. Never `\\r`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Self

from llmkube_stager.logs import Log

MIB = 1024 * 1024


def progress_text(done_bytes: int, total_bytes: int | None) -> str:
    done_mib = done_bytes // MIB
    if total_bytes:
        percent = min(100, done_bytes * 100 // total_bytes)
        return f"Downloaded {done_mib} MiB of {total_bytes // MIB} MiB ({percent}%)"
    return f"Downloaded {done_mib} MiB"


class _Background:
    """A daemon thread running `_run` for the span of a `with` block; `_run`
    ends when `_stop` is set (waited on, so it wakes at once)."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)


class ProgressTicker(_Background):
    """A daemon thread that reports a shared byte counter at an interval and
    calls `heartbeat` every `heartbeat_s` (a live writer's proof of life)."""

    def __init__(
        self,
        log: Log,
        interval_s: float,
        rel: str,
        heartbeat: Callable[[], None] | None = None,
        heartbeat_s: float = 5.0,
    ) -> None:
        self._log = log
        self._interval_s = interval_s
        self._rel = rel
        self._heartbeat = heartbeat
        self._heartbeat_s = heartbeat_s
        super().__init__("progress")
        self.done_bytes = 0
        self.total_bytes: int | None = None

    def _run(self) -> None:
        next_report = time.monotonic() + self._interval_s
        next_beat = time.monotonic() + self._heartbeat_s
        while not self._stop.wait(max(0.0, min(next_report, next_beat) - time.monotonic())):
            now = time.monotonic()
            if now >= next_report:
                # Two ints written by another thread, read under the GIL; a
                # line one buffer behind is fine for a progress report.
                self._log.info(
                    "progress", progress_text(self.done_bytes, self.total_bytes), file=self._rel
                )
                next_report = now + self._interval_s
            if now >= next_beat:
                if self._heartbeat is not None:
                    self._heartbeat()
                next_beat = now + self._heartbeat_s


class KeepAlive(_Background):
    """Heartbeats for complete partials that wait to be published (OnChange
    stages every file before it publishes any): without them another writer
    would take a waiting partial for a dead writer's."""

    def __init__(self, every_s: float = 5.0) -> None:
        self._claims: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._every_s = every_s
        super().__init__("keepalive")

    def add(self, beat: Callable[[], None]) -> None:
        with self._lock:
            self._claims.append(beat)

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            with self._lock:
                beats = list(self._claims)
            for beat in beats:
                beat()
