"""Lying and failing origins, through the real CLI: resets, short and long
bodies with and without a length, wrong Content-Range, changing ETags,
validators ignored, gzip on a binary, trickles, redirect loops and an
expiring signed target, 5xx storms, 429 with and without Retry-After.
Each ends with the right bytes or the right reason within its budget;
never a hang, never a wrong published file."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.harness.origin import Fault, Origin
from tests.harness.pod import Pod, Run
from tests.harness.promise import check_cache
from tests.harness.rawhttp import RawOrigin, Reply, Request, serve
from tests.harness.torture import Stats

MIB = 1 << 20
DATA = random.Random(7).randbytes(3 * MIB + 17)
OTHER = random.Random(8).randbytes(len(DATA))
PATH = "/o/model.gguf"


def _env(tmp: Path, url: str, **extra: str) -> dict[str, str]:
    return {
        "MODEL_SOURCE": url,
        "CACHE_DIR": str(tmp / "cache"),
        "MODEL_PATH": str(tmp / "cache" / "model.gguf"),
        "LLMKUBE_CONNECTIONS": "1",
        **extra,
    }


FAULTS: dict[str, tuple[Fault | list[Fault], str | None]] = {
    # name: (faults applied in turn, the reason expected; None = success)
    "reset-then-ok": (Fault(truncate_after=MIB, times=2, methods=("GET",)), None),
    "5xx-storm-then-ok": (Fault(status=503, times=2), None),
    "5xx-forever": (Fault(status=503), "ModelSourceUnavailable"),
    "429-retry-after": (Fault(status=429, retry_after="1", times=1), None),
    "429-retry-after-too-long": (Fault(status=429, retry_after="3600"), "ModelSourceRateLimited"),
    "429-bare": (Fault(status=429, times=2), None),
    "wrong-content-range": (
        [Fault(truncate_after=MIB, times=1, methods=("GET",)), Fault(wrong_content_range=True)],
        None,
    ),
    "ignore-range": (
        [Fault(truncate_after=MIB, times=1, methods=("GET",)), Fault(ignore_range=True)],
        None,
    ),
    "trickle-below-stall": (Fault(rate_bytes_per_s=2 * MIB, times=1, methods=("GET",)), None),
    "stall-resumed": (Fault(stall_after=MIB, methods=("GET",)), None),
    "stall-forever": (Fault(stall_after=0, methods=("GET",)), "ModelSourceUnreachable"),
    "redirect-loop": (Fault(redirect_to=PATH), "ModelSourceRejected"),
    "no-length-close": (Fault(no_content_length=True), "ModelTransferSizeMismatch"),
}


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_faulty_origin(name: str, pod: Pod, origin: Origin, tmp_path: Path, stats: Stats) -> None:
    faults, reason = FAULTS[name]
    origin.put(PATH, DATA, etag='"v1"')
    sequence = faults if isinstance(faults, list) else [faults]
    origin.set_fault(PATH, sequence[0])
    env = _env(tmp_path, origin.url + PATH, LLMKUBE_RETRIES="3", LLMKUBE_STALL_TIMEOUT="1")
    if len(sequence) > 1:
        pod.run(env=env, timeout=60)  # the first fault leaves a partial to resume
        origin.set_fault(PATH, sequence[1])
    ran = pod.run(env=env, timeout=90)
    _judge(ran, reason, tmp_path, stats, name)


def _judge(ran: Run, reason: str | None, tmp: Path, stats: Stats, name: str) -> None:
    assert ran.term_raw is not None, f"{name}: no termination message: {ran}"
    dest = tmp / "cache" / "model.gguf"
    stats.add(origin_cases=1)
    if reason is None:
        assert ran.returncode == 0, f"{name}: {ran}"
        broken = check_cache(tmp / "cache", {"model.gguf": DATA})
        stats.add(wrong_files=sum("WRONG FILE" in b for b in broken))
        assert broken == [], f"{name}: {broken}"
    else:
        assert ran.returncode != 0, f"{name}: {ran}"
        assert ran.term["reason"] == reason, f"{name}: {ran}"
        if dest.exists():
            stats.add(wrong_files=int(dest.read_bytes() != DATA))
            assert dest.read_bytes() == DATA, f"{name}: a wrong file was published"


Script = Callable[[Request], Reply]


def _lie(kind: str) -> Script:
    gets = [0]

    def script(request: Request) -> Reply:
        if request.method == "HEAD":
            return serve(request, DATA, '"v1"')
        gets[0] += 1
        if kind == "long-chunked":
            return Reply(200, [("ETag", '"v1"')], DATA + OTHER[: 2 * MIB], framing="chunked")
        if kind == "long-close":
            return Reply(200, [("ETag", '"v1"')], DATA + OTHER[: 2 * MIB], framing="close")
        if kind == "short-length":
            return Reply(200, [("ETag", '"v1"')], DATA[:MIB], declared=len(DATA))
        if kind == "etag-changes-on-resume":
            if gets[0] == 1:
                reply = serve(request, DATA, '"v1"')
                reply.cut_after = MIB
                return reply
            return serve(request, OTHER, '"v2"')
        if kind.startswith("gzip-on-binary"):
            import gzip

            body = gzip.compress(DATA)
            return Reply(200, [("ETag", '"v1"'), ("Content-Encoding", "gzip")], body)
        raise AssertionError(kind)

    return script


LIES = {
    "long-chunked": "ModelTransferSizeMismatch",
    "long-close": "ModelTransferSizeMismatch",
    "short-length": None,  # resumed: the rest comes from the next attempts
    "etag-changes-on-resume": "ModelSourceChanged",
    # Pinned, a Content-Encoding is no refusal (#29 item 11): the pin checks
    # every byte, and a body a hop compressed fails its size or its digest.
    "gzip-on-binary": "ModelTransferSizeMismatch",
    # Unpinned, nothing proves the bytes: an encoded body is refused (#22 item 1).
    "gzip-on-binary-unpinned": "ModelSourceRejected",
}


@pytest.mark.parametrize("kind", sorted(LIES))
def test_lying_origin(kind: str, pod: Pod, tmp_path: Path, stats: Stats) -> None:
    reason = LIES[kind]
    script = _lie(kind)
    if kind == "short-length":
        inner = script
        calls = [0]

        def script(request: Request) -> Reply:  # then honest, with ranges
            calls[0] += request.method == "GET"
            return inner(request) if calls[0] <= 1 else serve(request, DATA, '"v1"')

    with RawOrigin(script) as raw:
        pin = hashlib.sha256(DATA).hexdigest()
        pins = {} if kind.endswith("-unpinned") else {"MODEL_SHA256": pin}
        env = _env(tmp_path, raw.url + PATH, LLMKUBE_RETRIES="2", **pins)
        ran = pod.run(env=env, timeout=90)
    _judge(ran, reason, tmp_path, stats, kind)
