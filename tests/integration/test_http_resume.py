"""Resumable HTTP transfers (spec §4.2, §5.2, §10; scenarios 80-87).

Partials are seeded under the shell scripts' name `<dest>.<key>.tmp` (the
on-disk contract, CONTRACT §4), with an old mtime as a dead writer leaves
them. The origin's log shows whether a Range / If-Range went out and how many
body bytes were sent.
"""

from __future__ import annotations

import threading
import time

from tests.harness.disk import cached_files, partials, record_of, seed, shell_partial
from tests.harness.origin import Fault
from tests.harness.sample import payload

PATH = "/files/model.gguf"
REPO = "/org/repo/resolve/main"
KIB = 1024
SIZE = 512 * KIB
HALF = SIZE // 2


def _gets(origin, path: str = PATH):  # type: ignore[no-untyped-def]
    return origin.requests(path, "GET")


def test_s81_matching_partial_resumes_with_range_and_if_range(origin, pod) -> None:
    data = payload(SIZE)
    origin.put(PATH, data, etag='"vA"')
    dest = pod.dest()
    seed(shell_partial(dest, SIZE, '"vA"'), data[:HALF], age_s=3600)

    pod.stage(pod.single_env(origin.url + PATH)).ok()

    (get,) = _gets(origin)
    assert get.headers.get("range") == f"bytes={HALF}-"
    assert get.headers.get("if-range") == '"vA"'
    assert get.status == 206
    assert sum(r.body_bytes for r in _gets(origin)) == SIZE - HALF  # only the second half
    assert dest.read_bytes() == data
    assert record_of(dest) == str(SIZE)
    assert partials(dest) == {}


def test_s80_changed_upstream_never_splices(origin, pod) -> None:
    old, new = payload(SIZE, seed=1), payload(SIZE, seed=2)
    dest = pod.dest()
    old_partial = seed(shell_partial(dest, SIZE, '"vA"'), old[:HALF], age_s=3600)
    origin.put(PATH, new, etag='"vB"')  # same size, different content

    pod.stage(pod.single_env(origin.url + PATH)).ok()

    assert dest.read_bytes() == new
    assert not old_partial.exists()
    (get,) = _gets(origin)
    assert "range" not in get.headers
    assert get.body_bytes == SIZE
    assert partials(dest) == {}


def test_s80_upstream_changing_between_probe_and_get_is_not_spliced(origin, pod) -> None:
    """The HEAD still sees version A, the GET meets version B: If-Range makes the
    origin answer 200 with all of B, and the partial of A must not survive in it."""
    old, new = payload(SIZE, seed=1), payload(SIZE, seed=2)
    dest = pod.dest()
    seed(shell_partial(dest, SIZE, '"vA"'), old[:HALF], age_s=3600)
    origin.put(PATH, old, etag='"vA"')
    origin.set_fault(PATH, Fault(delay_s=0.5, methods=("GET",), times=1))

    def swap_after_probe() -> None:
        deadline = time.monotonic() + 5
        while not origin.requests(PATH, "HEAD") and time.monotonic() < deadline:
            time.sleep(0.01)
        origin.put(PATH, new, etag='"vB"')

    swapper = threading.Thread(target=swap_after_probe)
    swapper.start()
    try:
        pod.stage(pod.single_env(origin.url + PATH)).ok()
    finally:
        swapper.join()

    first = _gets(origin)[0]
    assert first.headers.get("if-range") == '"vA"'
    assert first.status == 200  # the origin refused to splice
    assert dest.read_bytes() == new
    assert partials(dest) == {}


def test_s82_complete_partial_publishes_without_a_body(origin, pod) -> None:
    data = payload(SIZE)
    origin.put(PATH, data, etag='"vA"')
    dest = pod.dest()
    seed(shell_partial(dest, SIZE, '"vA"'), data, age_s=3600)

    run = pod.stage(pod.single_env(origin.url + PATH)).ok()

    (get,) = _gets(origin)
    assert get.headers.get("range") == f"bytes={SIZE}-"
    assert (get.status, get.body_bytes) == (416, 0)
    assert dest.read_bytes() == data
    assert record_of(dest) == str(SIZE)
    assert partials(dest) == {}
    assert run.has_line("Model downloaded successfully")


def test_s84_origin_without_accept_ranges_drops_the_partial(origin, pod) -> None:
    data = payload(SIZE)
    origin.put(PATH, data, etag='"vA"')
    origin.set_fault(PATH, Fault(ignore_range=True))  # HEAD and GET: no Accept-Ranges
    dest = pod.dest()
    seed(shell_partial(dest, SIZE, '"vA"'), data[:HALF], age_s=3600)

    pod.stage(pod.single_env(origin.url + PATH)).ok()

    (get,) = _gets(origin)
    assert "range" not in get.headers and "if-range" not in get.headers
    assert get.body_bytes == SIZE
    assert dest.read_bytes() == data
    assert partials(dest) == {}


def test_s84_200_to_a_range_request_restarts_from_zero(origin, pod) -> None:
    """HEAD advertises Accept-Ranges but the GET ignores Range (pip's rule: a 200
    to a Range request is the whole body). The seeded prefix is deliberately
    wrong so that any byte kept from it shows in the result."""
    data = payload(SIZE)
    origin.put(PATH, data, etag='"vA"')
    origin.set_fault(PATH, Fault(ignore_range=True, methods=("GET",)))
    dest = pod.dest()
    seed(shell_partial(dest, SIZE, '"vA"'), b"\0" * HALF, age_s=3600)

    pod.stage(pod.single_env(origin.url + PATH)).ok()

    gets = _gets(origin)
    assert gets[0].headers.get("range") == f"bytes={HALF}-"
    assert gets[0].status == 200
    assert dest.read_bytes() == data
    assert record_of(dest) == str(SIZE)
    assert partials(dest) == {}


def test_s85_without_an_etag_a_partial_keyed_on_the_length_alone_is_not_resumed(
    origin, pod
) -> None:
    """The shell keyed an ETag-less partial on `CL<n>ET` alone: any object
    of that length matches, so resuming it may splice two versions (#10
    defect 4). Without an ETag the partial's key holds the Last-Modified the
    resume is conditioned on; the old one is never resumed."""
    data = payload(SIZE)
    origin.put(PATH, data, etag=None)
    dest = pod.dest()
    partial = shell_partial(dest, SIZE, None)  # validator `CL<n>ET`
    seed(partial, payload(HALF, seed=99), age_s=3600)

    pod.stage(pod.single_env(origin.url + PATH)).ok()

    (first,) = _gets(origin)
    assert "range" not in first.headers
    assert dest.read_bytes() == data
    assert record_of(dest) == str(SIZE)
    assert not partial.exists()


def test_s86_stale_partials_of_this_file_are_swept(origin, pod) -> None:
    data = payload(SIZE)
    origin.put(PATH, data, etag='"vA"')
    dest = pod.dest()
    stale = seed(shell_partial(dest, SIZE, '"old"'), b"x" * 1000, age_s=3600)
    unrelated = seed(dest.with_name(dest.name + ".deadbeefcafe.tmp"), b"y" * 1000, age_s=3600)

    pod.stage(pod.single_env(origin.url + PATH)).ok()

    assert dest.read_bytes() == data
    assert not stale.exists()
    assert not unrelated.exists()
    assert "range" not in _gets(origin)[0].headers


def test_s86_legacy_dest_tmp_is_swept_when_the_file_is_staged(origin, pod) -> None:
    """The L0 scripts' `<dest>.tmp` is swept by the keep-one sweep of the file
    being staged (spec §4.2, §10). Regression: once missed by both the
    per-file stale-partial removal and the debris sweep."""
    data = payload(SIZE)
    origin.put(PATH, data, etag='"vA"')
    dest = pod.dest()
    legacy = seed(dest.with_name(dest.name + ".tmp"), b"z" * 1000, age_s=3600)

    pod.stage(pod.single_env(origin.url + PATH)).ok()

    assert dest.read_bytes() == data
    assert not legacy.exists()
    assert partials(dest) == {}


def test_s10_sweep_never_touches_another_manifest_files_partial(origin, pod) -> None:
    """Spec §10 hazard: the per-file keep-one sweep of file 1 must not delete
    file 2's partial in the same directory; file 2 then resumes from it. A
    repository file whose name ends in `.tmp` is a file like any other."""
    first, second, notes = (
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "extra/notes.tmp",
    )
    blobs = {
        first: payload(SIZE, seed=1),
        second: payload(SIZE, seed=2),
        notes: b"n" * 100,
    }
    for rel, data in blobs.items():
        origin.put(f"{REPO}/{rel}", data, etag=f'"{rel[:12]}"')
    stale_first = seed(shell_partial(pod.dest(first), SIZE, '"old"'), b"x" * 10, age_s=3600)
    second_partial = shell_partial(pod.dest(second), SIZE, f'"{second[:12]}"')
    seed(second_partial, blobs[second][:HALF], age_s=3600)

    pod.stage(pod.multi_env(origin.url + REPO + "/", [first, second, notes])).ok()

    assert not stale_first.exists()
    (get_second,) = origin.requests(f"{REPO}/{second}", "GET")
    assert get_second.headers.get("range") == f"bytes={HALF}-"
    assert get_second.body_bytes == SIZE - HALF
    for rel, data in blobs.items():
        assert pod.dest(rel).read_bytes() == data, rel
        assert record_of(pod.dest(rel)) == str(len(data)), rel
    records = {f + ".llmkube-size" for f in blobs} | {".llmkube-validators"}  # #46 item 1
    assert cached_files(pod.cache_dir) == set(blobs) | records


def test_s86_failed_probe_never_resumes_blindly(origin, pod) -> None:
    """HEAD refused (405): no size, no validator, so no partial may be resumed,
    neither the one keyed on the real validator nor the `CLET` fixed key."""
    data = payload(SIZE)
    origin.put(PATH, data, etag='"vA"')
    origin.set_fault(PATH, Fault(status=405, methods=("HEAD",)))
    dest = pod.dest()
    seed(shell_partial(dest, SIZE, '"vA"'), b"\0" * HALF, age_s=3600)
    seed(shell_partial(dest, None, None), b"\1" * HALF, age_s=3600)

    pod.stage(pod.single_env(origin.url + PATH)).ok()

    (get,) = _gets(origin)
    assert "range" not in get.headers
    assert get.body_bytes == SIZE
    assert dest.read_bytes() == data
    assert record_of(dest) == str(SIZE)
    assert partials(dest) == {}


def test_s87_stale_partial_in_a_subdirectory_is_removed(origin, pod) -> None:
    files = ["model.gguf", "sub/tokenizer.json"]
    blobs = {rel: payload(64 * KIB, seed=i) for i, rel in enumerate(files)}
    for rel, data in blobs.items():
        origin.put(f"{REPO}/{rel}", data)
    orphan = seed(pod.cache_dir / "sub" / "tokenizer.json.deadbeefcafe.tmp", b"o" * 10, age_s=3600)

    pod.stage(pod.multi_env(origin.url + REPO + "/", files)).ok()

    assert not orphan.exists()
    records = {f + ".llmkube-size" for f in files} | {".llmkube-validators"}  # #46 item 1
    assert cached_files(pod.cache_dir) == set(files) | records


def test_s87_failed_loop_keeps_the_partials_of_later_files(origin, pod) -> None:
    files = ["a.gguf", "missing.gguf", "c.gguf"]
    a, c = payload(64 * KIB, seed=1), payload(SIZE, seed=3)
    origin.put(f"{REPO}/a.gguf", a)
    origin.put(f"{REPO}/c.gguf", c, etag='"vC"')
    c_partial = seed(shell_partial(pod.dest("c.gguf"), SIZE, '"vC"'), c[:HALF], age_s=3600)

    # One file at a time: the scripts' loop (files in flight would fetch
    # c.gguf beside missing.gguf: tests/integration/test_many_files.py).
    env = pod.multi_env(origin.url + REPO + "/", files, LLMKUBE_FILES_IN_FLIGHT="1")
    run = pod.stage(env).failed()

    assert run.reason == "ModelSourceNotFound"
    assert run.error is not None and run.error.file == "missing.gguf"
    assert pod.dest("a.gguf").read_bytes() == a  # staged before the failure
    assert c_partial.read_bytes() == c[:HALF]  # kept for the next attempt
    assert not pod.dest("c.gguf").exists()


def test_wrong_content_range_restarts_from_zero(origin, pod) -> None:
    data = payload(SIZE)
    origin.put(PATH, data, etag='"vA"')
    origin.set_fault(PATH, Fault(wrong_content_range=True))
    dest = pod.dest()
    seed(shell_partial(dest, SIZE, '"vA"'), data[:HALF], age_s=3600)

    pod.stage(pod.single_env(origin.url + PATH)).ok()

    gets = _gets(origin)
    assert gets[0].headers.get("range") == f"bytes={HALF}-"
    assert len(gets) == 2
    assert "range" not in gets[1].headers
    assert (gets[1].status, gets[1].body_bytes) == (200, SIZE)
    assert dest.read_bytes() == data
    assert partials(dest) == {}


def test_truncated_body_resumes_from_the_received_offset(origin, pod) -> None:
    cut = 100_000
    data = payload(SIZE)
    origin.put(PATH, data, etag='"vA"')
    origin.set_fault(PATH, Fault(truncate_after=cut, times=1, methods=("GET",)))

    run = pod.stage(pod.single_env(origin.url + PATH)).ok()

    first, second = _gets(origin)
    assert "range" not in first.headers and first.body_bytes == cut
    assert second.headers.get("range") == f"bytes={cut}-"
    assert second.headers.get("if-range") == '"vA"'
    assert (second.status, second.body_bytes) == (206, SIZE - cut)
    assert pod.dest().read_bytes() == data
    assert len(run.sleeps) == 1


def test_always_truncating_origin_fails_and_keeps_the_partial_for_later(origin, pod) -> None:
    cut = 64 * KIB
    data = payload(SIZE)
    origin.put(PATH, data, etag='"vA"')
    origin.set_fault(PATH, Fault(truncate_after=cut, methods=("GET",)))
    env = pod.single_env(origin.url + PATH, LLMKUBE_RETRIES="2")
    dest = pod.dest()

    run = pod.stage(env).failed()

    assert run.reason == "ModelSourceUnreachable"
    assert len(_gets(origin)) == 3  # the first attempt + LLMKUBE_RETRIES
    assert len(run.sleeps) == 2
    assert not dest.exists()
    assert record_of(dest) is None
    received = sum(r.body_bytes for r in _gets(origin))
    assert list(partials(dest).values()) == [received]  # kept, complete so far

    # A later start (after the writer is long gone) resumes from that partial.
    for name in partials(dest):
        seed(dest.parent / name, (dest.parent / name).read_bytes(), age_s=3600)
    origin.set_fault(PATH, None)
    origin.clear_log()

    pod.stage(env).ok()

    (get,) = _gets(origin)
    assert get.headers.get("range") == f"bytes={received}-"
    assert get.body_bytes == SIZE - received
    assert dest.read_bytes() == data
    assert partials(dest) == {}


def test_stalled_body_is_abandoned_after_the_stall_timeout_and_resumed(
    origin, pod, watchdog
) -> None:
    size, stall_at = 4 * 1024 * KIB, 2560 * KIB + 123
    data = payload(size)
    origin.put(PATH, data, etag='"vA"')
    origin.set_fault(PATH, Fault(stall_after=stall_at, times=1, methods=("GET",)))
    watchdog(10, origin.close)  # without a stall timeout the stager would wait forever

    run = pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_STALL_TIMEOUT="0.5")).ok()

    first, second = _gets(origin)
    assert first.body_bytes == stall_at
    resumed_from = int(second.headers.get("range", "bytes=0-")[len("bytes=") : -1])
    assert 0 < resumed_from <= stall_at  # a resume, not a restart
    assert second.headers.get("if-range") == '"vA"'
    assert (second.status, second.body_bytes) == (206, size - resumed_from)
    assert pod.dest().read_bytes() == data
    assert len(run.sleeps) == 1
    assert run.seconds < 10  # the stall timeout ended the attempt, not the origin


def test_stall_keeps_the_bytes_received_before_it(origin, pod, watchdog) -> None:
    """Regression: a buffered 1 MiB `readinto` that timed out discarded what it
    had already read, so a file under 1 MiB restarted from zero after a stall."""
    stall_at = 128 * KIB
    data = payload(SIZE)
    origin.put(PATH, data, etag='"vA"')
    origin.set_fault(PATH, Fault(stall_after=stall_at, times=1, methods=("GET",)))
    watchdog(10, origin.close)

    pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_STALL_TIMEOUT="0.5")).ok()

    first, second = _gets(origin)
    assert first.body_bytes == stall_at
    assert second.headers.get("range") == f"bytes={stall_at}-"
    assert second.body_bytes == SIZE - stall_at
    assert pod.dest().read_bytes() == data


def test_stats_count_every_byte_received_when_a_resume_restarts(origin, pod) -> None:
    """Regression: a 200 answering a Range request was counted as SIZE - offset
    (the offset was reset before the bytes were measured)."""
    data = payload(SIZE)
    origin.put(PATH, data, etag='"vA"')
    origin.set_fault(PATH, Fault(ignore_range=True, methods=("GET",)))
    seed(shell_partial(pod.dest(), SIZE, '"vA"'), data[:HALF], age_s=3600)

    run = pod.stage(pod.single_env(origin.url + PATH)).ok()

    received = sum(r.body_bytes for r in _gets(origin))
    assert received == SIZE
    assert run.outcome is not None
    assert run.outcome.bytes_fetched == received


def test_etag_change_between_attempts_is_never_spliced_and_the_next_start_gets_it(
    origin, pod
) -> None:
    """The first GET is cut short; before the retry the upstream moves to B.
    The retry's If-Range no longer matches and the origin sends all of B, of
    another size and ETag than the probe said: not a new truth (#10 defect
    7) but another version, so this run stops (ModelSourceChanged,
    retryable) and the next one, probing B, publishes B whole."""
    old, new = payload(SIZE, seed=1), payload(SIZE + 1000, seed=2)
    origin.put(PATH, old, etag='"vA"')
    origin.set_fault(PATH, Fault(truncate_after=100_000, times=1, methods=("GET",)))

    def upstream_moves(n: int) -> None:
        if n == 1:
            origin.put(PATH, new, etag='"vB"')

    run = pod.stage(pod.single_env(origin.url + PATH), on_sleep=upstream_moves).failed()
    assert run.reason == "ModelSourceChanged"
    first, second = _gets(origin)
    assert first.body_bytes == 100_000
    assert second.headers.get("range") == "bytes=100000-"
    assert second.headers.get("if-range") == '"vA"'
    assert not pod.dest().exists()

    pod.stage(pod.single_env(origin.url + PATH)).ok()
    assert pod.dest().read_bytes() == new
    assert record_of(pod.dest()) == str(len(new))
    assert partials(pod.dest()) == {}


def test_origin_that_always_cuts_a_from_zero_transfer_ends(origin, pod) -> None:
    """No range support and every response cut after 1 MiB: each attempt starts
    from zero again, so no attempt makes progress past the last one. The
    retries must end (LLMKUBE_RETRIES), not loop forever on re-sent bytes.
    Regression: the budget was refunded for every 1 MiB RECEIVED, not for new
    ground, and this looped forever."""
    data = payload(2 * 1024 * KIB)
    origin.put(PATH, data, etag='"vA"')
    origin.set_fault(PATH, Fault(ignore_range=True, truncate_after=1024 * KIB + 1))

    run = pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_RETRIES="2"), max_sleeps=10).failed()

    assert run.reason == "ModelSourceUnreachable"
    assert len(_gets(origin)) == 3
    assert not pod.dest().exists()
