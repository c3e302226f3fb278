"""A restarted stager on FUSE waits for its predecessor's partial rather
than downloading it again (transfer/predecessor.py).

The partial is sparse (zeros), as is the origin's file, so a big partial
costs no disk and its resume is byte-exact; the origin's log shows whether
the pod resumed (a Range from the partial's size) or started over.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from llmkube_stager.layout import private_partial_path, validator_of
from tests.harness.mounts import FuseCache
from tests.harness.origin import Origin, gets
from tests.harness.pod import Pod, single_env

MIB = 1 << 20
HELD = 512 * MIB  # more than 5 s of REFETCH_BYTES_PER_S: worth waiting for
SIZE = HELD + MIB
AGE_S = 25.0  # its writer went silent 25 s ago: idle (30 s) in 5 s


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as handle:
        handle.truncate(size)


def _served(tmp_path: Path, origin: Origin) -> tuple[str, str]:
    """A sparse SIZE-byte file on the origin; (url, its validator)."""
    www = tmp_path / "www"
    www.mkdir()
    _sparse(www / "big.gguf", SIZE)
    st = os.stat(www / "big.gguf")
    origin.serve_directory(str(www), "/w/")
    return origin.url + "/w/big.gguf", validator_of(SIZE, f'"{SIZE:x}-{st.st_mtime_ns:x}"')


def _predecessor_partial(root: Path, validator: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    partial = Path(private_partial_path(str(root / "model.gguf"), validator, "deadbeef"))
    _sparse(partial, HELD)
    when = time.time() - AGE_S
    os.utime(partial, (when, when))
    return partial


def test_a_restarted_stager_waits_and_resumes_its_predecessors_partial(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    url, validator = _served(tmp_path, origin)
    _predecessor_partial(fuse_cache.backing / "k", validator)
    env = {**single_env(url, fuse_cache.mnt / "k"), "LLMKUBE_CONNECTIONS": "1"}

    started = time.monotonic()
    run = Pod(tmp_path, env, stager=True).run("stage")
    waited_s = time.monotonic() - started

    run.ok()
    assert "waiting up to" in run.stderr
    (get,) = gets(origin, "/w/big.gguf")
    assert get.headers.get("range") == f"bytes={HELD}-"
    assert get.body_bytes == MIB
    assert os.path.getsize(fuse_cache.backing / "k" / "model.gguf") == SIZE
    assert waited_s >= 3, "it did not wait for the partial to go idle"


def test_a_partial_still_written_by_another_pod_is_not_waited_for(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    url, validator = _served(tmp_path, origin)
    partial = _predecessor_partial(fuse_cache.backing / "k", validator)
    env = {**single_env(url, fuse_cache.mnt / "k"), "LLMKUBE_CONNECTIONS": "1"}
    stop = threading.Event()

    def live_writer() -> None:  # another pod's heartbeat
        while not stop.wait(1.0):
            os.utime(partial)

    writer = threading.Thread(target=live_writer)
    writer.start()
    try:
        run = Pod(tmp_path, env, stager=True).run("stage")
    finally:
        stop.set()
        writer.join()

    run.ok()
    # Ages are read against the filesystem's clock (#10): a partial touched
    # before the pod looked is not silent and is not waited for at all.
    if "waiting up to" in run.stderr:
        assert "still being written by another pod" in run.stderr
    (get,) = gets(origin, "/w/big.gguf")
    assert "range" not in get.headers, "it took a live writer's partial"
    assert partial.exists(), "the live writer's partial was touched"
