"""Redirects of the hub API end as the data path's do (#29 item 10): a
loop, or a redirect to a scheme other than http(s), is ModelSourceRejected,
exit 4, never retried; the hub counts the requests it received.

The fake hub answers its model-info route with the redirect; the real
huggingface_hub client follows it through the agent's httpx client.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.hub import FakeHub, HubFault
from tests.harness.origin import Origin
from tests.harness.pod import SOURCE_BUDGET, Pod, Run
from tests.harness.sample import payload

pytestmark = pytest.mark.floors

REPO = "org/repo"
FILE = "model.safetensors"
# The data path's bound (sources/wire/status.py MAX_REDIRECTS): the first
# request and ten redirects.
MAX_REDIRECTS = 10


def _staged(tmp_path: Path, fault: HubFault) -> tuple[Pod, Run, int]:
    pod = Pod(tmp_path, budget=SOURCE_BUDGET)
    with Origin() as cdn, FakeHub(cdn) as hub:
        hub.add_repo(REPO, {FILE: payload(4096)})
        hub.set_fault("api", fault)
        env = pod.single_env(f"hf://{REPO}@main/{FILE}", name=FILE, HF_ENDPOINT=hub.url)
        run = pod.stage(env)
        api_requests = len(hub.requests("api"))
    return pod, run, api_requests


def test_a_hub_api_redirect_loop_is_rejected_after_ten_redirects_and_never_retried(
    tmp_path: Path,
) -> None:
    """Failed before: ModelSourceUnreachable, retryable, 63 requests (three
    attempts of httpx's 21)."""
    loop = HubFault(302, headers=(("Location", f"/api/models/{REPO}/revision/main"),))
    pod, run, api_requests = _staged(tmp_path, loop)

    assert run.reason == "ModelSourceRejected", f"{run.reason}: {run.detail}"
    assert run.error is not None and not run.error.retryable
    assert run.returncode == 4
    assert api_requests == MAX_REDIRECTS + 1
    assert "redirect" in run.detail
    assert not (pod.cache_dir / FILE).exists()


def test_a_hub_api_redirect_to_ftp_is_rejected_at_once(tmp_path: Path) -> None:
    """Failed before: ModelSourceUnreachable, retryable, 3 requests."""
    ftp = HubFault(302, headers=(("Location", "ftp://127.0.0.1:21/models/secret?x=1"),))
    pod, run, api_requests = _staged(tmp_path, ftp)

    assert run.reason == "ModelSourceRejected", f"{run.reason}: {run.detail}"
    assert run.error is not None and not run.error.retryable
    assert api_requests == 1
    detail = run.detail
    assert "ftp://127.0.0.1:21/..." in detail, detail
    assert "secret" not in detail, detail
    assert not (pod.cache_dir / FILE).exists()
