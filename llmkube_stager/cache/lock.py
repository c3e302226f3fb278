"""The cache directory lock (spec §9.1): an flock on `<dir>/.llmkube.lock`.

It avoids duplicate work between writers; correctness never depends on it
(ARCHITECTURE idea 2): on FUSE flock does not exclude across nodes, so there
nobody takes it and private partials keep writers apart (transfer/).
Writers log while they wait and give up after LLMKUBE_LOCK_TIMEOUT.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Callable
from types import TracebackType

from llmkube_stager.errors import CacheError, Reason
from llmkube_stager.layout import LOCK_NAME
from llmkube_stager.logs import Log

POLL_S = 0.2
_WAIT_LOG_EVERY_S = 10.0


class CacheLock:
    def __init__(
        self,
        directory: str,
        timeout_s: float,
        log: Log,
        monotonic: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.path = os.path.join(directory, LOCK_NAME)
        self._timeout_s = timeout_s
        self._log = log
        self._monotonic = monotonic
        self._sleep = sleep
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = self._open()
        started = self._monotonic()
        next_log = started
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._fd = fd
                return
            except BlockingIOError:
                pass
            except OSError as exc:
                os.close(fd)
                raise self._unsupported(exc) from exc
            now = self._monotonic()
            if now - started >= self._timeout_s:
                os.close(fd)
                raise CacheError(
                    f"another writer held {self.path} for {self._timeout_s:g}s",
                    reason=Reason.CACHE_LOCK_TIMEOUT,
                )
            if now >= next_log:
                self._log.info(
                    "lock_wait",
                    "Waiting for another writer to finish staging into this cache directory",
                    waited_s=round(now - started, 1),
                    path=self.path,
                )
                next_log = now + _WAIT_LOG_EVERY_S
            self._sleep(POLL_S)

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o664)
        except OSError as exc:
            raise CacheError(
                f"cannot create the lock file {self.path}: {os.strerror(exc.errno or 0)}",
                reason=Reason.CACHE_UNWRITABLE,
            ) from exc

    def _unsupported(self, exc: OSError) -> CacheError:
        if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            return CacheError(
                f"the cache filesystem refused flock on {self.path}",
                reason=Reason.CACHE_LOCK_UNSUPPORTED,
            )
        return CacheError(f"flock on {self.path} failed: {os.strerror(exc.errno or 0)}")

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> CacheLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
