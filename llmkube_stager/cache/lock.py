"""The cache directory lock (spec §9.1): an flock on `<dir>/.llmkube.lock`.

It avoids duplicate work between writers; correctness never depends on it
(ARCHITECTURE idea 2): on FUSE flock does not exclude across nodes, so there
nobody takes it and private partials keep writers apart (transfer/).
Writers log while they wait and give up after LLMKUBE_LOCK_TIMEOUT.

The flock is filelock's `UnixFileLock` (imported here only: this module is
imported on the write path alone). filelock >= 4 opens the lock file with
O_NOFOLLOW | O_NONBLOCK, so a planted symlink is never followed (O_CREAT
through it would create a file outside the cache, #11 item 2) and a FIFO
never blocks the open; its soft-lock fallback is refused (a marker file is
no lock across pods of a shared volume), and `on_acquired` checks what was
locked: a regular file that is still `.llmkube.lock` in the model directory
the caller validated, else the lock is refused.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING

from llmkube_stager.cache.disk import storage_fault
from llmkube_stager.errors import REMEDY_LEADS_OUTSIDE, CacheError, Reason, StagerError
from llmkube_stager.layout import LOCK_NAME
from llmkube_stager.logs import Log

if TYPE_CHECKING:
    from filelock import UnixFileLock

POLL_S = 0.2
_WAIT_LOG_EVERY_S = 10.0
_UNSUPPORTED = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS})
_NOT_PERMITTED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


class _NotOurLockFile(OSError):
    """What was locked is not a regular `.llmkube.lock` in the model directory."""


class CacheLock:
    def __init__(
        self,
        directory: str,
        timeout_s: float,
        log: Log,
        monotonic: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.directory = directory
        self.path = os.path.join(directory, LOCK_NAME)
        self._timeout_s = timeout_s
        self._log = log
        self._monotonic = monotonic
        del sleep  # filelock polls (POLL_S) with its own clock and sleep
        self._lock: UnixFileLock | None = None

    def acquire(self) -> None:
        from filelock import Timeout

        lock = self._new_lock()
        started = self._monotonic()
        slice_s = 0.0  # one try first: a free lock is taken without a log line
        while True:
            try:
                lock.acquire(timeout=slice_s)
                self._lock = lock
                return
            except Timeout:
                pass
            except OSError as exc:
                raise self._refusal(exc) from None
            waited_s = self._monotonic() - started
            if waited_s >= self._timeout_s:
                raise CacheError(
                    f"another writer held {self.path} for {self._timeout_s:g}s",
                    reason=Reason.CACHE_LOCK_TIMEOUT,
                )
            self._log.info(
                "lock_wait",
                "Waiting for another writer to finish staging into this cache directory",
                waited_s=round(waited_s, 1),
                path=self.path,
            )
            slice_s = min(_WAIT_LOG_EVERY_S, self._timeout_s - waited_s)

    def _new_lock(self) -> UnixFileLock:
        from filelock import UnixFileLock

        return UnixFileLock(
            self.path,
            mode=0o664,  # group-writable: the cache is shared by pods of one fsGroup
            thread_local=False,
            poll_interval=POLL_S,
            fallback_to_soft=False,
            preserve_lock_file=True,
            on_acquired=self._check_locked_file,
        )

    def _check_locked_file(self, fd: int) -> None:
        """The locked inode must be a regular file that is, right now, the
        entry `.llmkube.lock` of the directory we were given (not reached
        through a symlink that was swapped in meanwhile)."""
        held = os.fstat(fd)
        if not stat.S_ISREG(held.st_mode):
            raise _NotOurLockFile(errno.EINVAL, "not a regular file", self.path)
        dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            entry = os.stat(LOCK_NAME, dir_fd=dir_fd, follow_symlinks=False)
        finally:
            os.close(dir_fd)
        if not os.path.samestat(entry, held):
            raise _NotOurLockFile(errno.EINVAL, "replaced while it was locked", self.path)

    def _refusal(self, exc: OSError) -> StagerError:
        why = exc.strerror or os.strerror(exc.errno or 0)
        if isinstance(exc, _NotOurLockFile) or exc.errno in (errno.ELOOP, errno.EISDIR):
            return CacheError(
                f"the lock file {self.path} is a symlink or not a regular file ({why})",
                reason=Reason.CACHE_UNWRITABLE,
                remedy=REMEDY_LEADS_OUTSIDE,
            )
        if exc.errno in _UNSUPPORTED:
            return CacheError(
                f"the cache filesystem refused flock on {self.path}",
                reason=Reason.CACHE_LOCK_UNSUPPORTED,
            )
        # No inode left, EIO, a dead mount, a filesystem that turned itself
        # read-only: the volume's reason (#21 item 7, #29 item 7).
        fault = storage_fault(exc, f"creating the lock file {self.path}", None, self.directory)
        if fault is not None:
            return fault
        if exc.errno in _NOT_PERMITTED:
            return CacheError(
                f"cannot create the lock file {self.path}: {why}",
                reason=Reason.CACHE_UNWRITABLE,
            )
        return CacheError(f"flock on {self.path} failed: {why}")

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> CacheLock:
        self.acquire()
        return self

    def __exit__(self, *_exc_info: object) -> None:
        self.release()
