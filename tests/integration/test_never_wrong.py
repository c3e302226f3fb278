"""#10: never a wrong file. Each test reproduces one defect of the
issue in-process (`pod.stage`) against real loopback origins and real files; each failed
before its fix (see the commit messages).

The lying origins are `tests/harness/rawhttp.RawOrigin` (full control of
the wire) and the loopback `Origin` with faults.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
import time
from pathlib import Path

import pytest

from llmkube_stager.layout import private_partial_path, segmented_paths, validator_of
from tests.harness.disk import seed
from tests.harness.origin import Fault, Origin
from tests.harness.pod import IMPATIENT, Pod, single_env
from tests.harness.rawhttp import RawOrigin, Reply, Request, serve
from tests.harness.sample import payload

MIB = 1 << 20
PATH = "/models/model.gguf"
LM1 = "Mon, 01 Jan 2024 00:00:00 GMT"
LM2 = "Tue, 02 Jan 2024 00:00:00 GMT"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def env_for(tmp_path: Path, url: str, **extra: str) -> dict[str, str]:
    return {
        **single_env(url, tmp_path / "cache"),
        **IMPATIENT,
        "LLMKUBE_RETRIES": "3",
        **extra,
    }


def dest_of(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "model.gguf"


def markers(dest: Path) -> list[Path]:
    return sorted(dest.parent.glob(dest.name + ".*.sha256-rejected"))


# -- #10 defect 1: a response is written only at the offset it was requested for ----


@pytest.mark.parametrize("pinned", [False, True], ids=["unpinned", "pinned"])
def test_d1_partial_taken_away_between_attempts_is_not_rebuilt_at_the_wrong_offset(
    pod: Pod, tmp_path: Path, pinned: bool
) -> None:
    data = payload(4 * MIB, 1)
    dest = dest_of(tmp_path)
    with Origin() as origin:
        origin.put(PATH, data, etag='"v1"')
        origin.set_fault(PATH, Fault(truncate_after=MIB, times=1, methods=("GET",)))

        def adopted_away(_: int) -> None:
            # Another writer adopted our partial after the idle window (a
            # frozen node, a long FUSE stall): it is no longer ours.
            for part in dest.parent.glob(dest.name + ".*.llmkube-part"):
                stem = part.name.split(".llmkube-part")[0].rsplit(".", 1)[0]
                os.rename(part, part.with_name(stem + ".deadbeef.llmkube-part"))

        extra = {"MODEL_SHA256": sha(data)} if pinned else {}
        run = pod.stage(env_for(tmp_path, origin.url + PATH, **extra), on_sleep=adopted_away)
    assert run.error is None, run.stderr
    assert dest.read_bytes() == data, "a 206 body was written at another offset"
    assert markers(dest) == []


# -- #10 defect 2: never resume a partial another process holds open -----------------


def _hour_old_partial(dest: Path, data: bytes) -> Path:
    """Writer "deadbeef"'s partial of `dest` holding the first MiB of `data`
    (ETag "v1"), last written an hour ago."""
    partial = private_partial_path(str(dest), validator_of(len(data), '"v1"'), "deadbeef")
    return seed(Path(partial), data[:MIB], age_s=3600)


def test_d2_a_partial_whose_writer_holds_it_is_not_adopted(pod: Pod, tmp_path: Path) -> None:
    """Off FUSE the directory lock was taken as proof that nobody else
    writes; a live writer that flock does not reach (another node of an
    NFS with local locks) lost its partial at once. A writer holds an flock
    on its own partial: on the same node (or where flock works) that is
    proof of life."""
    data = payload(2 * MIB, 2)
    dest = dest_of(tmp_path)
    live = _hour_old_partial(dest, data)
    holder = os.open(live, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        with Origin() as origin:
            origin.put(PATH, data, etag='"v1"')
            run = pod.stage(env_for(tmp_path, origin.url + PATH))
            gets = origin.requests(PATH, "GET")
    finally:
        os.close(holder)
    assert run.error is None, run.stderr
    assert live.exists(), "the live writer's partial was taken"
    assert all("range" not in g.headers for g in gets), "it resumed a live writer's partial"
    assert dest.read_bytes() == data


def test_d2_an_adopted_partial_is_never_truncated_under_its_writer(
    pod: Pod, tmp_path: Path
) -> None:
    """When liveness cannot be seen (flock does not exclude), two writers
    may share a partial: the adopter must never cut bytes the other wrote."""
    data = payload(8 * MIB, 3)
    dest = dest_of(tmp_path)
    path = _hour_old_partial(dest, data)
    old = path.stat().st_mtime
    shrunk: list[tuple[int, int]] = []
    stop = threading.Event()

    def live_writer() -> None:
        # A writer on a node whose flock we cannot see: it keeps appending
        # the right bytes through its own descriptor and its heartbeat is old.
        fd = os.open(path, os.O_WRONLY)
        position = MIB
        try:
            while not stop.is_set() and position < len(data):
                size = os.fstat(fd).st_size
                if size < position:
                    shrunk.append((size, position))
                n = os.pwrite(fd, data[position : position + 4096], position)
                position += n
                os.utime(fd, (old, old))
                time.sleep(0.0005)
        finally:
            os.close(fd)

    writer = threading.Thread(target=live_writer)
    with Origin() as origin:
        origin.put(PATH, data, etag='"v1"')
        origin.set_fault(PATH, Fault(rate_bytes_per_s=4 * MIB, methods=("GET",)))
        writer.start()
        try:
            run = pod.stage(env_for(tmp_path, origin.url + PATH))
        finally:
            stop.set()
            writer.join()
    assert shrunk == [], f"the partial was truncated under its writer: {shrunk[:3]}"
    assert run.error is None, run.stderr
    assert dest.read_bytes() == data


# -- #10 defect 3: a stamp vouches only for bytes it hashed --------------------------


def test_d3_warm_stamp_is_not_written_for_a_file_replaced_after_hashing(
    pod: Pod, tmp_path: Path
) -> None:
    good, other = payload(MIB, 4), payload(MIB, 5)
    dest = dest_of(tmp_path)
    dest.parent.mkdir(parents=True)
    dest.write_bytes(good)
    Path(str(dest) + ".llmkube-size").write_text(str(len(good)))
    swapped = []

    def replace_after_hashing(text: str) -> None:
        # Another writer publishes other bytes of the same size right after
        # this run hashed the file and before it stamps it.
        if ("cache_hit" in text or "already cached" in text) and not swapped:
            decoy = dest.with_name("decoy")
            decoy.write_bytes(other)
            later = time.time() + 5
            os.utime(decoy, (later, later))
            os.rename(decoy, dest)
            swapped.append(True)

    with Origin() as origin:
        origin.put(PATH, good, etag='"v1"')
        env = env_for(tmp_path, origin.url + PATH, MODEL_SHA256=sha(good))
        run = pod.stage(env, on_line=replace_after_hashing)
        assert run.error is None, run.stderr
        assert swapped
        # The next start must not accept the other bytes on the stamp's word.
        run = pod.stage(env)
    assert run.error is None, run.stderr
    assert dest.read_bytes() == good, "a stamp vouched for bytes it never hashed"


# -- #10 defects 4 and 5: validators of the partial, checked on every response -------


def test_d4_without_an_etag_a_changed_upstream_is_not_spliced(pod: Pod, tmp_path: Path) -> None:
    v1, v2 = payload(4 * MIB, 6), payload(4 * MIB, 7)
    current = {"data": v1, "lm": LM1, "cut": True}

    def script(request: Request) -> Reply:
        if request.method == "GET" and "range" in request.headers:
            if_range = request.headers.get("if-range")
            if if_range is not None and if_range != current["lm"]:
                request = Request(request.method, request.path, {})
        reply = serve(request, current["data"], None, current["lm"])  # type: ignore[arg-type]
        if request.method == "GET" and current["cut"]:
            current["cut"] = False
            reply.cut_after = MIB
        return reply

    with RawOrigin(script) as origin:
        run = pod.stage(env_for(tmp_path, origin.url + PATH, LLMKUBE_RETRIES="0"))
        assert run.error is not None, "the first run was cut on purpose"
        current.update(data=v2, lm=LM2)
        run = pod.stage(env_for(tmp_path, origin.url + PATH))
    assert run.error is None, run.stderr
    assert dest_of(tmp_path).read_bytes() == v2, "old and new bytes were spliced"


def test_d5_a_range_answered_with_another_etag_is_not_spliced(pod: Pod, tmp_path: Path) -> None:
    """An origin that ignores If-Range/If-Match answers the resume with the
    new object's bytes and ETag: nothing compared it with the probed one."""
    v1, v2 = payload(4 * MIB, 8), payload(4 * MIB, 9)
    state = {"gets": 0}

    def script(request: Request) -> Reply:
        if request.method == "HEAD":
            return serve(request, v1, '"v1"')
        state["gets"] += 1
        if state["gets"] == 1:
            reply = serve(request, v1, '"v1"')
            reply.cut_after = MIB
            return reply
        return serve(
            Request("GET", request.path, {"range": request.headers.get("range", "")}), v2, '"v2"'
        )

    with RawOrigin(script) as origin:
        run = pod.stage(env_for(tmp_path, origin.url + PATH))
    dest = dest_of(tmp_path)
    if run.error is None:
        assert dest.read_bytes() in (v1, v2), "old and new bytes were spliced"
    else:
        assert run.error.reason.value == "ModelSourceChanged", run.stderr
        assert not dest.exists()


# -- #10 defects 6, 7, 8: sizes -----------------------------------------------------------


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_d6_a_body_longer_than_promised_is_not_written_without_limit(
    pod: Pod, tmp_path: Path, framing: str
) -> None:
    data = payload(MIB, 10)
    extra = 96 * MIB

    def script(request: Request) -> Reply:
        if request.method == "HEAD":
            return serve(request, data, '"v1"')
        return Reply(200, [("ETag", '"v1"')], data + bytes(extra), framing=framing)  # type: ignore[arg-type]

    with RawOrigin(script) as origin:
        run = pod.stage(env_for(tmp_path, origin.url + PATH))
        sent = sum(s.body_bytes for s in origin.requests("GET"))
    assert run.error is not None and run.error.reason.value == "ModelTransferSizeMismatch", (
        run.stderr
    )
    assert sent < len(data) + 32 * MIB, f"read {sent} bytes of a body promised at {len(data)}"
    assert not dest_of(tmp_path).exists()


def test_d7_a_get_length_other_than_the_probed_size_is_a_size_mismatch(
    pod: Pod, tmp_path: Path
) -> None:
    listed, served = b"x" * 19, b"y" * 28

    def script(request: Request) -> Reply:
        if request.method == "HEAD":
            return serve(request, listed, '"v1"')
        return serve(request, served, '"v1"')

    with RawOrigin(script) as origin:
        run = pod.stage(env_for(tmp_path, origin.url + PATH))
    assert run.error is not None and run.error.reason.value == "ModelTransferSizeMismatch", (
        run.stderr
    )
    assert not dest_of(tmp_path).exists()


def test_d8_a_cut_close_delimited_body_of_unknown_length_is_not_published(
    pod: Pod,
    tmp_path: Path,
) -> None:
    data = payload(2 * MIB, 11)

    def script(request: Request) -> Reply:
        if request.method == "HEAD":
            return Reply(200, [("ETag", '"v1"')], b"", framing="close")
        return Reply(200, [("ETag", '"v1"')], data, framing="close", cut_after=MIB)

    with RawOrigin(script) as origin:
        run = pod.stage(env_for(tmp_path, origin.url + PATH))
    assert run.error is not None, "a file of unprovable length was published as complete"
    assert not dest_of(tmp_path).exists()


@pytest.mark.parametrize("framing", ["chunked", "pinned-close"])
def test_d8_unknown_length_is_published_when_completeness_is_proven(
    pod: Pod, tmp_path: Path, framing: str
) -> None:
    data = payload(2 * MIB, 12)

    def script(request: Request) -> Reply:
        if request.method == "HEAD":
            return Reply(200, [("ETag", '"v1"')], b"", framing="close")
        mode = "chunked" if framing == "chunked" else "close"
        return Reply(200, [("ETag", '"v1"')], data, framing=mode)  # type: ignore[arg-type]

    extra = {"MODEL_SHA256": sha(data)} if framing == "pinned-close" else {}
    with RawOrigin(script) as origin:
        run = pod.stage(env_for(tmp_path, origin.url + PATH, **extra))
    assert run.error is None, run.stderr
    assert dest_of(tmp_path).read_bytes() == data


# -- #10 defect 9: an expired signed redirect target --------------------------------------


def test_d9_an_expired_redirect_target_goes_back_to_the_original_url(
    pod: Pod, tmp_path: Path
) -> None:
    data = payload(MIB, 13)
    with Origin() as origin:
        origin.put("/signed/model.gguf", data, etag='"v1"')
        origin.set_fault(PATH, Fault(redirect_to="/signed/model.gguf?sig=abc&expires=1"))
        # The signature expired between the probe and the GET.
        origin.set_fault("/signed/model.gguf", Fault(status=403, times=1, methods=("GET",)))
        run = pod.stage(env_for(tmp_path, origin.url + PATH, LLMKUBE_RETRIES="1"))
        first_hops = origin.requests(PATH)
    assert run.error is None, run.stderr
    assert dest_of(tmp_path).read_bytes() == data
    assert len(first_hops) >= 2, "it never went back to the original URL"


# -- #10 defect 10: the parallel engine heartbeats while it waits ------------------------


def test_d10_parallel_transfer_heartbeats_its_partial_during_retry_after(
    pod: Pod,
    tmp_path: Path,
) -> None:
    size = 40 * MIB
    data = payload(size, 14)
    dest = dest_of(tmp_path)
    dest.parent.mkdir(parents=True)
    validator = validator_of(size, '"v1"')
    seg, journal = (Path(p) for p in segmented_paths(str(dest), validator, "deadbeef"))
    with open(seg, "wb") as handle:
        handle.write(data[: 16 * MIB])
        handle.truncate(size)
    journal.write_text(json.dumps({"validator": validator, "size": size, "done": [[0, 16 * MIB]]}))
    old = time.time() - 3600
    for path in (seg, journal):
        os.utime(path, (old, old))
    beats: list[bool] = []

    def backoff(n: int) -> None:
        # Both workers wait (Retry-After); nothing writes the data file.
        if n > 2:
            return
        (data_file,) = dest.parent.glob("*.llmkube-segs*")
        before = data_file.stat().st_mtime
        time.sleep(6.5)  # longer than a heartbeat (partials.HEARTBEAT_S)
        if n == 1:
            beats.append(data_file.stat().st_mtime > before)

    with Origin() as origin:
        origin.put(PATH, data, etag='"v1"')
        origin.set_fault(PATH, Fault(status=429, retry_after="1", times=2, methods=("GET",)))
        run = pod.stage(
            env_for(tmp_path, origin.url + PATH, LLMKUBE_CONNECTIONS="2"), on_sleep=backoff
        )
    assert run.error is None, run.stderr
    assert beats == [True], "a live parallel writer looked idle while it waited"
    assert dest.read_bytes() == data
