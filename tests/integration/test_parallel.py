"""Parallel ranged connections into one file (transfer/parallel.py).

A file of 32 MiB and more starts as one stream; when that connection is slow
(an origin capping each connection, like a CDN edge) the rest goes over
LLMKUBE_CONNECTIONS ranged connections (engine.py's widening). A journal
records completed ranges for resume; an origin that does not honour ranges
makes the transfer fall back to one stream. Assertions are on bytes,
records, stamps and the ranges the origin was asked for.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import threading
import time
from pathlib import Path

from llmkube_stager.cache.fs import probe_fs
from llmkube_stager.layout import segmented_paths, validator_of
from llmkube_stager.model import Decision
from llmkube_stager.transfer.segments import MIN_ITEM_BYTES, Ranges, work_items
from tests.harness.disk import record_of
from tests.harness.features import missing_feature
from tests.harness.origin import Fault, RequestRecord
from tests.harness.sample import payload

MIB = 1 << 20
SIZE = 40 * MIB  # above the 32 MiB threshold
PATH = "/m/big.gguf"
# Per connection: one stream moves ~6 MiB in its first second (far below the
# 250 MB/s widening line), which leaves more than the 32 MiB worth splitting.
CAP = 6 * MIB


def _ranges(requests: list[RequestRecord]) -> list[tuple[int, int]]:
    found = []
    for request in requests:
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", request.headers.get("range", ""))
        assert match, f"a GET without a byte range: {request.headers}"
        found.append((int(match.group(1)), int(match.group(2) or SIZE - 1)))
    return sorted(found)


def test_a_capped_connection_widens_to_several_ranged_connections(pod, origin) -> None:
    data = payload(SIZE, seed=3)
    origin.put(PATH, data, rate_bytes_per_s=CAP)
    digest = hashlib.sha256(data).hexdigest()

    run = pod.stage(
        pod.single_env(origin.url + PATH, LLMKUBE_CONNECTIONS="4", MODEL_SHA256=digest)
    ).ok()

    dest = pod.dest()
    assert dest.read_bytes() == data  # and the digest, hashed across the handover, matched
    assert record_of(dest) == str(SIZE)
    assert Path(str(dest) + ".sha256").read_text().split()[:2] == [digest, str(SIZE)]
    first, *rest = origin.requests(PATH, "GET")
    assert "range" not in first.headers, "the stream starts at byte 0"
    spans = _ranges(rest)
    assert len(spans) >= 2, "one connection only"
    handed_over = spans[0][0]
    assert 0 < handed_over <= first.body_bytes, "the ranges carry on where the stream stopped"
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))
    assert spans[-1][1] == SIZE - 1
    assert run.has_line("ranged connections")
    assert run.outcome is not None and run.outcome.bytes_fetched == SIZE
    assert not [p for p in os.listdir(dest.parent) if "llmkube-segs" in p or "journal" in p]


def test_a_fast_connection_stays_one_stream(pod, origin) -> None:
    data = payload(SIZE, seed=8)
    origin.put(PATH, data)  # loopback, uncapped: done before the rate is even judged

    run = pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_CONNECTIONS="4")).ok()

    assert pod.dest().read_bytes() == data
    gets = origin.requests(PATH, "GET")
    assert len(gets) == 1 and "range" not in gets[0].headers
    assert not run.has_line("ranged connections")


def _left_by_a_killed_parallel_transfer(dest: Path, data: bytes, done_to: int) -> tuple[str, str]:
    """A segmented partial with a journal claiming [0, done_to), idle."""
    dest.parent.mkdir(parents=True)
    # The fixture's automatic strong ETag: the first 16 hex of the sha256.
    validator = validator_of(SIZE, '"' + hashlib.sha256(data).hexdigest()[:16] + '"')
    segs, journal = segmented_paths(str(dest), validator, "deadbeef")
    with open(segs, "wb") as handle:
        handle.write(data[:done_to])
        handle.truncate(SIZE)
    Path(journal).write_text(
        json.dumps({"validator": validator, "size": SIZE, "done": [[0, done_to]]})
    )
    old = 1_000_000_000
    os.utime(segs, (old, old))
    os.utime(journal, (old, old))
    return segs, journal


def test_journal_resume_fetches_only_the_missing_ranges(pod, origin) -> None:
    data = payload(SIZE, seed=4)
    origin.put(PATH, data)
    dest = pod.dest()
    done_to = 24 * MIB  # a killed writer finished the first 24 MiB
    segs, journal = _left_by_a_killed_parallel_transfer(dest, data, done_to)

    run = pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_CONNECTIONS="4")).ok()

    assert dest.read_bytes() == data
    ranges = _ranges(origin.requests(PATH, "GET"))
    assert all(start >= done_to for start, _ in ranges), "journaled bytes asked again"
    assert sum(r.body_bytes for r in origin.requests(PATH, "GET")) == SIZE - done_to
    assert run.outcome is not None and run.outcome.bytes_fetched == SIZE - done_to
    assert not os.path.exists(segs) and not os.path.exists(journal)


def test_origin_without_ranges_falls_back_to_one_stream(pod, origin) -> None:
    data = payload(SIZE, seed=5)
    origin.put(PATH, data)
    # A parallel transfer to resume; HEAD promises ranges, the GETs ignore
    # them (a misconfigured mirror).
    _left_by_a_killed_parallel_transfer(pod.dest(), data, 8 * MIB)
    origin.set_fault(PATH, Fault(ignore_range=True, methods=("GET",)))

    run = pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_CONNECTIONS="4")).ok()

    assert pod.dest().read_bytes() == data
    assert run.has_line("falling back to one connection")
    assert not [p for p in os.listdir(pod.dest().parent) if "llmkube-segs" in p]


def test_a_wrong_digest_over_parallel_ranges_publishes_nothing(pod, origin) -> None:
    data = payload(SIZE, seed=6)
    origin.put(PATH, data, rate_bytes_per_s=CAP)
    wrong = hashlib.sha256(b"not this").hexdigest()

    run = pod.stage(
        pod.single_env(origin.url + PATH, LLMKUBE_CONNECTIONS="4", MODEL_SHA256=wrong)
    ).failed()

    assert run.reason == "ModelTransferChecksumMismatch"
    assert run.has_line("ranged connections")
    dest = pod.dest()
    assert not dest.exists()
    assert Path(f"{dest}.{wrong}.sha256-rejected").exists()
    assert not [p for p in os.listdir(dest.parent) if "llmkube-segs" in p]


def test_a_range_cut_short_is_retried_from_where_it_stopped(pod, origin) -> None:
    data = payload(SIZE, seed=7)
    origin.put(PATH, data)
    _left_by_a_killed_parallel_transfer(pod.dest(), data, 8 * MIB)
    origin.set_fault(PATH, Fault(truncate_after=3 * MIB, times=2, methods=("GET",)))

    run = pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_CONNECTIONS="4")).ok()

    assert pod.dest().read_bytes() == data
    assert len(run.sleeps) == 2  # one retry wait per cut range
    assert run.outcome is not None and run.outcome.count(Decision.FETCH) == 1


def test_ranges_merge_and_report_the_contiguous_prefix() -> None:
    ranges = Ranges([(10, 20)])
    assert ranges.prefix() == 0
    ranges.add(0, 10)
    ranges.add(30, 40)
    assert ranges.snapshot() == [(0, 20), (30, 40)]
    assert ranges.prefix() == 20
    assert ranges.missing(50) == [(20, 30), (40, 50)]
    assert ranges.total() == 30


def test_work_items_cover_the_gaps_exactly() -> None:
    gaps = [(0, 100 * MIB), (150 * MIB, 151 * MIB)]
    items = work_items(gaps, connections=8)
    assert items[0][0] == 0 and items[-1][1] == 151 * MIB
    assert sum(end - start for start, end in items) == 101 * MIB
    assert all(end - start <= max(MIN_ITEM_BYTES, 100 * MIB) for start, end in items)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(items))


def test_a_body_of_another_size_is_never_finished_over_ranges(pod, origin) -> None:
    """The object grows between the probe and the GET, and the origin gives
    no ETag: the stream's 200 says the new size. Ranged connections work to
    the probed size, so the stream must not widen (a review found the old
    size's prefix of the new object published)."""
    old, new = payload(36 * MIB, seed=9), payload(42 * MIB, seed=10)
    origin.put(PATH, old, etag=None, rate_bytes_per_s=CAP)
    origin.set_fault(PATH, Fault(delay_s=0.3, methods=("GET",), times=1))

    def grow_after_probe() -> None:
        deadline = time.monotonic() + 5
        while not origin.requests(PATH, "HEAD") and time.monotonic() < deadline:
            time.sleep(0.01)
        origin.put(PATH, new, etag=None, rate_bytes_per_s=CAP)

    grower = threading.Thread(target=grow_after_probe)
    grower.start()
    run = pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_CONNECTIONS="4")).failed()
    grower.join()

    # The GET's length is not a new truth (#10 defect 7): nothing of either
    # size is published; the next start probes the new object.
    assert run.reason in ("ModelTransferSizeMismatch", "ModelSourceChanged")
    assert not pod.dest().exists()
    assert not run.has_line("ranged connections")
    assert len(origin.requests(PATH, "GET")) == 1


PAGE_CACHE_SIZE = 2 * 2 * MIN_ITEM_BYTES + 12345  # two items for each of 2 connections


def test_through_the_page_cache_a_large_file_is_split_at_once(pod, origin) -> None:
    """#16: written through the page cache (auto with room for it, here),
    a file with two work items per connection goes over ranged connections
    from the first request: the page-cache copy runs on every worker."""
    data = payload(PAGE_CACHE_SIZE, seed=12)
    origin.put(PATH, data)  # uncapped: one stream would never widen
    digest = hashlib.sha256(data).hexdigest()

    pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_CONNECTIONS="2", MODEL_SHA256=digest)).ok()

    assert pod.dest().read_bytes() == data
    gets = origin.requests(PATH, "GET")
    assert all("range" in g.headers for g in gets), "a stream first"
    spans = _ranges(gets)
    assert spans[0][0] == 0
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))
    assert spans[-1][1] == PAGE_CACHE_SIZE - 1


def test_through_the_page_cache_a_capped_origin_gets_every_connection(pod, origin) -> None:
    """The split starts with two workers per core; when they move less than
    the widening line together (each connection capped), the others start."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(allowed)[:2])  # CI's class: at most 2 cores
    try:
        first = 2 * len(os.sched_getaffinity(0))
        size = first * 2 * MIN_ITEM_BYTES + 4097
        data = payload(size, seed=14)
        origin.put(PATH, data, rate_bytes_per_s=20 * MIB)
        env = pod.single_env(origin.url + PATH, LLMKUBE_CONNECTIONS=str(first + 2))
        run = pod.stage(env).ok()
    finally:
        os.sched_setaffinity(0, allowed)

    assert pod.dest().read_bytes() == data
    assert run.has_line(f"{first} ranged connections moved")
    assert run.has_line(f"goes over {first + 2}")


def test_with_o_direct_a_large_file_starts_as_one_stream(pod, origin) -> None:
    if not probe_fs(str(pod.cache_dir.parent)).direct_io_ok:
        missing_feature("needs a local ext4/xfs/btrfs test directory for O_DIRECT")
    data = payload(PAGE_CACHE_SIZE, seed=13)
    origin.put(PATH, data)

    pod.stage(
        pod.single_env(origin.url + PATH, LLMKUBE_CONNECTIONS="2", LLMKUBE_DIRECT_IO="on")
    ).ok()

    assert pod.dest().read_bytes() == data
    first = origin.requests(PATH, "GET")[0]
    assert "range" not in first.headers, "split at once although written with O_DIRECT"


def test_progress_over_ranges_counts_bytes_as_they_arrive(pod, origin) -> None:
    """#46 item 5: a ranged connection's progress is its bytes as they come,
    not its 1 MiB buffers once written; the rate is this run's bytes only
    (not the 38 MiB a killed writer left). Run as the CLI, JSON logs."""
    data = payload(SIZE, seed=5)
    origin.put(PATH, data)
    origin.set_fault(PATH, Fault(rate_bytes_per_s=250_000, methods=("GET",)))
    dest = pod.dest()
    done_to = 38 * MIB  # one range of 2 MiB left: ~8 s at 250 KB/s
    _left_by_a_killed_parallel_transfer(dest, data, done_to)
    env = pod.single_env(
        origin.url + PATH,
        LLMKUBE_CONNECTIONS="4",
        PROGRESS_INTERVAL="0.5",
        LLMKUBE_LOG_FORMAT="json",
    )

    run = pod.run("stage", env=env)

    run.ok(files=1, fetched=1, nbytes=SIZE - done_to)
    assert dest.read_bytes() == data
    events = [json.loads(line) for line in run.stderr.splitlines()]
    progress = [e for e in events if e["event"] == "progress"]
    done = [e["bytes_done"] for e in progress]
    assert done == sorted(done) and all(done_to <= d <= SIZE for d in done), done
    # Before: 38 MiB until the first 1 MiB buffer was whole (4 s), then 39 MiB.
    assert len(set(done)) >= 6, done
    assert all(e["rate_bps"] < 1_000_000 for e in progress), progress
    (received,) = [e for e in events if e["event"] == "received"]
    assert received["bytes"] == SIZE - done_to and received["size_bytes"] == SIZE
    assert received["msg"].endswith("; the other 38.0 MiB were resumed from a partial")
