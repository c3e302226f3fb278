"""#29 item 8: numbers without end.

A `Retry-After`, `RateLimit` or `X-RateLimit-Reset` of hundreds or
thousands of digits, or a Content-Length or Content-Range of 5,000: Python's
int() refuses a string of more than 4,300 digits (ValueError), float() of
an int of more than 308 digits overflows, and both ended in
ModelStagerInternalError (exit 3, "a bug") on plain HTTP and on the hub
API. Every number from the wire is parsed with a bound (at most 18 digits,
below 2**63 as curl's curl_off_t): a longer one is a bad answer,
ModelSourceRejected (exit 4: the same origin answers the same way), whose
message names the header and how many digits it had, never the value.

Origins: the loopback origin with faults, the raw-socket origin, and the
fake hub through the real huggingface_hub client.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.harness.canary import HF_TOKEN
from tests.harness.disk import partials, record_of, seed, shell_partial
from tests.harness.hub import FakeHub, HubFault
from tests.harness.origin import Fault, Origin
from tests.harness.pod import Pod, Run
from tests.harness.rawhttp import RawOrigin, Reply, Request, serve
from tests.harness.sample import payload

PATH = "/files/model.gguf"
KIB = 1024
SIZE = 64 * KIB
ETAG = '"v1"'
REPO = "org/repo"


def digits(n: int) -> str:
    return "9" * n


def rate_headers(form: str, n: int) -> tuple[tuple[str, str], ...]:
    value = digits(n)
    return {
        "retry-after": (("Retry-After", value),),
        "ietf-structured": (("RateLimit", f'"default";r=0;t={value}'),),
        "policy-window": (
            ("RateLimit", '"default";r=0'),
            ("RateLimit-Policy", f'"default";q=100;w={value}'),
        ),
        "draft-dictionary": (("RateLimit", f"limit=100, remaining=0, reset={value}"),),
        "x-ratelimit-reset": (("X-RateLimit-Reset", value),),
        "ratelimit-reset": (("RateLimit-Reset", value),),
    }[form]


FORMS = [
    "retry-after",
    "ietf-structured",
    "policy-window",
    "draft-dictionary",
    "x-ratelimit-reset",
    "ratelimit-reset",
]
LENGTHS = [400, 5000]  # float() overflows; int() refuses


def _bad_answer(run: Run, header: str) -> None:
    """ModelSourceRejected naming the header, not retried, the number never
    shown whole (a 5,000-digit message would be cut by Kubernetes anyway)."""
    assert run.returncode == 4, run
    message = run.term["message"]
    assert header in message, message
    assert "digits" in message, message
    assert digits(60) not in message, message
    assert run.sleeps == []


def _nothing_published(pod: Pod) -> None:
    dest = pod.dest()
    assert not dest.exists() and record_of(dest) is None
    assert set(partials(dest).values()) <= {0}, partials(dest)


# -- plain HTTP: rate-limit and server-error waits -----------------------------------------


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("methods", [("GET", "HEAD"), ("GET",)], ids=["probe", "get"])
def test_a_rate_limit_window_without_end_is_a_bad_answer(
    origin: Origin, pod: Pod, form: str, n: int, methods: tuple[str, ...]
) -> None:
    """Before: exit 3 (OverflowError in float(), or int()'s ValueError)."""
    origin.put(PATH, payload(SIZE))
    headers = rate_headers(form, n)
    origin.set_fault(PATH, Fault(status=429, headers=headers, methods=methods))

    run = pod.stage(pod.single_env(origin.url + PATH)).failed(
        "ModelSourceRejected", retryable=False
    )

    _bad_answer(run, headers[-1][0])
    assert [r.status for r in origin.requests()].count(429) == 1
    _nothing_published(pod)


@pytest.mark.parametrize("n", LENGTHS)
def test_a_server_error_retry_after_without_end_is_a_bad_answer(
    origin: Origin, pod: Pod, n: int
) -> None:
    origin.put(PATH, payload(SIZE))
    origin.set_fault(PATH, Fault(status=503, retry_after=digits(n)))

    run = pod.stage(pod.single_env(origin.url + PATH)).failed("ModelSourceRejected")

    _bad_answer(run, "Retry-After")
    _nothing_published(pod)


def test_a_window_of_15_digits_is_still_a_window(origin: Origin, pod: Pod) -> None:
    """The bound is on absurd numbers, not on long waits: 18 digits is a
    (very long) rate-limit window, reported as one (15: a float holds it exactly)."""
    origin.put(PATH, payload(SIZE))
    origin.set_fault(PATH, Fault(status=429, retry_after=digits(15)))

    run = pod.stage(pod.single_env(origin.url + PATH)).failed("ModelSourceRateLimited")

    assert run.term["retryAfterSeconds"] == 10**15 - 1
    assert run.sleeps == []


# -- plain HTTP: sizes ---------------------------------------------------------------------


def _length_script(data: bytes, where: str, n: int):
    """An origin whose HEAD or GET says Content-Length: <n digits>."""

    def script(request: Request) -> Reply:
        reply = serve(request, data, ETAG)
        if request.method == where or (where == "both"):
            headers = [*reply.headers, ("Content-Length", digits(n))]
            return Reply(reply.status, headers, reply.body, framing="close")
        return reply

    return script


@pytest.mark.parametrize("n", [400, 5000])
@pytest.mark.parametrize("where", ["HEAD", "GET", "both"])
def test_a_content_length_without_end_is_a_bad_answer(pod: Pod, where: str, n: int) -> None:
    """Before: exit 3 at 5,000 digits (int() in the HEAD's or the GET's
    size); at 400, a size of 400 digits went on into the transfer."""
    data = payload(SIZE, 3)
    with RawOrigin(_length_script(data, where, n)) as origin:
        run = pod.stage(pod.single_env(origin.url + PATH)).failed(
            "ModelSourceRejected", retryable=False
        )
        if where != "GET":
            assert origin.requests("GET") == []  # refused on the HEAD
    _bad_answer(run, "Content-Length")
    _nothing_published(pod)


@pytest.mark.parametrize("field", ["start", "total"])
def test_a_content_range_without_end_is_a_bad_answer(pod: Pod, field: str) -> None:
    """A resume's 206 whose Content-Range has a number of 5,000 digits.
    Before: exit 3 (int() in parse_content_range)."""
    data = payload(SIZE, 4)
    half = SIZE // 2
    dest = pod.dest()
    seed(shell_partial(dest, SIZE, ETAG), data[:half], age_s=3600)

    def script(request: Request) -> Reply:
        reply = serve(request, data, ETAG)
        if reply.status == 206:
            start = digits(5000) if field == "start" else str(half)
            total = digits(5000) if field == "total" else str(SIZE)
            span = ("Content-Range", f"bytes {start}-{SIZE - 1}/{total}")
            reply.headers = [h for h in reply.headers if h[0] != "Content-Range"] + [span]
        return reply

    with RawOrigin(script) as origin:
        run = pod.stage(pod.single_env(origin.url + PATH)).failed("ModelSourceRejected")
    _bad_answer(run, "Content-Range")
    assert not dest.exists()
    (name,) = partials(dest)
    assert (dest.parent / name).read_bytes() == data[:half]


@pytest.mark.parametrize("value", ["1_0", "+10", "10, 20", " 0x10"])
def test_a_content_length_http_client_reads_otherwise_is_a_bad_answer(pod: Pod, value: str) -> None:
    """http.client frames by int(value) ("1_0" is 10 to it, "10, 20" its
    first number); the agent's own reading finds no length. Which bytes are
    the body is then a guess: refused (curl 7.88 takes them for 1, 10, 10 and
    0 bytes)."""
    data = payload(SIZE, 5)

    def script(request: Request) -> Reply:
        if request.method == "HEAD":
            return Reply(405)
        return Reply(200, [("ETag", ETAG), ("Content-Length", value)], data, framing="close")

    with RawOrigin(script) as origin:
        run = pod.stage(pod.single_env(origin.url + PATH)).failed("ModelSourceRejected")
    assert "Content-Length" in run.term["message"]
    _nothing_published(pod)


# -- the hub API (huggingface_hub) ---------------------------------------------------------


def _hub_env(pod: Pod, hub: FakeHub) -> dict[str, str]:
    return pod.single_env(
        f"hf://{REPO}/model.gguf", HF_ENDPOINT=hub.url, HF_TOKEN=HF_TOKEN, LLMKUBE_RETRIES="2"
    )


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("form", FORMS)
def test_the_hub_apis_rate_limit_window_without_end_is_a_bad_answer(
    pod: Pod, hub: FakeHub, form: str, n: int
) -> None:
    """Before: exit 3 (float() overflowed in our reading of the hub's 429;
    huggingface_hub's own int() raised at 5,000 digits)."""
    hub.add_repo(REPO, {"model.gguf": payload(SIZE, 6)})
    headers = rate_headers(form, n)
    hub.set_fault("api", HubFault(429, headers=headers))

    run = pod.stage(_hub_env(pod, hub)).failed("ModelSourceRejected", retryable=False)

    _bad_answer(run, headers[-1][0])
    assert len(hub.requests("api")) == 1
    _nothing_published(pod)


@pytest.mark.parametrize("size", [10**400, -1], ids=["400-digits", "negative"])
def test_a_file_size_without_end_in_the_model_info_is_a_bad_answer(
    pod: Pod, hub: FakeHub, size: int
) -> None:
    """The model info's JSON holds an integer of 400 digits (JSON has no
    bound short of int()'s 4,300). Before: the transfer went on with a size
    of 400 digits (ModelTransferOutOfSpace asking for 10**400 bytes)."""
    data = payload(SIZE, 8)
    hub.add_repo(REPO, {"model.gguf": data})
    sibling = {
        "rfilename": "model.gguf",
        "size": size,
        "lfs": {"sha256": hashlib.sha256(data).hexdigest(), "size": size, "pointerSize": 134},
    }
    doc = {"id": REPO, "modelId": REPO, "sha": hub.commit_of(REPO), "siblings": [sibling]}
    hub.set_fault("api", HubFault(200, body=json.dumps(doc).encode()))

    run = pod.stage(_hub_env(pod, hub)).failed("ModelSourceRejected", retryable=False)

    assert "as the size of 'model.gguf'" in run.term["message"], run.term["message"]
    assert "9" * 60 not in run.term["message"] and "1" + "0" * 60 not in run.term["message"]
    _nothing_published(pod)


def test_the_hub_apis_unused_rate_limit_number_without_end_is_a_bad_answer(
    pod: Pod, hub: FakeHub
) -> None:
    """A policy with quota left (`r=5`) whose `t` has 5,000 digits: the
    agent's reading never needs `t`, huggingface_hub's int() reads it all
    the same. Before: "the hub API answered something that is not model
    info" (the library's ValueError)."""
    hub.add_repo(REPO, {"model.gguf": payload(SIZE, 9)})
    headers = (("RateLimit", f'"api";r=5;t={digits(5000)}'), ("Retry-After", "1"))
    hub.set_fault("api", HubFault(429, headers=headers))

    run = pod.stage(_hub_env(pod, hub)).failed("ModelSourceRejected", retryable=False)

    _bad_answer(run, "RateLimit")


def test_repeated_lines_of_one_content_length_are_that_length(pod: Pod) -> None:
    """Two identical Content-Length lines (RFC 9110 §8.6 lets a recipient
    take them as one), on the HEAD and on the GET: the file, resumable."""
    data = payload(SIZE, 10)

    def script(request: Request) -> Reply:
        reply = serve(request, data, ETAG)
        length = len(reply.body)
        reply.headers = [*reply.headers, ("Content-Length", str(length))]
        reply.declared = length
        return reply

    with RawOrigin(script) as origin:
        pod.stage(pod.single_env(origin.url + PATH)).ok()
        assert len(origin.requests("HEAD")) == 1
    assert pod.dest().read_bytes() == data
