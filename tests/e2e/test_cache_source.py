"""#46 item 2: a cache directory knows the source it was staged from.

The same CACHE_DIR and MODEL_PATH with another MODEL_SOURCE used to be
"already cached" for `stage`, `plan`, `verify` and OnChange alike: the old
model served as the new one. Now a run records the source (credentials,
query and fragment removed) and a run of another source is refused before
it asks any origin (InvalidConfiguration, exit 2), naming both and the
remedy; unless every file is pinned (MODEL_SHA256, MODEL_FILE_SHA256): the
pins prove the files, whichever URL serves them. Evidence: exit codes, the
termination message, the requests the origin received, bytes on disk.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.harness.canary import HF_TOKEN, canary, leaks
from tests.harness.hub import FakeHub
from tests.harness.origin import Origin
from tests.harness.pod import ON_CHANGE, Pod
from tests.harness.sample import payload

pytestmark = pytest.mark.e2e

BASE = payload(32 * 1024, seed=11)
OTHER = payload(32 * 1024, seed=12)


def _staged(pod: Pod, origin: Origin, path: str = "/base/model.gguf") -> Path:
    origin.put(path, BASE)
    origin.put("/other/model.gguf", OTHER)
    dest = pod.single(origin.url + path)
    pod.run().ok()
    assert dest.read_bytes() == BASE
    origin.clear_log()
    return dest


@pytest.mark.parametrize("command", ["stage", "verify"])
@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
def test_another_source_in_the_same_directory_is_refused(
    pod: Pod, origin: Origin, command: str, policy: str
) -> None:
    dest = _staged(pod, origin)
    other = origin.url + "/other/model.gguf"

    run = pod.run(command, MODEL_SOURCE=other, LLMKUBE_REFRESH_POLICY=policy)

    run.failed("InvalidConfiguration", exit_code=2)
    detail = run.term["message"]
    assert origin.url + "/base/model.gguf" in detail and other in detail
    assert "CACHE_DIR" in run.term["remedy"]
    assert origin.requests() == []
    assert dest.read_bytes() == BASE


def test_plan_refuses_another_source_too(pod: Pod, origin: Origin) -> None:
    _staged(pod, origin)
    other = origin.url + "/other/model.gguf"

    run = pod.run("plan", MODEL_SOURCE=other)

    assert run.returncode == 2, str(run)
    assert other in run.stderr and origin.url + "/base/model.gguf" in run.stderr
    assert origin.requests() == []


def test_the_same_source_with_other_credentials_is_the_same_source(
    pod: Pod, origin: Origin
) -> None:
    secret = canary("CANARY")
    host = origin.url.split("://", 1)[1]
    with_secret = f"http://reader:{secret}@{host}/base/model.gguf?sig={secret}"
    origin.put("/base/model.gguf", BASE)
    dest = pod.single(with_secret)
    first = pod.run().ok()

    again = pod.run(MODEL_SOURCE=origin.url + "/base/model.gguf?sig=rotated", **ON_CHANGE).ok()

    assert dest.read_bytes() == BASE
    records = "".join(p.read_text() for p in dest.parent.glob(".llmkube-validators*"))
    assert host + "/base/model.gguf" in records  # the source is recorded ...
    assert leaks(secret, records, first.outputs, again.outputs) == []  # ... never its secret


def test_pinned_files_may_come_from_another_source(pod: Pod, origin: Origin) -> None:
    # A mirror of the same bytes: the pin proves the copy, no request needed.
    digest = hashlib.sha256(BASE).hexdigest()
    pod.env["MODEL_SHA256"] = digest
    dest = _staged(pod, origin)
    origin.put("/mirror/model.gguf", BASE)

    run = pod.run(MODEL_SOURCE=origin.url + "/mirror/model.gguf").ok()

    assert run.stats == (1, 0, 1, 0)
    assert origin.requests() == []
    assert dest.read_bytes() == BASE


def test_a_directory_without_a_recorded_source_is_judged_as_before(
    pod: Pod, origin: Origin
) -> None:
    # Left by the scripts (or an agent before #46): no source recorded.
    dest = _staged(pod, origin)
    for record in dest.parent.glob(".llmkube-validators*"):
        record.unlink()

    pod.run(MODEL_SOURCE=origin.url + "/other/model.gguf").ok()

    assert dest.read_bytes() == BASE


# -- a Hugging Face source: files proven by the hub's digests (OnChange) ------------------

HF_REPO, HF_MIRROR = "org/repo", "org/mirror"
HF_FILES = {
    "model.safetensors": payload(64 * 1024, seed=13),
    "config.json": b'{"model_type": "llama"}',
}


def _hf_staged(pod: Pod, hub: FakeHub) -> Path:
    hub.add_repo(HF_REPO, HF_FILES)
    root = pod.multi(f"hf://{HF_REPO}@main", list(HF_FILES))
    pod.env.update(HF_ENDPOINT=hub.url, HF_TOKEN=HF_TOKEN)
    pod.run().ok()
    return root


def test_hf_onchange_keeps_what_the_hub_proves_the_same(
    pod: Pod, hub: FakeHub, cdn: Origin
) -> None:
    root = _hf_staged(pod, hub)
    changed = {**HF_FILES, "config.json": b'{"model_type": "mistral"}'}
    hub.add_repo(HF_MIRROR, changed)  # the weights the same, config.json not
    cdn.clear_log()
    hub.clear_log()

    run = pod.run(MODEL_SOURCE=f"hf://{HF_MIRROR}@main", **ON_CHANGE).ok()

    assert (root / "model.safetensors").read_bytes() == HF_FILES["model.safetensors"]
    assert (root / "config.json").read_bytes() == changed["config.json"]
    assert not any("model.safetensors" in r.path for r in cdn.requests(method="GET"))
    assert "proven by the hub's digests" in run.line_with(f"hf://{HF_REPO}")
    again = pod.run(MODEL_SOURCE=f"hf://{HF_MIRROR}@main").ok()  # the directory's source now
    assert again.stats == (2, 0, 2, 0)


def test_hf_if_not_present_cannot_prove_another_source_offline(
    pod: Pod, hub: FakeHub, cdn: Origin
) -> None:
    _hf_staged(pod, hub)
    hub.add_repo(HF_MIRROR, HF_FILES)

    run = pod.run(MODEL_SOURCE=f"hf://{HF_MIRROR}@main")

    run.failed("InvalidConfiguration", exit_code=2)
    assert "OnChange" in run.term["message"]
