"""Progress lines every PROGRESS_INTERVAL seconds (spec §5.4, #46 item 5).

Each tick writes two text lines: the scripts' `Downloaded <N> MiB of <T> MiB
(<P>%)` (or `Downloaded <N> MiB` without a known total), kept whole for the
greps that know it, and beside it the line a person reads:

    model.gguf: 1.2 MiB of 4.0 MiB (30%), 244.1 KiB/s, about 12 s left;
    model: 1.2 MiB of 4.0 MiB, 0 of 1 files done

(one line). The model's part counts the files this run fetches; its total
is known once each of their sizes is (a listing or each file's probe).

JSON logs get the second as the `progress` event with numbers (`bytes_done`,
`bytes_total`, `percent`, `rate_bps`, `eta_s`, `model_bytes_done`,
`model_bytes_total`, `files_done`, `files_total`), and no copy of the first.
N counts the bytes received into the partial, resumed bytes included, as the
old `download_with_progress` did by stat-ing the file; the rate counts only
bytes received by this run, over the last RATE_WINDOW_S. Never `\\r`.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self

from llmkube_stager.logs import Log, human_bytes

MIB = 1024 * 1024
# The rate (and so the time left) is that of the last seconds, not the
# average since the start: a transfer that stalled and recovered should not
# promise the stall's pace.
RATE_WINDOW_S = 10.0
# Progress counts bytes as they come (#46 item 5), so a read into a receive
# buffer (the stream's 4 MiB, a ranged connection's 1 MiB) takes a slice of
# it: 128 KiB is half a second at 250 KB/s. Small slices cost a fast stream
# recv calls, so a slice that fills within SLICE_FAST_S doubles, up to the
# buffer (a 256 MiB loopback stage: the agent's CPU time within this
# machine's noise of before).
SLICE_MIN_BYTES = 128 << 10
SLICE_FAST_S = 0.1


def progress_text(done_bytes: int, total_bytes: int | None) -> str:
    done_mib = done_bytes // MIB
    if total_bytes:
        percent = min(100, done_bytes * 100 // total_bytes)
        return f"Downloaded {done_mib} MiB of {total_bytes // MIB} MiB ({percent}%)"
    return f"Downloaded {done_mib} MiB"


def human_duration(seconds: float) -> str:
    whole_s = max(1, math.ceil(seconds))
    if whole_s < 60:
        return f"{whole_s} s"
    if whole_s < 3600:
        return f"{whole_s // 60} min {whole_s % 60} s"
    return f"{whole_s // 3600} h {whole_s % 3600 // 60} min"


def percent_of(done_bytes: int, total_bytes: int | None) -> int | None:
    """Of what was received, rounded down: never ahead of the bytes."""
    if not total_bytes:
        return None
    return min(100, done_bytes * 100 // total_bytes)


@dataclass
class ModelProgress:
    """The whole model's bytes across the files of one run, several of them
    possibly in flight (each file's ticker reports into it). Its total is
    known once every transferring file's size is."""

    files_total: int
    sizes: dict[str, int | None] = field(default_factory=dict)
    _done: dict[str, int] = field(default_factory=dict)
    # A file staged again (its partial taken by another writer) counts once.
    _finished: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def moved(self, rel: str, done_bytes: int, total_bytes: int | None) -> None:
        with self._lock:
            self._done[rel] = done_bytes
            if total_bytes is not None:
                self.sizes[rel] = total_bytes

    def finished(self, rel: str, size_bytes: int) -> None:
        with self._lock:
            self._done[rel] = self.sizes[rel] = size_bytes
            self._finished.add(rel)

    @property
    def files_done(self) -> int:
        return len(self._finished)

    def totals(self) -> tuple[int, int | None]:
        """(bytes received, the model's bytes or None while a size is unknown)."""
        with self._lock:
            done = sum(self._done.values())
            sizes = list(self.sizes.values())
        known = len(sizes) >= self.files_total and all(s is not None for s in sizes)
        return done, sum(s or 0 for s in sizes) if known else None


@dataclass(frozen=True)
class Report:
    """One progress report of one file (see the module docstring)."""

    rel: str
    done_bytes: int
    total_bytes: int | None
    rate_bps: float
    model_done_bytes: int
    model_total_bytes: int | None
    files_done: int
    files_total: int

    @property
    def eta_s(self) -> float | None:
        if self.total_bytes is None or self.rate_bps <= 0:
            return None
        return max(0.0, self.total_bytes - self.done_bytes) / self.rate_bps

    def text(self) -> str:
        pct = percent_of(self.done_bytes, self.total_bytes)
        eta = self.eta_s
        left = "time left unknown" if eta is None else f"about {human_duration(eta)} left"
        rate = f"{human_bytes(self.rate_bps)}/s"
        if self.total_bytes:
            done = f"{human_bytes(self.done_bytes)} of {human_bytes(self.total_bytes)} ({pct}%)"
        else:
            done = f"{human_bytes(self.done_bytes)} received"
        model = human_bytes(self.model_done_bytes)
        if self.model_total_bytes:
            model += f" of {human_bytes(self.model_total_bytes)}"
        else:
            model += " received"
        files = f"{self.files_done} of {self.files_total} files done"
        return f"{self.rel}: {done}, {rate}, {left}; model: {model}, {files}"

    def fields(self) -> dict[str, object]:
        eta = self.eta_s
        return {
            "file": self.rel,
            "bytes_done": self.done_bytes,
            "bytes_total": self.total_bytes,
            "percent": percent_of(self.done_bytes, self.total_bytes),
            "rate_bps": round(self.rate_bps),
            "eta_s": None if eta is None else round(eta, 1),
            "model_bytes_done": self.model_done_bytes,
            "model_bytes_total": self.model_total_bytes,
            "files_done": self.files_done,
            "files_total": self.files_total,
        }


@dataclass(frozen=True)
class Received:
    """A file's last progress line: what this run received of it, in how
    long (bytes already in a resumed partial are not this run's)."""

    rel: str
    received_bytes: int
    size_bytes: int
    seconds: float

    @property
    def rate_bps(self) -> float:
        return self.received_bytes / self.seconds if self.seconds > 0 else 0.0

    def text(self) -> str:
        n = self.received_bytes
        line = (
            f"{self.rel}: received {human_bytes(n)} ({n} bytes) in {self.seconds:.1f} s, "
            f"{human_bytes(self.rate_bps)}/s on average"
        )
        if self.size_bytes > n:
            line += f"; the other {human_bytes(self.size_bytes - n)} were resumed from a partial"
        return line

    def fields(self) -> dict[str, object]:
        return {
            "file": self.rel,
            "bytes": self.received_bytes,
            "size_bytes": self.size_bytes,
            "seconds": round(self.seconds, 3),
            "rate_bps": round(self.rate_bps),
        }


class RateWindow:
    """Bytes a second over the last `window_s` of (time, received) samples."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self._window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, now_s: float, received_bytes: int) -> float:
        samples = self._samples
        samples.append((now_s, received_bytes))
        # Keep one sample at or before the window's start as its anchor.
        while len(samples) > 2 and samples[1][0] <= now_s - self._window_s:
            samples.popleft()
        first_s, first_bytes = samples[0]
        if now_s <= first_s:
            return 0.0
        return max(0, received_bytes - first_bytes) / (now_s - first_s)


class ReadSlices:
    """The size of the next read into a receive buffer of `buffer_bytes`
    (see SLICE_MIN_BYTES)."""

    def __init__(self, buffer_bytes: int) -> None:
        self._buffer_bytes = buffer_bytes
        self.size_bytes = SLICE_MIN_BYTES
        self._last_s = time.monotonic()

    def took(self) -> None:
        now_s = time.monotonic()
        if now_s - self._last_s < SLICE_FAST_S:
            self.size_bytes = min(self.size_bytes * 2, self._buffer_bytes)
        else:
            self.size_bytes = SLICE_MIN_BYTES
        self._last_s = now_s


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
    """A daemon thread that reports a file's byte counters at an interval
    and calls `heartbeat` every `heartbeat_s` (a live writer's proof of
    life). The engines set `done_bytes` (the partial's bytes) and
    `received_bytes` (this run's, for the rate) as bytes arrive."""

    def __init__(
        self,
        log: Log,
        interval_s: float,
        rel: str,
        heartbeat: Callable[[], None] | None = None,
        heartbeat_s: float = 5.0,
        model: ModelProgress | None = None,
    ) -> None:
        self._log = log
        self._interval_s = interval_s
        self._rel = rel
        self._heartbeat = heartbeat
        self._heartbeat_s = heartbeat_s
        self._model = model or ModelProgress(files_total=1)
        self._rate = RateWindow()
        super().__init__("progress")
        self.done_bytes = 0
        self.received_bytes = 0
        self.total_bytes: int | None = None

    def begin(self, done_bytes: int, received_bytes: int) -> None:
        """Counters that start where an earlier engine left them (ranged
        connections carrying on from a stream): its bytes are no part of
        this rate."""
        self.done_bytes, self.received_bytes = done_bytes, received_bytes
        rate = RateWindow()
        rate.add(time.monotonic(), received_bytes)
        self._rate = rate

    def _run(self) -> None:
        self._rate.add(time.monotonic(), self.received_bytes)
        next_report = time.monotonic() + self._interval_s
        next_beat = time.monotonic() + self._heartbeat_s
        while not self._stop.wait(max(0.0, min(next_report, next_beat) - time.monotonic())):
            now = time.monotonic()
            if now >= next_report:
                self._report(now)
                next_report = now + self._interval_s
            if now >= next_beat:
                if self._heartbeat is not None:
                    self._heartbeat()
                next_beat = now + self._heartbeat_s

    def _report(self, now_s: float) -> None:
        # Ints written by another thread, read under the GIL; a line one
        # read behind is fine for a progress report.
        done, total = self.done_bytes, self.total_bytes
        rate_bps = self._rate.add(now_s, self.received_bytes)
        model = self._model
        model.moved(self._rel, done, total)
        model_done, model_total = model.totals()
        report = Report(
            self._rel, done, total, rate_bps, model_done, model_total,
            model.files_done, model.files_total,
        )  # fmt: skip
        self._log.script_line("progress_script", progress_text(done, total))
        self._log.info("progress", report.text(), **report.fields())


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
