"""Hugging Face sources against a fake hub on loopback, through the real
`huggingface_hub` client (spec §3.2, §8.4, §8.5; CONTRACT §3, §5).

The hub answers the model-info API and `/resolve/`, redirecting LFS files
to a second origin (the CDN). Its request log and the CDN's show where the
token went and which commit every byte came from.
"""

from __future__ import annotations

import json

import pytest

from llmkube_stager.errors import REMEDY_ORIGIN_CHECKSUM, REMEDY_RATE_LIMITED_HF
from llmkube_stager.model import Decision
from tests.harness.canary import HF_TOKEN, leaks
from tests.harness.disk import debris, record_of, sha256, tree
from tests.harness.hub import FakeHub, HubFault
from tests.harness.origin import Origin, closed_port_url
from tests.harness.pod import Pod
from tests.harness.sample import payload

pytestmark = pytest.mark.floors

REPO = "org/repo"
SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"
FILES = [SHARD1, SHARD2, "config.json", "tokenizer/tokenizer.json", "tokenizer/tokenizer.model"]
KIB = 1024


def repo_files(seed: int = 1, shard2_size: int = 96 * KIB) -> dict[str, bytes]:
    return {
        SHARD1: payload(160 * KIB, seed),
        SHARD2: payload(shard2_size, seed + 100),
        "config.json": json.dumps({"model_type": "llama", "seed": seed}).encode(),
        "tokenizer/tokenizer.json": json.dumps({"version": "1.0", "seed": seed}).encode(),
        "tokenizer/tokenizer.model": payload(8 * KIB, seed + 200),
        "README.md": b"# not staged\n",
    }


def hf_env(pod: Pod, hub: FakeHub, source: str = f"hf://{REPO}@main", **extra: str):
    return pod.multi_env(source, FILES, **{"HF_ENDPOINT": hub.url, "HF_TOKEN": HF_TOKEN, **extra})


def shard2_env(pod: Pod, hub: FakeHub, **extra: str):
    """Single-file: SHARD2 (an LFS file) of the repo's main."""
    return pod.single_env(
        f"hf://{REPO}/{SHARD2}", name=SHARD2, HF_ENDPOINT=hub.url, HF_TOKEN=HF_TOKEN, **extra
    )


def assert_token_only_to_hub(hub: FakeHub, cdn: Origin) -> None:
    hub_requests = hub.requests("api") + hub.requests("resolve")
    assert hub_requests, "the hub got no request"
    for request in hub_requests:
        assert request.authorization == f"Bearer {HF_TOKEN}", (request.kind, request.path)
    assert cdn.requests(), "the CDN got no request"
    for request in cdn.requests():
        assert "authorization" not in request.headers, request.path


def resolve_paths(hub: FakeHub) -> list[str]:
    return [r.path for r in hub.requests("resolve")]


def assert_pinned_to(hub: FakeHub, commit: str) -> None:
    paths = resolve_paths(hub)
    assert paths
    for path in paths:
        assert path.startswith(f"/{REPO}/resolve/{commit}/"), path
        assert "/resolve/main/" not in path, path


# -- happy paths, as the init container runs them ------------------------------------------


def test_multi_file_hf_scheme_cli(pod, hub, cdn) -> None:
    files = repo_files()
    commit = hub.add_repo(REPO, files)

    run = pod.run(env=hf_env(pod, hub))

    run.ok(files=len(FILES), fetched=len(FILES))
    for rel in FILES:
        assert pod.dest(rel).read_bytes() == files[rel], rel
        assert record_of(pod.dest(rel)) == str(len(files[rel])), rel
    assert not pod.dest("README.md").exists()
    assert debris(pod.cache_dir, markers=True) == []
    # One model-info call resolved main; every byte came from that commit.
    (api,) = hub.requests("api")
    assert api.path.startswith(f"/api/models/{REPO}/revision/main?")
    assert "blobs=true" in api.path.lower()
    assert_pinned_to(hub, commit)
    assert sorted(p.rsplit(f"/{commit}/", 1)[1] for p in resolve_paths(hub)) == sorted(FILES)
    # LFS files came from the CDN, small git files from the hub itself.
    lfs = {hub.cdn_path_of(REPO, rel) for rel in (SHARD1, SHARD2, "tokenizer/tokenizer.model")}
    assert {r.path.split("?")[0] for r in cdn.requests()} == lfs
    assert_token_only_to_hub(hub, cdn)
    written = [data.decode("latin-1") for data in tree(pod.cache_dir).values()]
    assert leaks(HF_TOKEN, run.outputs, *written) == []
    signature = cdn.requests()[0].path.split("X-Amz-Signature=")[1]
    assert signature not in run.outputs


def test_single_file_at_a_revision_cli(pod, hub, cdn) -> None:
    main_files = {"gguf/model-Q4.gguf": payload(64 * KIB, 1)}
    release_files = {"gguf/model-Q4.gguf": payload(72 * KIB, 2)}
    hub.add_repo(REPO, main_files)
    release = hub.move_branch(REPO, "release", release_files)
    env = pod.single_env(
        f"hf://{REPO}@release/gguf/model-Q4.gguf",
        name="model-Q4.gguf",
        HF_ENDPOINT=hub.url,
        HF_TOKEN=HF_TOKEN,
    )

    run = pod.run(env=env)

    run.ok(files=1, fetched=1)
    dest = pod.dest("model-Q4.gguf")
    assert dest.read_bytes() == release_files["gguf/model-Q4.gguf"]
    assert record_of(dest) == str(72 * KIB)
    (api,) = hub.requests("api")
    assert api.path.startswith(f"/api/models/{REPO}/revision/release?")
    assert resolve_paths(hub) == [f"/{REPO}/resolve/{release}/gguf/model-Q4.gguf"]
    assert_token_only_to_hub(hub, cdn)
    assert leaks(HF_TOKEN, run.outputs) == []
    assert "Downloading model..." in run.stderr


def test_hf_url_form_on_the_mirror_behaves_like_hf_scheme(pod, hub, cdn) -> None:
    files = repo_files()
    commit = hub.add_repo(REPO, files)

    run = pod.stage(hf_env(pod, hub, source=f"{hub.url}/{REPO}/resolve/main/")).ok()

    assert run.count(Decision.FETCH) == len(FILES)
    assert {rel: pod.dest(rel).read_bytes() for rel in FILES} == {rel: files[rel] for rel in FILES}
    assert len(hub.requests("api")) == 1
    assert_pinned_to(hub, commit)
    assert_token_only_to_hub(hub, cdn)


@pytest.mark.parametrize("kind", ["resolve", "blob"])
def test_single_file_url_form_on_the_mirror(pod, hub, cdn, kind) -> None:
    files = repo_files()
    commit = hub.add_repo(REPO, files)
    env = pod.single_env(
        f"{hub.url}/{REPO}/{kind}/main/{SHARD2}",
        name=SHARD2,
        HF_ENDPOINT=hub.url,
        HF_TOKEN=HF_TOKEN,
    )

    pod.stage(env).ok()

    assert pod.dest(SHARD2).read_bytes() == files[SHARD2]
    assert resolve_paths(hub) == [f"/{REPO}/resolve/{commit}/{SHARD2}"]
    assert_token_only_to_hub(hub, cdn)


def test_hf_scheme_with_a_subfolder(pod, hub, cdn) -> None:
    files = {"onnx/model.onnx": payload(20 * KIB), "onnx/config.json": b"{}", "model.bin": b"x"}
    commit = hub.add_repo(REPO, files)
    env = pod.multi_env(
        f"hf://{REPO}@main/onnx", ["model.onnx", "config.json"], HF_ENDPOINT=hub.url, HF_TOKEN=""
    )

    pod.stage(env).ok()

    assert pod.dest("model.onnx").read_bytes() == files["onnx/model.onnx"]
    assert pod.dest("config.json").read_bytes() == b"{}"
    assert sorted(resolve_paths(hub)) == [
        f"/{REPO}/resolve/{commit}/onnx/config.json",
        f"/{REPO}/resolve/{commit}/onnx/model.onnx",
    ]
    assert all(r.authorization is None for r in hub.requests())  # anonymous: no header


def test_hf_endpoint_with_trailing_slash_and_newline(pod, hub, cdn) -> None:
    """Scenario 90: the controller trims HF_ENDPOINT; so does the agent."""
    files = repo_files()
    hub.add_repo(REPO, files)

    pod.stage(hf_env(pod, hub, HF_ENDPOINT=hub.url + "/\n")).ok()

    assert pod.dest(SHARD1).read_bytes() == files[SHARD1]
    assert_token_only_to_hub(hub, cdn)


def test_every_file_comes_from_the_commit_the_revision_resolved_to(pod, hub, cdn) -> None:
    old = repo_files(seed=1)
    commit = hub.add_repo(REPO, old)
    new = repo_files(seed=7, shard2_size=100 * KIB)
    moved: list[str] = []

    def move_main_once() -> None:
        if not moved:
            moved.append(hub.move_branch(REPO, "main", new))

    # Upstream moves main right after the agent resolved it, before any byte.
    hub.on_api(move_main_once)

    pod.stage(hf_env(pod, hub)).ok()

    assert moved and hub.commit_of(REPO) == moved[0] != commit
    for rel in FILES:
        assert pod.dest(rel).read_bytes() == old[rel], f"{rel} is not from {commit}"
    assert_pinned_to(hub, commit)


# -- integrity -------------------------------------------------------------------------------


def test_corrupted_cdn_bytes_fail_the_lfs_checksum_without_a_pin(pod, hub, cdn) -> None:
    files = repo_files()
    hub.add_repo(REPO, files)
    hub.corrupt(REPO, SHARD1)  # same size, one byte flipped

    # One file at a time (with files in flight the files beside the shard
    # are published, each whole and verified).
    run = pod.stage(hf_env(pod, hub, LLMKUBE_FILES_IN_FLIGHT="1")).failed(
        "ModelTransferChecksumMismatch"
    )

    assert run.error is not None and run.error.file == SHARD1
    # #12 item 5: nobody pinned anything, so there is no pin to correct and no
    # marker to delete; a bad CDN copy is transient: restarting may help.
    assert run.error.retryable
    assert run.error.remedy == REMEDY_ORIGIN_CHECKSUM
    assert "marker" in run.error.remedy and "pin" not in run.error.remedy
    # Nothing published: not the shard, not any file after it, no partial kept.
    published = {k for k in tree(pod.cache_dir) if not k.startswith(".llmkube")}
    assert published == set(), published
    assert debris(pod.cache_dir, markers=True) == []


def test_lfs_checksum_mismatch_termination_message_is_retryable(pod, hub, cdn) -> None:
    hub.add_repo(REPO, repo_files())
    hub.corrupt(REPO, SHARD2)

    run = pod.run(env=shard2_env(pod, hub))

    doc = run.failed("ModelTransferChecksumMismatch", retryable=True).term
    assert doc["remedy"] == REMEDY_ORIGIN_CHECKSUM
    assert debris(pod.cache_dir, markers=True) == []


def _assert_recovers_once_the_cdn_heals(
    pod: Pod, hub: FakeHub, cdn: Origin, env: dict[str, str], files: dict[str, bytes]
) -> None:
    """The failed run left nothing behind, no rejection marker either; once
    the CDN serves SHARD2's right bytes, the same start stages them."""
    assert debris(pod.cache_dir, markers=True) == []
    cdn.put(hub.cdn_path_of(REPO, SHARD2), files[SHARD2])  # the CDN heals
    pod.stage(env).ok()
    assert pod.dest(SHARD2).read_bytes() == files[SHARD2]


def test_a_pin_equal_to_the_lfs_digest_leaves_no_marker(pod, hub, cdn) -> None:
    """The user pinned what the hub lists; the CDN served other bytes: the
    origin is at fault, and a marker would block the run after the CDN heals."""
    files = repo_files()
    hub.add_repo(REPO, files)
    hub.corrupt(REPO, SHARD2)
    env = shard2_env(pod, hub, MODEL_SHA256=sha256(files[SHARD2]))

    run = pod.stage(env).failed("ModelTransferChecksumMismatch", retryable=True)

    assert run.error.remedy == REMEDY_ORIGIN_CHECKSUM
    _assert_recovers_once_the_cdn_heals(pod, hub, cdn, env, files)


def test_a_pin_the_hub_does_not_list_fails_the_pin_with_its_marker(pod, hub, cdn) -> None:
    """A pin of other bytes than the hub lists: the pin is what fails (spec §7)."""
    hub.add_repo(REPO, repo_files())
    env = shard2_env(pod, hub, MODEL_SHA256=sha256(b"some other release"))

    run = pod.stage(env).failed("ModelTransferChecksumMismatch", retryable=False)

    assert run.error.remedy != REMEDY_ORIGIN_CHECKSUM
    assert [p for p in debris(pod.cache_dir, markers=True) if p.endswith(".sha256-rejected")]


def test_single_file_checksum_mismatch_then_a_fixed_cdn_succeeds(pod, hub, cdn) -> None:
    files = repo_files()
    hub.add_repo(REPO, files)
    hub.corrupt(REPO, SHARD2)
    env = shard2_env(pod, hub)

    pod.stage(env).failed("ModelTransferChecksumMismatch")
    assert not pod.dest(SHARD2).exists()
    _assert_recovers_once_the_cdn_heals(pod, hub, cdn, env, files)


# -- warm starts --------------------------------------------------------------------------------


def test_warm_if_not_present_start_makes_no_request(pod, hub, cdn) -> None:
    hub.add_repo(REPO, repo_files())
    env = hf_env(pod, hub)
    pod.stage(env).ok()
    hub.clear_log()
    cdn.clear_log()

    run = pod.stage(env).ok()

    assert hub.requests() == []
    assert cdn.requests() == []
    assert run.count(Decision.REUSE) == len(FILES)
    assert run.has_line(f"Model artifact {SHARD1} already cached, skipping download")


def test_s4_warm_start_survives_a_dead_hub(pod, hub, cdn) -> None:
    hub.add_repo(REPO, repo_files())
    pod.stage(hf_env(pod, hub)).ok()

    run = pod.stage(hf_env(pod, hub, HF_ENDPOINT=closed_port_url())).ok()

    assert run.count(Decision.REUSE) == len(FILES)


# -- rate limits and server errors -----------------------------------------------------------------


def test_429_with_retry_after_is_waited_out(pod, hub, cdn) -> None:
    files = repo_files()
    hub.add_repo(REPO, files)
    hub.set_fault("api", HubFault(429, times=1, retry_after="1"))

    run = pod.stage(hf_env(pod, hub)).ok()

    assert run.sleeps == [1.0]
    assert [r.status for r in hub.requests("api")] == [429, 200]
    assert pod.dest(SHARD1).read_bytes() == files[SHARD1]


def test_429_on_a_file_download_is_waited_out(pod, hub, cdn) -> None:
    files = repo_files()
    hub.add_repo(REPO, files)
    hub.set_fault("resolve", HubFault(429, times=1, retry_after="1"))

    run = pod.stage(hf_env(pod, hub)).ok()

    assert run.sleeps == [1.0]
    # The first request got the 429; every other answer (the retry among
    # them, and with files in flight the other files') went through.
    statuses = [r.status for r in hub.requests("resolve")]
    assert statuses[0] == 429 and set(statuses[1:]) <= {200, 302}, statuses
    assert {rel: pod.dest(rel).read_bytes() for rel in FILES} == {rel: files[rel] for rel in FILES}


def test_429_every_time_is_rate_limited(pod, hub, cdn) -> None:
    hub.add_repo(REPO, repo_files())
    hub.set_fault("api", HubFault(429, retry_after="1"))

    run = pod.stage(hf_env(pod, hub)).failed("ModelSourceRateLimited")

    assert run.sleeps == [1.0, 1.0]  # LLMKUBE_RETRIES=2, each honouring Retry-After
    assert [r.status for r in hub.requests("api")] == [429, 429, 429]
    assert hub.requests("resolve") == [] and cdn.requests() == []
    assert run.error is not None and run.error.retryable
    assert run.term["remedy"] == REMEDY_RATE_LIMITED_HF  # set HF_TOKEN
    assert not pod.cache_dir.exists() or tree(pod.cache_dir).keys() <= {".llmkube.lock"}


def test_429_asking_for_longer_than_the_retry_cap_stops_at_once(pod, hub, cdn) -> None:
    hub.add_repo(REPO, repo_files())
    hub.set_fault("api", HubFault(429, retry_after="3600"))

    run = pod.stage(hf_env(pod, hub)).failed("ModelSourceRateLimited")

    assert run.sleeps == []
    assert len(hub.requests("api")) == 1


def test_500_once_is_retried_and_500_always_fails(pod, hub, cdn) -> None:
    hub.add_repo(REPO, repo_files())
    hub.set_fault("api", HubFault(500, times=1))
    run = pod.stage(hf_env(pod, hub)).ok()
    assert len(run.sleeps) == 1 and 0 < run.sleeps[0] <= 5

    pod2 = Pod(pod.tmp / "second", budget=pod.budget)
    hub.set_fault("api", HubFault(500))
    run = pod2.stage(hf_env(pod2, hub)).failed("ModelSourceUnavailable")
    assert run.error is not None and run.error.retryable


# -- refusals --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "reason"),
    [(HF_TOKEN, "ModelSourceNotFound"), ("", "ModelSourceUnauthorized")],
    ids=["with-token", "anonymous"],
)
def test_repo_not_found(pod, hub, cdn, token, reason) -> None:
    """With a token the hub says 404: the repo does not exist (for this
    token). Without one it says 401 for a missing repo exactly as for a
    private one (#12 item 5): the only thing that can change that answer is a
    token, so the reason is Unauthorized and the detail says both."""
    hub.add_repo(REPO, repo_files())

    env = hf_env(pod, hub, source="hf://org/no-such-repo@main", HF_TOKEN=token)
    run = pod.stage(env).failed(reason, retryable=False)

    assert [r.status for r in hub.requests("api")] == [404 if token else 401]
    assert hub.requests("api")[0].authorization == (f"Bearer {token}" if token else None)
    assert run.sleeps == [] and cdn.requests() == []
    if not token:
        assert "private or gated" in run.detail and "does not exist" in run.detail


def test_revision_not_found(pod, hub, cdn) -> None:
    hub.add_repo(REPO, repo_files())

    run = pod.stage(hf_env(pod, hub, source=f"hf://{REPO}@no-such-branch")).failed(
        "ModelSourceNotFound"
    )

    assert [r.status for r in hub.requests("api")] == [404]
    assert hub.requests("resolve") == []
    assert run.sleeps == []


def test_file_not_in_the_repo(pod, hub, cdn) -> None:
    files = repo_files()
    hub.add_repo(REPO, files)
    env = pod.multi_env(
        f"hf://{REPO}@main",
        ["missing.safetensors", "config.json"],
        HF_ENDPOINT=hub.url,
        HF_TOKEN=HF_TOKEN,
    )

    run = pod.stage(env).failed("ModelSourceNotFound")

    assert "missing.safetensors" in run.detail
    assert run.error.file == "missing.safetensors"
    # The listing already said so: the agent never asks /resolve/ for it.
    assert not any("missing" in p for p in resolve_paths(hub))
    assert not pod.dest("missing.safetensors").exists()


def test_private_repo_without_a_token_is_unauthorized(pod, hub, cdn) -> None:
    """#12 item 5: the hub answers 401 (RepoNotFound) to an anonymous caller; that
    is a credentials problem to the user, not a missing repo."""
    files = repo_files()
    hub.add_repo(REPO, files, private=True)

    env = hf_env(pod, hub, HF_TOKEN="")
    run = pod.stage(env).failed("ModelSourceUnauthorized", retryable=False)

    assert [(r.status, r.authorization) for r in hub.requests("api")] == [(401, None)]
    assert "set HF_TOKEN" in run.detail
    assert hub.requests("resolve") == [] and cdn.requests() == []
    pod.stage(hf_env(pod, hub)).ok()
    assert pod.dest(SHARD1).read_bytes() == files[SHARD1]


def test_gated_repo_files_without_a_token_are_unauthorized(pod, hub, cdn) -> None:
    hub.add_repo(REPO, repo_files(), gated=True)

    pod.stage(hf_env(pod, hub, HF_TOKEN="")).failed("ModelSourceUnauthorized", retryable=False)

    # Never retried: one request per file at most (those in flight), no CDN.
    statuses = [r.status for r in hub.requests("resolve")]
    assert set(statuses) == {401} and len(statuses) <= len(FILES), statuses
    assert cdn.requests() == []


def test_bad_token_is_unauthorized(pod, hub, cdn) -> None:
    hub.add_repo(REPO, repo_files())

    run = pod.stage(hf_env(pod, hub, HF_TOKEN="not-a-valid-token")).failed(
        "ModelSourceUnauthorized"
    )

    assert [r.status for r in hub.requests("api")] == [401]
    assert run.sleeps == [] and cdn.requests() == []


def test_gated_repo_files_are_unauthorized(pod, hub, cdn) -> None:
    hub.add_repo(REPO, repo_files(), gated=True)

    run = pod.stage(hf_env(pod, hub)).failed("ModelSourceUnauthorized")

    # A 403 is never retried: one request per file at most (the files in
    # flight when the first 403 came), nothing reaches the CDN.
    statuses = [r.status for r in hub.requests("resolve")]
    assert set(statuses) == {403} and len(statuses) <= len(FILES), statuses
    assert cdn.requests() == []
    assert not run.error.retryable


def test_gated_repo_refused_by_the_api_is_unauthorized(pod, hub, cdn) -> None:
    hub.add_repo(REPO, repo_files())
    hub.set_fault("api", HubFault(403, error_code="GatedRepo", error_message="gated"))

    pod.stage(hf_env(pod, hub)).failed("ModelSourceUnauthorized")

    assert hub.requests("resolve") == []


def test_failure_termination_message_carries_no_token(pod, hub, cdn) -> None:
    hub.add_repo(REPO, repo_files())

    run = pod.run(env=hf_env(pod, hub, source="hf://org/missing@main"))

    run.failed("ModelSourceNotFound", retryable=False)
    assert leaks(HF_TOKEN, run.outputs) == []


# -- OnChange --------------------------------------------------------------------------------------


def test_on_change_refreshes_from_the_new_commit(pod, hub, cdn) -> None:
    old = repo_files(seed=1)
    hub.add_repo(REPO, old)
    pod.stage(hf_env(pod, hub)).ok()
    new = dict(old)
    new[SHARD2] = payload(128 * KIB, 55)  # re-uploaded with a different size
    commit = hub.move_branch(REPO, "main", new)
    hub.clear_log()
    cdn.clear_log()

    run = pod.stage(hf_env(pod, hub, LLMKUBE_REFRESH_POLICY="OnChange")).ok()

    for rel in FILES:
        assert pod.dest(rel).read_bytes() == new[rel], rel
    assert record_of(pod.dest(SHARD2)) == str(128 * KIB)
    assert len(hub.requests("api")) == 1
    assert resolve_paths(hub) == [f"/{REPO}/resolve/{commit}/{SHARD2}"]
    assert run.count(Decision.REFRESH) == 1 and run.count(Decision.REUSE) == len(FILES) - 1
    assert run.has_line(f"Model artifact {SHARD2} revalidated (downloaded)")
    assert run.has_line("Model artifact config.json revalidated (unchanged, skipped download)")
    assert_token_only_to_hub(hub, cdn)


def test_on_change_never_mixes_two_commits(pod, hub, cdn) -> None:
    old = repo_files(seed=1)
    hub.add_repo(REPO, old)
    pod.stage(hf_env(pod, hub)).ok()
    new = dict(old)
    new[SHARD2] = payload(128 * KIB, 55)
    config = json.loads(old["config.json"])
    config["model_type"] = "LLAMA"  # same length, different content
    new["config.json"] = json.dumps(config).encode()
    assert len(new["config.json"]) == len(old["config.json"])
    hub.move_branch(REPO, "main", new)

    pod.stage(hf_env(pod, hub, LLMKUBE_REFRESH_POLICY="OnChange")).ok()

    assert {rel: pod.dest(rel).read_bytes() for rel in FILES} == {rel: new[rel] for rel in FILES}


def test_s7_hf_on_change_with_the_hub_down_keeps_the_cache(pod, hub, cdn) -> None:
    old = repo_files()
    hub.add_repo(REPO, old)
    pod.stage(hf_env(pod, hub)).ok()

    run = pod.stage(
        hf_env(pod, hub, HF_ENDPOINT=closed_port_url(), LLMKUBE_REFRESH_POLICY="OnChange")
    ).ok()

    assert run.count(Decision.KEEP) == len(FILES)
    assert run.has_line(f"Revalidation unreachable for {SHARD1}; kept cached copy")
    for rel in FILES:
        assert pod.dest(rel).read_bytes() == old[rel]


def test_cold_start_asks_the_hub_for_nothing_but_model_info_and_files(pod, hub, cdn) -> None:
    hub.add_repo(REPO, repo_files())

    run = pod.run(env=hf_env(pod, hub))

    run.ok(files=len(FILES), fetched=len(FILES))
    unexpected = {
        "requests": [r.path for r in hub.requests("other")],
        "written under $HOME": sorted(tree(pod.tmp / "home")),
    }
    assert unexpected == {"requests": [], "written under $HOME": []}


def test_hub_api_resolve_and_cdn_all_go_through_http_proxy(pod, hub, cdn) -> None:
    """The hub client (huggingface_hub's httpx2), the probe and the data path
    all honour the proxy variables, as the scripts' curl did."""
    from tests.harness.proxy import ForwardProxy

    files = repo_files()
    hub.add_repo(REPO, files)
    with ForwardProxy() as proxy:
        run = pod.stage({**hf_env(pod, hub), "http_proxy": proxy.url})
        asked = [r.target for r in proxy.requests()]

    assert run.error is None, run.stderr
    for rel in FILES:
        assert pod.dest(rel).read_bytes() == files[rel], rel
    assert any(t.startswith(f"{hub.url}/api/models/{REPO}") for t in asked)
    assert any(t.startswith(f"{hub.url}/{REPO}/resolve/") for t in asked)
    assert any(t.startswith(cdn.url) for t in asked)
    assert len(asked) == len(hub.requests()) + len(cdn.requests())


def test_the_serving_containers_offline_switch_does_not_stop_the_stager(pod, hub, cdn) -> None:
    """HF_HUB_OFFLINE is set for vLLM and reaches the init container through a
    shared envFrom; the scripts' curl ignored it, and so does the agent's own
    hub client (docs/sources.md)."""
    hub.add_repo(REPO, repo_files())

    run = pod.run(env=hf_env(pod, hub, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))

    run.ok(files=len(FILES), fetched=len(FILES))
    assert len(hub.requests("api")) == 1


def _imported(stderr: str) -> set[str]:
    return {line.split("|")[-1].strip() for line in stderr.splitlines() if "|" in line}


def test_warm_start_imports_neither_the_hub_nor_its_version_check(pod, hub, cdn) -> None:
    """#13 item 1 added a library check; it must not reach the warm path (no
    importlib.metadata, no huggingface_hub, no HTTP stack)."""
    hub.add_repo(REPO, repo_files())
    env = hf_env(pod, hub)
    cold = pod.run(env=env, python_flags=("-X", "importtime"))
    cold.ok()
    # The check can fail: a cold start imports both.
    assert {"huggingface_hub", "importlib.metadata"} <= _imported(cold.stderr)

    warm = pod.run(env=env, python_flags=("-X", "importtime"))

    warm.ok(files=len(FILES), fetched=0, reused=len(FILES))
    imported = _imported(warm.stderr)
    assert len(imported) > 20
    heavy = ("huggingface_hub", "httpx", "httpx2", "importlib.metadata", "http.client", "ssl")
    assert {m for m in imported if m.split(".")[0] in heavy or m in heavy} == set()


def test_the_probe_promises_the_listed_sizes_and_digests(pod, hub, cdn) -> None:
    """What the engine holds the bytes to (#10 item 7 is the engine's side):
    a non-LFS file's size is its git blob's, an LFS file's its own, and only
    LFS files carry a sha256."""
    from llmkube_stager.config import load_config
    from llmkube_stager.sources.hf.source import HfSource

    files = repo_files()
    hub.add_repo(REPO, files)
    source = HfSource(load_config(hf_env(pod, hub), {}))
    fetcher = source.fetcher()
    try:
        metas = {f.rel: fetcher.probe(f) for f in source.manifest().files}
    finally:
        fetcher.close()

    assert {rel: m.size_bytes for rel, m in metas.items()} == {
        rel: len(files[rel]) for rel in FILES
    }
    lfs = {SHARD1, SHARD2, "tokenizer/tokenizer.model"}
    assert {rel: m.sha256 for rel, m in metas.items()} == {
        rel: sha256(files[rel]) if rel in lfs else None for rel in FILES
    }
    assert len(hub.requests("api")) == 1
    assert len(files["config.json"]) < 100  # a small git file, served by the hub itself
