"""A serving pod never rolls forward a live share's publish (#21 item 5).

A share of a sharded prefetch publishes its refreshed files as a set (an
intent in its own record, then one rename each). The share is stopped with
a real SIGSTOP at the moment of its 3rd rename (an audit hook in the share's
own process: `os.rename` of a partial onto a model file), so it holds its
partials' flocks and its intent. An unsharded writer (a serving pod) on the
same cache took every share intent whose partials existed and renamed them
itself: the share, resumed, found its partials gone and downloaded its
files again (97 of them in the issue). Now the writer waits for a live
publish (the partials' flocks, or where flock may not exclude their
heartbeats on the filesystem's clock, say it is live); a dead share's (a
SIGKILL) is rolled forward at once, as before. Failed before the fix: the
resumed share fetched 48 files again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.harness.modelsets import warm_set_changed_upstream
from tests.harness.origin import Origin
from tests.harness.pod import Pod, multi_env

FILES = 96
SHARDS = 2
STOP_AT = 3  # the share stops at its 3rd publish rename

# The CLI with a hook that sends this very process `SIGNAL` when it is about
# to rename its STOP_AT-th partial onto a model file (mid-publish).
SIGNALLED_CLI = r"""
import os, signal, sys
SIG = getattr(signal, os.environ.pop("TEST_SIGNAL"))
STOP_AT = int(os.environ.pop("TEST_STOP_AT"))
seen = []
def hook(event, args):
    if event != "os.rename" or seen and len(seen) >= STOP_AT:
        return
    src, dst = os.fsdecode(args[0]), os.fsdecode(args[1])
    if src.endswith((".llmkube-part.tmp", ".llmkube-segs.tmp")) and not dst.endswith(".tmp"):
        seen.append(dst)
        if len(seen) == STOP_AT:
            os.kill(os.getpid(), SIG)
sys.addaudithook(hook)
from llmkube_stager.cli import main
# Pod.popen runs `python -c <this> -m llmkube_stager <args>`.
main(sys.argv[sys.argv.index("llmkube_stager") + 1 :])
"""


def _warm(pod: Pod, origin: Origin) -> tuple[dict[str, str], dict[str, bytes]]:
    files = [f"part-{i:03d}.bin" for i in range(FILES)]
    cache = pod.cache_dir
    new = warm_set_changed_upstream(cache, origin, files, (700, 1500), new_seed=500)
    env = {**multi_env(origin.url + "/repo/", cache, files), "LLMKUBE_RETRIES": "0"}
    return env, new


def _share(pod: Pod, env: dict[str, str], sig: str) -> subprocess.Popen[str]:
    share = {
        **env,
        "LLMKUBE_REFRESH_POLICY": "OnChange",
        "LLMKUBE_PREFETCH_STAGER": "true",
        "LLMKUBE_SHARDS": str(SHARDS),
        "JOB_COMPLETION_INDEX": "0",
        "TEST_SIGNAL": sig,
        "TEST_STOP_AT": str(STOP_AT),
    }
    return pod.popen("stage", env=share, python_flags=("-c", SIGNALLED_CLI))


def _wait_state(pid: int, states: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        if state in states.split(","):
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} never reached {states}")


def test_a_frozen_shares_publish_is_waited_for_not_taken(origin: Origin, tmp_path: Path) -> None:
    share_pod, writer_pod = Pod(tmp_path), Pod(tmp_path)
    env, new = _warm(share_pod, origin)
    share = _share(share_pod, env, "SIGSTOP")
    try:
        _wait_state(share.pid, "T")
        origin.clear_log()
        # The serving pod starts while the share is frozen mid-publish; the
        # share resumes a second later.
        writer = writer_pod.popen("stage", env={**env, "LLMKUBE_LOCK_TIMEOUT": "60"})
        time.sleep(1.0)
        assert writer.poll() is None, "the writer did not wait for the live publish"
    finally:
        os.kill(share.pid, signal.SIGCONT)
    share_run = share_pod.finish(share, timeout=60)
    writer_run = writer_pod.finish(writer, timeout=60)
    share_run.ok()
    writer_run.ok()
    assert origin.requests(method="GET") == [], (
        f"{len(origin.requests(method='GET'))} files downloaded again after the freeze"
    )
    mine = [rel for rel in new if (share_pod.cache_dir / rel).read_bytes() == new[rel]]
    assert len(mine) == FILES // SHARDS, "the share's set is not whole"
    share_pod.run("verify", env=env).ok()


def test_a_live_publish_that_outlasts_the_wait_fails_retryable(
    origin: Origin, tmp_path: Path
) -> None:
    share_pod, writer_pod = Pod(tmp_path), Pod(tmp_path)
    env, _new = _warm(share_pod, origin)
    share = _share(share_pod, env, "SIGSTOP")
    try:
        _wait_state(share.pid, "T")
        run = writer_pod.run("stage", env={**env, "LLMKUBE_LOCK_TIMEOUT": "1"}, timeout=30)
        run.failed("ModelCacheLockTimeout", retryable=True)
        assert "publish" in run.term["message"], run.term
    finally:
        os.kill(share.pid, signal.SIGCONT)
    share_pod.finish(share, timeout=60).ok()


def test_a_dead_shares_publish_is_rolled_forward_at_once(origin: Origin, tmp_path: Path) -> None:
    share_pod, writer_pod = Pod(tmp_path), Pod(tmp_path)
    env, new = _warm(share_pod, origin)
    share = _share(share_pod, env, "SIGKILL")
    assert share_pod.finish(share, timeout=60).returncode == -signal.SIGKILL
    origin.clear_log()
    started = time.monotonic()
    writer_pod.run("stage", env={**env, "LLMKUBE_LOCK_TIMEOUT": "60"}).ok()
    assert time.monotonic() - started < 10, "the writer waited for a dead share"
    assert origin.requests(method="GET") == [], "rolled forward without fetching again"
    share_files = [rel for rel in new if (share_pod.cache_dir / rel).read_bytes() == new[rel]]
    assert len(share_files) == FILES // SHARDS
    writer_pod.run("verify", env=env).ok()


def test_liveness_is_a_flock_or_where_flock_may_not_exclude_a_fresh_heartbeat(
    tmp_path: Path,
) -> None:
    """The judgement itself, on real files: a partial flocked by another
    open file is live; unflocked, it is live only where flock may not
    exclude (idle_s > 0) and its mtime is within idle_s of the
    filesystem's clock; an absent partial is no proof of life."""
    import fcntl

    from llmkube_stager.cache.partials import fs_now
    from llmkube_stager.cache.runrecord import PublishEntry
    from llmkube_stager.cache.setstate import Pending, publish_alive

    root = str(tmp_path)
    partial = tmp_path / "a.bin.0123456789ab.w1.llmkube-part.tmp"
    partial.write_bytes(b"x" * 10)
    pending = Pending("0-of-2", (PublishEntry("a.bin", partial.name, 10),))
    now = fs_now(root)
    assert not publish_alive(pending, root, now, 0.0), "a free flock is death where flock excludes"
    assert publish_alive(pending, root, now, 30.0), "a fresh heartbeat is life"
    os.utime(partial, (now - 60, now - 60))
    assert not publish_alive(pending, root, now, 30.0), "a stale heartbeat is death"
    with open(partial, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert publish_alive(pending, root, now, 0.0)
        assert publish_alive(pending, root, now, 30.0)
    partial.unlink()
    assert not publish_alive(pending, root, now, 30.0)
