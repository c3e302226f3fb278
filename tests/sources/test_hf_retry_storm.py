"""#12 item 4 No retry storms: the hub API's answer is the run's answer.

An OnChange start asks about every present file twice (revalidation, then
the transfer's probe); before the fix each question called the API with
its own retry budget, so a failing hub was asked 2 x files x (1 + retries)
times. Now the API costs one request's budget in all. The figure with the
default settings (5 retries, real backoff) is in bench/hf_storm.py: 96 API
calls and 191 s before, 6 calls and ~14 s after.
"""

from __future__ import annotations

import pytest

from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.model import Decision
from llmkube_stager.sources.hf.api import Resolution
from llmkube_stager.sources.hf.source import RunMemo
from tests.harness.canary import HF_TOKEN
from tests.harness.hub import HubFault
from tests.harness.pod import SOURCE_BUDGET
from tests.harness.sample import payload

pytestmark = pytest.mark.floors

REPO = "org/storm"
FILES = [f"model-{i:05d}-of-00008.safetensors" for i in range(1, 9)]
RETRIES = int(SOURCE_BUDGET["LLMKUBE_RETRIES"])


def staged(pod, hub, cdn) -> dict[str, str]:
    files = {rel: payload(4096, i) for i, rel in enumerate(FILES)}
    hub.add_repo(REPO, files)
    env = pod.multi_env(f"hf://{REPO}@main", FILES, HF_ENDPOINT=hub.url, HF_TOKEN=HF_TOKEN)
    pod.stage(env).ok()
    hub.clear_log()
    cdn.clear_log()
    return {**env, "LLMKUBE_REFRESH_POLICY": "OnChange"}


def test_an_api_answering_503_is_asked_one_requests_worth(pod, hub, cdn) -> None:
    env = staged(pod, hub, cdn)
    hub.set_fault("api", HubFault(503))

    run = pod.stage(env).ok()

    # Was 2 x 8 x 3 = 48 with these settings (96 with the defaults).
    assert len(hub.requests("api")) == 1 + RETRIES
    assert len(run.sleeps) == RETRIES
    assert run.count(Decision.KEEP) == len(FILES)
    assert hub.requests("resolve") == [] and cdn.requests() == []


def test_a_final_answer_is_not_asked_again(pod, hub, cdn) -> None:
    """A revision that no longer exists: one 404, remembered for every file."""
    env = staged(pod, hub, cdn)
    hub.set_fault("api", HubFault(404, error_code="RevisionNotFound"))

    run = pod.stage(env).ok()

    assert len(hub.requests("api")) == 1  # was 16: every file, twice
    assert run.sleeps == []
    assert run.count(Decision.KEEP) == len(FILES)


def test_a_hub_that_recovers_within_the_budget_still_serves_the_run(pod, hub, cdn) -> None:
    env = staged(pod, hub, cdn)
    hub.set_fault("api", HubFault(503, times=RETRIES))

    run = pod.stage(env).ok()

    assert [r.status for r in hub.requests("api")] == [503] * RETRIES + [200]
    assert run.count(Decision.REUSE) == len(FILES)


def test_the_remembered_failure_is_a_fresh_final_copy() -> None:
    """The executor tags and prefixes the error it reports; a later file
    must get the hub's answer as it was, not retried again."""
    asked: list[int] = []

    def ask() -> Resolution:
        asked.append(1)
        raise SourceError(
            "hub returned HTTP 503", reason=Reason.SOURCE_UNAVAILABLE, transient=True, answered=True
        )

    memo = RunMemo(2, ask)
    for _ in range(2):
        with pytest.raises(SourceError) as first:
            memo.get()
        first.value.detail = "model missing and revalidation failed: " + first.value.detail
        first.value.file = "a.safetensors"

    with pytest.raises(SourceError) as later:
        memo.get()

    assert len(asked) == 2
    assert later.value is not first.value
    assert (later.value.detail, later.value.file) == ("hub returned HTTP 503", None)
    assert not later.value.transient and later.value.answered
    assert later.value.reason is Reason.SOURCE_UNAVAILABLE
