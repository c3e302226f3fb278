"""Progress lines every PROGRESS_INTERVAL seconds (spec §5.4).

`Downloaded <N> MiB of <T> MiB (<P>%)`, or `Downloaded <N> MiB` without a
known total; N counts the bytes in the partial, resumed bytes included, as the
old `download_with_progress` did by stat-ing the file. Never `\\r`.
"""

from __future__ import annotations

import threading
from types import TracebackType

from llmkube_stager.logs import Log

MIB = 1024 * 1024


def progress_text(done_bytes: int, total_bytes: int | None) -> str:
    done_mib = done_bytes // MIB
    if total_bytes:
        percent = min(100, done_bytes * 100 // total_bytes)
        return f"Downloaded {done_mib} MiB of {total_bytes // MIB} MiB ({percent}%)"
    return f"Downloaded {done_mib} MiB"


class ProgressTicker:
    """A daemon thread that reports a shared byte counter at an interval."""

    def __init__(self, log: Log, interval_s: float, rel: str) -> None:
        self._log = log
        self._interval_s = interval_s
        self._rel = rel
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self.done_bytes = 0
        self.total_bytes: int | None = None

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            # Reading two ints written by another thread is safe under the GIL;
            # a line one buffer behind is fine for a progress report.
            self._log.info(
                "progress", progress_text(self.done_bytes, self.total_bytes), file=self._rel
            )

    def __enter__(self) -> ProgressTicker:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
