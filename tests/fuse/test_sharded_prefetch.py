"""Sharded prefetch over N pods (#16 item 4), on two bindfs mounts of one
directory (two "nodes" of one BlobFuse container): four stager processes,
each its JOB_COMPLETION_INDEX of LLMKUBE_SHARDS=4, as an Indexed Job runs
them. The final cache is byte-identical to the origin, `verify` of the whole
model passes, the origin served each byte once plus what the kills cost, a
killed index resumes its own partials (on the other node), and no pod
touches another share's files.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from llmkube_stager.layout import PART_SUFFIX
from llmkube_stager.share import assign
from tests.harness.disk import debris, record_of
from tests.harness.mounts import TwoNodes
from tests.harness.origin import Origin
from tests.harness.pause import await_stopped, pause_flags
from tests.harness.pod import Pod, Run, multi_env
from tests.harness.sample import payload

REPO = "/org/diffusion/resolve/main"
SHARDS = 4
KIB = 1024
MIB = 1024 * KIB
# The large files are paced like a capped CDN edge, so that a kill lands
# in the middle of one; the small ones are not. Each is larger than two
# pipeline buffers (4 MiB): a receiver writes a buffer only when it is full,
# so a file that fits one reached its partial whole, and a kill "a third in"
# found it complete (it flaked once that way).
LARGE_RATE = 3 * MIB
LARGE_BYTES = 9 * MIB


def model() -> dict[str, bytes]:
    files = {f"tokenizer/part-{i:02d}.json": payload(6 * KIB + 331 * i, seed=i) for i in range(20)}
    for k in range(1, SHARDS + 1):
        files[f"unet/model-{k:05d}-of-{SHARDS:05d}.safetensors"] = payload(
            LARGE_BYTES + 4096 * k, seed=100 + k
        )
    return files


def serve(origin: Origin, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        rate = LARGE_RATE if len(data) > MIB else None
        origin.put(f"{REPO}/{rel}", data, rate_bytes_per_s=rate)


def share_env(origin: Origin, node: Path, files: dict[str, bytes], index: int) -> dict[str, str]:
    return {
        **multi_env(origin.url + REPO + "/", node / "model", files),
        "LLMKUBE_SHARDS": str(SHARDS),
        "JOB_COMPLETION_INDEX": str(index),
        "LLMKUBE_STALL_TIMEOUT": "5",
    }


def start_shares(
    nodes: TwoNodes, origin: Origin, files: dict[str, bytes], tmp: Path
) -> tuple[list[Pod], list[subprocess.Popen[str]]]:
    """The Indexed Job: one stager process per index, even indexes on one
    node, odd ones on the other."""
    pods = [Pod(tmp, stager=True) for _ in range(SHARDS)]
    procs = [
        pods[i].popen(env=share_env(origin, node_of(nodes, i), files, i)) for i in range(SHARDS)
    ]
    return pods, procs


def node_of(nodes: TwoNodes, index: int) -> Path:
    return nodes.node1 if index % 2 == 0 else nodes.node2


def served(origin: Origin) -> Counter[str]:
    """Body bytes the origin sent per file, every GET counted."""
    sent: Counter[str] = Counter()
    for request in origin.requests(method="GET"):
        sent[request.path.removeprefix(REPO + "/")] += request.body_bytes
    return sent


def partial_bytes(backing: Path, rel: str) -> int:
    """The largest partial of `rel` in the backing directory (0: none)."""
    dest = backing / "model" / rel
    if not dest.parent.is_dir():
        return 0
    sizes = [
        p.stat().st_size
        for p in dest.parent.iterdir()
        if p.name.startswith(dest.name + ".") and p.name.endswith(PART_SUFFIX)
    ]
    return max(sizes, default=0)


def assert_whole_model(backing: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        dest = backing / "model" / rel
        assert dest.read_bytes() == data, rel
        assert record_of(dest) == str(len(data)), rel
    assert debris(backing / "model") == []


def verify_all(nodes: TwoNodes, origin: Origin, files: dict[str, bytes], tmp: Path) -> Run:
    reader = Pod(tmp)
    return reader.run(
        "verify", env=multi_env(origin.url + REPO + "/", nodes.node2 / "model", files)
    )


def test_four_shares_on_two_nodes_stage_the_model_once(
    two_nodes: TwoNodes, origin: Origin, tmp_path: Path
) -> None:
    files = model()
    serve(origin, files)
    pods, procs = start_shares(two_nodes, origin, files, tmp_path)
    runs = [pods[i].finish(procs[i], timeout=120) for i in range(SHARDS)]

    owner = assign({rel: len(data) for rel, data in files.items()}, SHARDS)
    for index, run in enumerate(runs):
        mine = sum(1 for o in owner.values() if o == index)
        run.ok(files=mine, fetched=mine)
        assert run.has_line(f"Share {index}-of-{SHARDS}: {mine} of {len(files)} files"), run.stderr
    assert_whole_model(two_nodes.backing, files)
    verify_all(two_nodes, origin, files, tmp_path).ok(
        files=len(files), fetched=0, reused=len(files)
    )
    # Every byte once: no file was fetched by two pods, none twice.
    assert served(origin) == {rel: len(data) for rel, data in files.items()}
    # Every pod listed every file (the same listing, the same assignment).
    heads = Counter(r.path for r in origin.requests(method="HEAD"))
    assert set(heads.values()) == {SHARDS}, heads
    # Each large file went to its own pod: the shares are balanced.
    large = {owner[rel] for rel, data in files.items() if len(data) > MIB}
    assert large == set(range(SHARDS))


def test_killed_indexes_resume_their_own_partials_on_the_other_node(
    two_nodes: TwoNodes, origin: Origin, tmp_path: Path
) -> None:
    files = model()
    serve(origin, files)
    owner = assign({rel: len(data) for rel, data in files.items()}, SHARDS)
    large_of = {owner[rel]: rel for rel, data in files.items() if len(data) > MIB}
    killed = (1, 3)
    pods, procs = start_shares(two_nodes, origin, files, tmp_path)
    backing = two_nodes.backing
    pending = set(killed)
    deadline = time.monotonic() + 60
    while pending:  # each killed as soon as its large file is a third in
        assert time.monotonic() < deadline, f"no partial of {pending} grew"
        for index in sorted(pending):
            if partial_bytes(backing, large_of[index]) >= MIB:
                procs[index].send_signal(signal.SIGKILL)
                procs[index].wait()
                pending.discard(index)
        time.sleep(0.01)
    at_kill = {i: partial_bytes(backing, large_of[i]) for i in killed}
    for index in sorted(set(range(SHARDS)) - set(killed)):
        pods[index].finish(procs[index], timeout=120).ok()
    for index in killed:
        pods[index].finish(procs[index])

    # The other shares finished without touching the killed shares' partials.
    kept = {i: partial_bytes(backing, large_of[i]) for i in killed}
    assert kept == at_kill and all(0 < kept[i] < len(files[large_of[i]]) for i in killed)
    for index in killed:
        assert not (backing / "model" / large_of[index]).exists()
    before = served(origin)
    # The Job retries each index after its back-off; by then the partials
    # are idle (no heartbeat for more than partials.IDLE_S).
    age_partials(backing / "model", 120)

    for index in killed:
        other_node = node_of(two_nodes, index + 1)
        pods[index].run(env=share_env(origin, other_node, files, index), timeout=120).ok()

    assert_whole_model(backing, files)
    verify_all(two_nodes, origin, files, tmp_path).ok(
        files=len(files), fetched=0, reused=len(files)
    )
    after = served(origin)
    for index in killed:
        rel = large_of[index]
        # The restart asked only for what the kept partial lacks.
        assert after[rel] - before[rel] == len(files[rel]) - kept[index], rel
    lost = sum(before[large_of[i]] - kept[i] for i in killed)  # in flight at the kill
    total = sum(len(d) for d in files.values())
    assert sum(after.values()) == total + lost
    assert 0 <= lost <= len(killed) * 16 * MIB  # at most a pipeline's buffers each


def age_partials(root: Path, seconds: float) -> None:
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            if name.endswith(PART_SUFFIX):
                path = os.path.join(dirpath, name)
                old = os.stat(path).st_mtime - seconds
                os.utime(path, (old, old))


def test_a_serving_pod_meanwhile_sees_whole_files_or_refuses(
    two_nodes: TwoNodes, origin: Origin, tmp_path: Path
) -> None:
    files = model()
    serve(origin, files)
    pods, procs = start_shares(two_nodes, origin, files, tmp_path)
    reader = Pod(tmp_path)
    reader_env = multi_env(origin.url + REPO + "/", two_nodes.node2 / "model", files)
    model_dir = two_nodes.node2 / "model"
    seen: list[tuple[Run, dict[str, bytes]]] = []

    def serve_once() -> None:
        run = reader.run(env=reader_env)
        seen.append((run, read_model(model_dir, files) if run.returncode == 0 else {}))

    while any(p.poll() is None for p in procs):
        serve_once()
    for index in range(SHARDS):
        pods[index].finish(procs[index], timeout=120).ok()
    serve_once()

    assert seen[-1][0].returncode == 0, seen[-1][0]
    for run, served_bytes in seen:
        if run.returncode == 0:
            assert_accepted_whole(run, served_bytes, files)
        else:
            # A serving pod on FUSE never stages: it refuses what is missing.
            run.failed("ModelCacheLockUnsupported", exit_code=run.returncode, retryable=False)
    assert_whole_model(two_nodes.backing, files)
    last, _ = seen[-1]
    last.ok(files=len(files), fetched=0, reused=len(files))  # every record written by now
    assert "no valid size record" not in last.stderr


def read_model(model_dir: Path, files: dict[str, bytes]) -> dict[str, bytes]:
    """What a serving container on that node is given right after its init
    container accepted the cache (nothing replaces a published file here)."""
    return {rel: (model_dir / rel).read_bytes() for rel in files}


def assert_accepted_whole(
    run: Run, served_bytes: dict[str, bytes], files: dict[str, bytes]
) -> None:
    """The promise to a serving pod: every file it accepted is whole and
    right (bytes compared), nothing fetched. A file seen between its
    publish rename and its size record is kept as legacy with a warning
    (the writer renames only a partial of the origin's size, and then
    records that same size: the window accepts nothing the record would
    refuse), so kept + reused, not reused alone, counts the files."""
    total, fetched, reused, kept = run.stats
    assert (total, fetched, reused + kept) == (len(files), 0, len(files)), run
    assert len([w for w in run.warnings if "no valid size record" in w]) == kept, run
    for rel, data in files.items():
        assert served_bytes[rel] == data, rel


def test_a_serving_pod_between_a_publish_and_its_record_keeps_the_whole_file(
    two_nodes: TwoNodes, origin: Origin, tmp_path: Path
) -> None:
    """The window the test above hits by chance (2 of 6 runs once), held
    open: a stager frozen right after it renamed the last file into place,
    before its size record. A serving pod on the other node starts then: it
    keeps that file (whole: the writer published it at the origin's size)
    with the legacy warning, and once the stager went on it reuses it
    without one."""
    files = {f"tokenizer/part-{i:02d}.json": payload(6 * KIB + 331 * i, seed=i) for i in range(3)}
    last = "tokenizer/part-02.json"
    serve(origin, files)
    first = {rel: data for rel, data in files.items() if rel != last}
    writer = Pod(tmp_path, stager=True)
    writer.run(env=multi_env(origin.url + REPO + "/", two_nodes.node1 / "model", first)).ok()
    dest = two_nodes.node1 / "model" / last
    flags, pause_env = pause_flags([dest])
    env = {**multi_env(origin.url + REPO + "/", two_nodes.node1 / "model", files), **pause_env}
    proc = writer.popen(env=env, python_flags=flags)
    reader = Pod(tmp_path)
    reader_env = multi_env(origin.url + REPO + "/", two_nodes.node2 / "model", files)
    try:
        await_stopped(proc)  # renamed into place; its record not yet written
        assert record_of(two_nodes.backing / "model" / last) is None
        during = reader.run(env=reader_env)
        assert_accepted_whole(during, read_model(two_nodes.node2 / "model", files), files)
        assert during.stats == (len(files), 0, len(files) - 1, 1), during
        assert any(last in w and "no valid size record" in w for w in during.warnings), during
    finally:
        proc.send_signal(signal.SIGCONT)
    writer.finish(proc).ok(files=len(files), fetched=1, reused=len(files) - 1)
    after = reader.run(env=reader_env)
    after.ok(files=len(files), fetched=0, reused=len(files))
    assert "no valid size record" not in after.stderr
    assert_whole_model(two_nodes.backing, files)


def test_an_index_that_saw_another_listing_fails_instead_of_succeeding(
    two_nodes: TwoNodes, origin: Origin, tmp_path: Path
) -> None:
    """Share 0 stages from one listing, then a file changes size upstream:
    share 1 assigns from another listing, where a file could belong to no
    share. It fails (retryable: running the Job again lists anew)."""
    files = model()
    serve(origin, files)
    first = Pod(tmp_path, stager=True)
    first.run(env=share_env(origin, two_nodes.node1, files, 0), timeout=120).ok()
    changed = {**files, "tokenizer/part-00.json": payload(40 * KIB, seed=77)}
    serve(origin, changed)

    second = Pod(tmp_path, stager=True)
    run = second.run(env=share_env(origin, two_nodes.node2, changed, 1), timeout=120)

    run.failed("ModelSourceChanged", exit_code=run.returncode, retryable=True)
    assert "share 1-of-4 assigned files from another listing" in run.term["message"]


def test_shares_are_only_for_prefetch_stagers(origin: Origin, tmp_path: Path) -> None:
    files = model()
    pod = Pod(tmp_path)  # a serving pod
    env = share_env(origin, tmp_path, files, 0)
    run = pod.run(env=env)
    run.failed("InvalidConfiguration", exit_code=run.returncode)
    assert "LLMKUBE_PREFETCH_STAGER" in run.term["message"]
    assert not (tmp_path / "model").exists()
