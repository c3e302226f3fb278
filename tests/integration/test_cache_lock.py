"""The writer lock on real files (cache/lock.py, filelock's UnixFileLock):
it excludes, logs the wait, times out with ModelCacheLockTimeout, and never
follows or blocks on what was planted at `.llmkube.lock` (#11 item 2, #15).
"""

from __future__ import annotations

import fcntl
import io
import os
import time
from pathlib import Path

import pytest

from llmkube_stager.cache.lock import CacheLock
from llmkube_stager.errors import CacheError, Reason
from llmkube_stager.layout import LOCK_NAME
from llmkube_stager.logs import Log


def _lock(directory: Path, timeout_s: float = 5.0) -> tuple[CacheLock, io.StringIO]:
    stream = io.StringIO()
    return CacheLock(str(directory), timeout_s, Log(stream), time.monotonic, time.sleep), stream


def test_a_free_lock_is_taken_and_released(tmp_path: Path) -> None:
    lock, log = _lock(tmp_path)
    with lock:
        fd = os.open(tmp_path / LOCK_NAME, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    assert (tmp_path / LOCK_NAME).is_file(), "the lock file stays for the next writer"
    assert oct((tmp_path / LOCK_NAME).stat().st_mode & 0o777) in ("0o664", "0o644")
    assert "Waiting" not in log.getvalue()


def test_a_held_lock_is_waited_for_with_a_log_line_then_times_out(tmp_path: Path) -> None:
    fd = os.open(tmp_path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o664)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        lock, log = _lock(tmp_path, timeout_s=0.6)
        started = time.monotonic()
        with pytest.raises(CacheError) as caught:
            lock.acquire()
        assert time.monotonic() - started >= 0.6
    finally:
        os.close(fd)
    assert caught.value.reason is Reason.CACHE_LOCK_TIMEOUT
    assert "Waiting for another writer" in log.getvalue()


@pytest.mark.parametrize("kind", ["dangling", "to-a-file", "to-a-dir"])
def test_a_symlinked_lock_file_is_refused_and_never_followed(tmp_path: Path, kind: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_bytes(b"keep")
    model = tmp_path / "k"
    model.mkdir()
    target = {"dangling": outside / "new", "to-a-file": victim, "to-a-dir": outside}[kind]
    (model / LOCK_NAME).symlink_to(target)

    lock, _ = _lock(model)
    with pytest.raises(CacheError) as caught:
        lock.acquire()

    assert caught.value.reason is Reason.CACHE_UNWRITABLE
    assert "outside" in caught.value.remedy
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert victim.read_bytes() == b"keep"


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_a_lock_name_that_is_no_file_is_refused_without_blocking(tmp_path: Path, kind: str) -> None:
    path = tmp_path / LOCK_NAME
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    lock, _ = _lock(tmp_path)
    with pytest.raises(CacheError) as caught:
        lock.acquire()
    assert caught.value.reason is Reason.CACHE_UNWRITABLE
