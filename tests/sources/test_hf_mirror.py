"""#14 item 3 A Hugging Face mirror that serves only `/resolve/` keeps working.

A static mirror or a caching proxy under HF_ENDPOINT has no hub API: its
`/api/models/...` answers a plain 404 (no X-Error-Code, which every 404 of
the real API carries). The scripts never asked the API; they GET
`<endpoint>/<repo>/resolve/<rev>/<file>`. The agent falls back to exactly
that, with the token rules unchanged (the mirror's origin only, never across
the redirect to the CDN), and says in the log what is lost: commit pinning
and the LFS sha256 check.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from llmkube_stager.model import Decision
from tests.harness.canary import HF_TOKEN, leaks
from tests.harness.disk import record_of
from tests.harness.hub import FakeHub
from tests.harness.origin import Origin
from tests.harness.sample import payload

pytestmark = pytest.mark.floors

REPO = "org/repo"
FILES = ["model.safetensors", "config.json", "tokenizer/tokenizer.model"]
LOST = "commit pinning and LFS sha256 checks are not available"


@pytest.fixture
def mirror(cdn: Origin) -> Iterator[FakeHub]:
    with FakeHub(cdn, tokens={HF_TOKEN}, api=False) as fake:
        yield fake


def files_of() -> dict[str, bytes]:
    return {
        "model.safetensors": payload(96 * 1024, 1),
        "config.json": json.dumps({"model_type": "llama"}).encode(),
        "tokenizer/tokenizer.model": payload(8 * 1024, 2),
    }


def assert_token_only_to_the_mirror(mirror: FakeHub, cdn: Origin) -> None:
    assert mirror.requests("resolve")
    for request in mirror.requests():
        assert request.authorization == f"Bearer {HF_TOKEN}", request.path
    assert cdn.requests(), "no LFS file went through the CDN"
    for request in cdn.requests():
        assert "authorization" not in request.headers, request.path


@pytest.mark.parametrize("form", ["hf-scheme", "url"])
def test_a_mirror_without_the_api_is_fetched_like_the_scripts(pod, mirror, cdn, form) -> None:
    files = files_of()
    mirror.add_repo(REPO, files)
    source = f"hf://{REPO}@main" if form == "hf-scheme" else f"{mirror.url}/{REPO}/resolve/main/"
    env = pod.multi_env(source, FILES, HF_ENDPOINT=mirror.url, HF_TOKEN=HF_TOKEN)

    run = pod.stage(env).ok()

    for rel in FILES:
        assert pod.dest(rel).read_bytes() == files[rel], rel
        assert record_of(pod.dest(rel)) == str(len(files[rel])), rel
    assert [r.status for r in mirror.requests("api")] == [404]  # asked once, then not again
    paths = sorted({r.path for r in mirror.requests("resolve")})
    assert paths == sorted(f"/{REPO}/resolve/main/{rel}" for rel in FILES)
    assert_token_only_to_the_mirror(mirror, cdn)
    assert run.has_line(LOST), run.stderr
    assert leaks(HF_TOKEN, run.stderr) == []


def test_single_file_from_a_mirror_without_the_api_cli(pod, mirror, cdn) -> None:
    files = files_of()
    mirror.add_repo(REPO, files)
    env = pod.single_env(
        f"hf://{REPO}@main/model.safetensors",
        name="model.safetensors",
        HF_ENDPOINT=mirror.url,
        HF_TOKEN=HF_TOKEN,
    )

    run = pod.run(env=env)

    run.ok(files=1, fetched=1)
    assert pod.dest("model.safetensors").read_bytes() == files["model.safetensors"]
    assert LOST in run.stderr
    assert_token_only_to_the_mirror(mirror, cdn)
    assert leaks(HF_TOKEN, run.outputs) == []


def test_a_file_the_mirror_does_not_have_is_not_found(pod, mirror, cdn) -> None:
    mirror.add_repo(REPO, files_of())
    env = pod.multi_env(
        f"hf://{REPO}@main", ["missing.bin"], HF_ENDPOINT=mirror.url, HF_TOKEN=HF_TOKEN
    )

    run = pod.stage(env).failed("ModelSourceNotFound")

    assert not run.error.retryable
    assert not pod.dest("missing.bin").exists()


def test_on_change_against_a_mirror_without_the_api_revalidates_by_size(pod, mirror, cdn) -> None:
    files = files_of()
    mirror.add_repo(REPO, files)
    env = pod.multi_env(f"hf://{REPO}@main", FILES, HF_ENDPOINT=mirror.url, HF_TOKEN=HF_TOKEN)
    pod.stage(env).ok()
    mirror.clear_log()
    cdn.clear_log()

    run = pod.stage({**env, "LLMKUBE_REFRESH_POLICY": "OnChange"}).ok()

    assert run.count(Decision.REUSE) == len(FILES)
    assert len(mirror.requests("api")) == 1
    assert {r.method for r in mirror.requests("resolve")} == {"HEAD"}
    assert [r.method for r in cdn.requests()] == ["HEAD"] * len(cdn.requests())


def test_a_hub_with_the_api_never_falls_back(pod, hub, cdn) -> None:
    """A real API's 404 carries X-Error-Code: the repo is missing, period."""
    hub.add_repo(REPO, files_of())
    env = pod.multi_env("hf://org/no-such-repo@main", FILES, HF_ENDPOINT=hub.url, HF_TOKEN=HF_TOKEN)

    run = pod.stage(env).failed("ModelSourceNotFound")

    assert hub.requests("resolve") == []
    assert not run.has_line(LOST)
