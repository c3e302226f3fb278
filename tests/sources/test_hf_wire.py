"""#22 Wire truth for Hugging Face and S3 sources: encoded bodies from the
CDN or a mirror (item 1), the Hub's `RateLimit` header on the API,
`/resolve/` and the CDN (item 5), gated repositories (item 7), and S3
objects a hop compresses (item 1, the presigned GET).

Through the real huggingface_hub client against the fake hub, the CDN a
loopback origin; S3 is SeaweedFS behind the recording front.
"""

from __future__ import annotations

import json

import pytest

from llmkube_stager.errors import REMEDY_ENCODED, REMEDY_GATED
from tests.harness.canary import HF_TOKEN, leaks
from tests.harness.disk import partials, record_of
from tests.harness.hub import FakeHub, HubFault
from tests.harness.origin import Fault
from tests.harness.pod import Pod
from tests.harness.s3front import S3Fault
from tests.harness.sample import KIB, payload
from tests.harness.seaweed import s3_env

pytestmark = pytest.mark.floors

REPO = "org/repo"
MODEL = "model.safetensors"
FILES = [f"model-{i:05d}-of-00008.safetensors" for i in range(1, 9)]
WINDOW = (("RateLimit", '"api";r=0;t=55'), ("RateLimit-Policy", '"fixed window";"api";q=500;w=300'))
RESOLVERS = (("RateLimit", '"resolvers";r=0;t=55'),)


def one_file_env(pod: Pod, hub: FakeHub, token: str = HF_TOKEN) -> dict[str, str]:
    return pod.single_env(f"hf://{REPO}/{MODEL}", name=MODEL, HF_ENDPOINT=hub.url, HF_TOKEN=token)


def many_env(pod: Pod, hub: FakeHub) -> dict[str, str]:
    hub.add_repo(REPO, {rel: payload(4 * KIB, i) for i, rel in enumerate(FILES)})
    return pod.multi_env(f"hf://{REPO}@main", FILES, HF_ENDPOINT=hub.url, HF_TOKEN=HF_TOKEN)


def assert_unpublished(pod: Pod, rel: str = MODEL) -> None:
    dest = pod.dest(rel)
    assert not dest.exists() and record_of(dest) is None
    assert set(partials(dest).values()) <= {0}, partials(dest)


# -- item 1: encoded bodies ---------------------------------------------------------------


@pytest.mark.parametrize("api", [True, False], ids=["hub", "mirror-without-api"])
def test_a_cdn_that_compresses_is_refused_naming_the_cdn(pod, cdn, api) -> None:
    """Before: on a mirror without the API (no listed size or digest) the
    gzip bytes were published, exit 0; with the API they were a size
    mismatch against the listing, which named neither header nor hop."""
    data = payload(96 * KIB)
    with FakeHub(cdn, tokens={HF_TOKEN}, api=api) as hub:
        hub.add_repo(REPO, {MODEL: data})
        cdn.set_fault(hub.cdn_path_of(REPO, MODEL), Fault(content_encoding="gzip"))

        run = pod.stage(one_file_env(pod, hub)).failed("ModelSourceRejected", retryable=False)

        message = run.term["message"]
        assert "Content-Encoding: gzip" in message, message
        hub_port = hub.url.rsplit(":", 1)[1]
    assert f"the redirect target 127.0.0.1:{cdn.port}" in message, message
    assert f"redirected from 127.0.0.1:{hub_port}" in message, message
    assert run.term["remedy"] == REMEDY_ENCODED
    assert run.sleeps == []
    assert leaks(HF_TOKEN, run.outputs) == []
    assert_unpublished(pod)


def test_a_mirror_that_compresses_its_own_files_is_refused(pod, cdn) -> None:
    """A small git file the mirror serves itself (no redirect), gzip."""
    config = json.dumps({"model_type": "llama", "pad": "x" * 4000}).encode()
    with FakeHub(cdn, tokens={HF_TOKEN}, api=False) as mirror:
        mirror.add_repo(REPO, {"config.json": config})
        mirror.set_encoding("gzip")
        env = pod.single_env(
            f"hf://{REPO}/config.json", name="config.json", HF_ENDPOINT=mirror.url,
            HF_TOKEN=HF_TOKEN,
        )  # fmt: skip
        run = pod.stage(env).failed("ModelSourceRejected")
        mirror_port = mirror.url.rsplit(":", 1)[1]

    assert f"the origin 127.0.0.1:{mirror_port}" in run.term["message"], run.term
    assert_unpublished(pod, "config.json")


def test_an_s3_object_a_hop_compresses_is_refused(pod, s3, bucket) -> None:
    """A hop in front of the store gzips the presigned GET of an object
    stored without a coding. Before #22: its bytes were published as the
    model, exit 0. (An object *stored* with a Content-Encoding is saved as
    stored: #29 item 11, tests/sources/test_stored_encoding.py.)"""
    data = payload(64 * KIB)
    s3.put(bucket, "models/m.gguf", data)
    s3.set_fault(f"/{bucket}/models/m.gguf", S3Fault(methods=("GET",), gzip_body=True))
    env = pod.single_env(f"s3://{bucket}/models/m.gguf", **s3_env(s3))

    run = pod.stage(env).failed("ModelSourceRejected", retryable=False)

    assert "Content-Encoding: gzip" in run.term["message"], run.term
    assert run.term["remedy"] == REMEDY_ENCODED
    assert [r.method for r in s3.object_requests(bucket)] == ["HEAD", "GET"]
    assert_unpublished(pod, "model.gguf")
    # The presigned URL is named without its query: no signature, no key.
    signed = s3.object_requests(bucket, "GET")[0].params["X-Amz-Signature"][0]
    assert leaks(signed, run.outputs) == [] and "X-Amz-" not in run.outputs
    assert leaks(env["AWS_SECRET_ACCESS_KEY"], run.outputs) == []


# -- item 5: the Hub's RateLimit header ---------------------------------------------------


def test_the_api_window_is_honoured_and_reported(pod, hub) -> None:
    """Before: 3 API calls (1 + LLMKUBE_RETRIES) with backoff inside the
    55 s window, then a message that did not say how long it was."""
    env = many_env(pod, hub)
    hub.set_fault("api", HubFault(429, headers=WINDOW))

    run = pod.stage(env).failed("ModelSourceRateLimited", retryable=True)

    assert len(hub.requests("api")) == 1
    assert run.sleeps == []
    assert run.term["retryAfterSeconds"] == 55
    assert "window reopens in 55 s" in run.term["message"]
    assert hub.requests("resolve") == []


def test_the_resolvers_window_stops_every_file(pod, hub, cdn) -> None:
    """Before: every file of the 8 retried with backoff: 24 /resolve/ calls
    inside the window (48 with the default 5 retries)."""
    env = many_env(pod, hub)
    hub.set_fault("resolve", HubFault(429, headers=RESOLVERS))

    run = pod.stage(env).failed("ModelSourceRateLimited")

    statuses = [r.status for r in hub.requests("resolve")]
    # At most one request for each file in flight when the first 429 came.
    assert set(statuses) == {429} and len(statuses) <= len(FILES), statuses
    assert run.sleeps == []
    assert run.term["retryAfterSeconds"] == 55
    assert cdn.requests() == []


def test_a_cdn_window_is_honoured(pod, hub, cdn) -> None:
    hub.add_repo(REPO, {MODEL: payload(32 * KIB)})
    path = hub.cdn_path_of(REPO, MODEL)
    cdn.set_fault(path, Fault(status=429, headers=(("RateLimit", '"cdn";r=0;t=40'),)))

    run = pod.stage(one_file_env(pod, hub)).failed("ModelSourceRateLimited")

    assert len(cdn.requests(path)) == 1
    assert run.term["retryAfterSeconds"] == 40


def test_a_short_api_window_is_waited_out(pod, hub) -> None:
    env = many_env(pod, hub)
    hub.set_fault("api", HubFault(429, times=1, headers=(("RateLimit", '"api";r=0;t=3'),)))

    run = pod.stage(env).ok()

    assert run.sleeps == [3.0]
    assert [r.status for r in hub.requests("api")] == [429, 200]


# -- item 7: gated repositories -----------------------------------------------------------


@pytest.mark.parametrize("token", [HF_TOKEN, ""], ids=["token", "anonymous"])
def test_a_gated_repo_says_its_terms_must_be_accepted(pod, hub, cdn, token) -> None:
    """The metadata is public, /resolve/ answers 403 (401 anonymous) with
    X-Error-Code: GatedRepo. Before: the remedy said to check the token."""
    hub.add_repo(REPO, {MODEL: payload(16 * KIB)}, gated=True)

    run = pod.stage(one_file_env(pod, hub, token)).failed(
        "ModelSourceUnauthorized", retryable=False
    )

    assert run.term["remedy"] == REMEDY_GATED
    assert "gated" in run.term["message"] and "terms" in run.term["remedy"]
    assert "(GatedRepo)" in run.term["message"]
    assert [r.status for r in hub.requests("resolve")] == [403 if token else 401]
    assert cdn.requests() == []
    assert leaks(HF_TOKEN, run.outputs) == []


def test_a_gated_repo_refused_by_the_api_says_the_same(pod, hub) -> None:
    env = many_env(pod, hub)
    hub.set_fault("api", HubFault(403, error_code="GatedRepo", error_message="gated"))

    run = pod.stage(env).failed("ModelSourceUnauthorized")

    assert run.term["remedy"] == REMEDY_GATED


def test_a_gated_repo_as_a_plain_resolve_url(pod, hub, cdn) -> None:
    """https://<endpoint>/org/repo/resolve/main/<file> of another host than
    the hub's own is fetched as plain HTTP: the same header, the same words."""
    hub.add_repo(REPO, {MODEL: payload(16 * KIB)}, gated=True)
    env = pod.single_env(hub.resolve_url(REPO, "main", MODEL), name=MODEL, HF_TOKEN=HF_TOKEN)

    run = pod.stage(env).failed("ModelSourceUnauthorized")

    assert run.term["remedy"] == REMEDY_GATED
    assert cdn.requests() == []
