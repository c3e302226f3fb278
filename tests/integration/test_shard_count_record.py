"""`.llmkube-shards` is read as every other record is (#21 item 6): a FIFO
of that name hung every `stage`, warm starts included (open(2) blocks until
a writer comes); a count of 3,000,000 made a warm start stat and open three
million share records (20 s). The record must be a regular file, opened
without following a symlink nor blocking, bounded in size, and a count is
capped at the shard limit (config.MAX_SHARDS). Each test failed before the
fix (the FIFO one by its deadline, the count one by its time bound)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload

REPO = "/org/repo/resolve/main"
FILES = {"a.bin": payload(20_000, seed=1), "b.bin": payload(30_000, seed=2)}


def _warm(origin: Origin, tmp_path: Path) -> tuple[Pod, dict[str, str]]:
    for rel, data in FILES.items():
        origin.put(f"{REPO}/{rel}", data)
    pod = Pod(tmp_path)
    env = pod.multi_env(origin.url + REPO + "/", FILES)
    pod.run(env=env).ok(files=2, fetched=2)
    return pod, env


def test_a_fifo_named_like_the_shard_count_does_not_hang_a_warm_start(
    origin: Origin, tmp_path: Path
) -> None:
    pod, env = _warm(origin, tmp_path)
    os.mkfifo(pod.cache_dir / ".llmkube-shards")
    origin.clear_log()
    # The deadline is the verdict: before the fix open(2) blocked forever.
    pod.run(env=env, timeout=10).ok(files=2, fetched=0, reused=2)
    pod.run("verify", env=env, timeout=10).ok()
    assert origin.requests() == []


def test_a_huge_shard_count_is_capped_at_the_shard_limit(origin: Origin, tmp_path: Path) -> None:
    pod, env = _warm(origin, tmp_path)
    (pod.cache_dir / ".llmkube-shards").write_text("3000000")
    started = time.monotonic()
    pod.run(env=env, timeout=60).ok(files=2, fetched=0, reused=2)
    seconds = time.monotonic() - started
    # A warm start of two files takes well under a second; three million
    # share records took 20 s. The cap (10,000 names) keeps it near the former.
    assert seconds < 3.0, f"a warm start took {seconds:.1f}s with a count of 3,000,000"


def test_a_symlinked_or_oversized_shard_count_is_no_count(origin: Origin, tmp_path: Path) -> None:
    from llmkube_stager.cache.runrecord import shard_count

    pod, _env = _warm(origin, tmp_path)
    record = pod.cache_dir / ".llmkube-shards"
    target = tmp_path / "elsewhere"
    target.write_text("2")
    record.symlink_to(target)
    assert shard_count(str(pod.cache_dir)) == 0, "a symlink was followed"
    record.unlink()
    record.write_text("2" + " " * 64)
    assert shard_count(str(pod.cache_dir)) == 0, "a prefix of an oversized record was used"
    record.write_text("2")
    assert shard_count(str(pod.cache_dir)) == 2
