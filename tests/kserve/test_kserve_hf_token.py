"""#44 item 3: HF_TOKEN reaching the download each way KServe passes it
(read in kserve/kserve at aaac4e294), and the exit code and termination
message a failure leaves where KServe's users look.

Every way ends as one variable, HF_TOKEN, in the storage initializer's
environment (a secretKeyRef, resolved by the kubelet):
- the service account's Secret with an HF_TOKEN key (pkg/credentials/hf/
  hf_secret.go: the InferenceService webhook, the LLMInferenceService
  controller and the local model cache's Job with a serviceAccountName);
- the env of the ClusterStorageContainer (KServe #4400's workaround) or of
  an LLMInferenceService's storage-initializer override (merged by its
  controller: the per-service answer to KServe #6260).
KServe's storage spec (STORAGE_CONFIG) takes only s3, hdfs and webhdfs
types: it carries no Hugging Face token. A Secret made from a file
(`kubectl create secret --from-file`) often ends with a newline.

The hub accepts only the canary token, and the repository is private: a
token that did not arrive fails the run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.canary import canary, leaks
from tests.harness.hub import FakeHub
from tests.harness.kserve_pods import job_models_dir, llmisvc_args, llmisvc_env, visible
from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload

pytestmark = pytest.mark.e2e

REPO = "org/private-llm"
URI = f"hf://{REPO}"
TOKEN = canary("hf_kserve_")
FILES = {"config.json": b'{"model_type": "llama"}', "model.safetensors": payload(200 << 10, 51)}


@pytest.fixture
def hub(cdn: Origin) -> Iterator[FakeHub]:
    """A hub that accepts the canary token only; the repository is private."""
    with FakeHub(cdn, tokens={TOKEN}) as hub:
        hub.add_repo(REPO, FILES, private=True)
        yield hub


def args_of(form: str, tmp: Path) -> tuple[list[str], dict[str, str], Path]:
    """(args, the controller's env besides the credentials, /mnt/models)."""
    if form == "inferenceservice":  # the webhook: [storageUri, /mnt/models]
        dest = tmp / "mnt" / "models"
        return [URI, str(dest)], {}, dest
    if form == "llminferenceservice":
        return llmisvc_args(tmp, URI), llmisvc_env(URI), tmp / "mnt" / "models"
    dest = job_models_dir(tmp / "pvc", URI)  # the local model cache's Job
    dest.mkdir(parents=True)
    return [URI, str(dest)], {}, dest


@pytest.mark.parametrize("form", ["inferenceservice", "llminferenceservice", "localmodelcache"])
@pytest.mark.parametrize("secret", ["as stored", "from a file, with a newline"])
def test_hf_token_reaches_the_hub(pod: Pod, hub: FakeHub, form: str, secret: str) -> None:
    value = TOKEN if secret == "as stored" else TOKEN + "\n"
    args, env, dest = args_of(form, pod.tmp)

    run = pod.run(*args, env={"HF_ENDPOINT": hub.url, "HF_TOKEN": value, **env})

    run.ok(files=2, fetched=2)
    assert visible(dest) == FILES
    asked = hub.requests()
    assert asked and all(r.authorization == f"Bearer {TOKEN}" for r in asked), [
        (r.path, r.authorization) for r in asked
    ]
    # The CDN is another host: the token is not sent there.
    assert all("authorization" not in r.headers for r in hub.cdn.requests())
    assert leaks(TOKEN, run.outputs) == []


def test_a_token_that_did_not_arrive_fails_with_the_services_words(pod: Pod, hub: FakeHub) -> None:
    """No HF_TOKEN (the predictor's env does not reach an init container,
    KServe #4400): exit 4 and a termination message naming the service
    account's secret, which `kubectl describe pod` shows for the init
    container; nothing where the server looks."""
    args, env, dest = args_of("llminferenceservice", pod.tmp)

    run = pod.run(*args, env={"HF_ENDPOINT": hub.url, **env})

    run.failed("ModelSourceUnauthorized", exit_code=4, retryable=False)
    doc = run.compact_term()
    assert "HF_TOKEN" in doc["remedy"] and "service account" in doc["remedy"], doc
    assert visible(dest) == {}


def test_a_wrong_token_is_never_shown(pod: Pod, hub: FakeHub) -> None:
    wrong = canary("hf_wrong_")
    args, env, dest = args_of("localmodelcache", pod.tmp)

    run = pod.run(*args, env={"HF_ENDPOINT": hub.url, "HF_TOKEN": wrong, **env})

    run.failed("ModelSourceUnauthorized", exit_code=4, retryable=False)
    assert leaks(wrong, run.outputs) == []
    assert visible(dest) == {}
