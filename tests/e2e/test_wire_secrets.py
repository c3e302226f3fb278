"""Canary secrets over the failure paths of #22 items 1, 5, 7 and 8: an
encoded body (from the origin, and from a signed redirect target), a
rate-limit window, a gated repository (the token is live on the HF origin)
and redirects to foreign schemes whose Location carries credentials, a
signature and a data: payload. The CLI runs as a subprocess with every
secret-bearing variable set to a canary (tests/harness/canary.py); no
piece of any canary may appear in stdout, the log, the termination message
or a file the agent left."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.harness.canary import Secrets, assert_no_leak, outputs_of
from tests.harness.origin import Fault, Origin
from tests.harness.pod import Pod
from tests.harness.sample import gguf_like

pytestmark = pytest.mark.e2e

SECRETS = Secrets.new("WIRE")
MODEL = "/m/model.gguf"
RESOLVE = "/org/repo/resolve/main/model.gguf"
DATA = gguf_like(300_000, seed=5)


def secret_url(base: str, path: str) -> str:
    parts = urlsplit(base)
    netloc = f"llmkube:{SECRETS.url_password}@{parts.netloc}"
    query = f"X-Amz-Signature={SECRETS.url_signature}&token={SECRETS.url_token}"
    return urlunsplit((parts.scheme, netloc, path, query, ""))


def _run(pod: Pod, source: str, **env: str):  # type: ignore[no-untyped-def]
    pod.env.update(SECRETS.env)
    pod.single(source)
    return pod.run("stage", env=env, timeout=30)


def test_an_encoded_body_prints_no_secret(pod: Pod, origin: Origin) -> None:
    origin.put(MODEL, DATA)
    origin.set_fault(MODEL, Fault(content_encoding="gzip", headers=(("Via", "1.1 edge"),)))

    run = _run(pod, secret_url(origin.url, MODEL))

    assert run.returncode == 4 and run.term["reason"] == "ModelSourceRejected", str(run)
    assert "Content-Encoding: gzip" in run.term["message"]
    assert_no_leak(outputs_of(run, pod.tmp), SECRETS.named)


def test_an_encoded_signed_redirect_target_prints_no_secret(pod: Pod, origin: Origin) -> None:
    """The CDN's signed URL (the signature in its query) is named as the hop."""
    with Origin() as cdn:
        cdn.put("/blob", DATA)
        cdn.set_fault("/blob", Fault(content_encoding="br"))
        signed = f"{cdn.url}/blob?X-Amz-Signature={SECRETS.url_signature}"
        origin.set_fault(MODEL, Fault(redirect_to=signed))

        run = _run(pod, secret_url(origin.url, MODEL))

        assert run.returncode == 4 and run.term["reason"] == "ModelSourceRejected", str(run)
        assert "the redirect target" in run.term["message"]
    assert_no_leak(outputs_of(run, pod.tmp), SECRETS.named)


@pytest.mark.parametrize(
    "location",
    [
        "ftp://llmkube:{password}@127.0.0.1:21/m.gguf?X-Amz-Signature={signature}",
        "ftps://127.0.0.1:990/m.gguf?token={token}",
        "data:application/octet-stream,{token}",
        "file:///var/run/secrets/{token}",
    ],
    ids=["ftp", "ftps", "data", "file"],
)
def test_a_foreign_redirect_prints_no_secret(pod: Pod, origin: Origin, location: str) -> None:
    target = location.format(
        password=SECRETS.url_password, signature=SECRETS.url_signature, token=SECRETS.url_token
    )
    origin.set_fault(MODEL, Fault(redirect_to=target))

    run = _run(pod, secret_url(origin.url, MODEL))

    assert run.returncode == 4 and run.term["reason"] == "ModelSourceRejected", str(run)
    assert_no_leak(outputs_of(run, pod.tmp), SECRETS.named)


def test_a_rate_limit_window_prints_no_secret(pod: Pod, origin: Origin) -> None:
    origin.put(MODEL, DATA)
    origin.set_fault(MODEL, Fault(status=429, headers=(("RateLimit", '"api";r=0;t=55'),)))

    run = _run(pod, secret_url(origin.url, MODEL), LLMKUBE_MAX_RETRY_WAIT="5")

    assert run.returncode == 1 and run.term["reason"] == "ModelSourceRateLimited", str(run)
    assert run.term["retryAfterSeconds"] == 55
    assert_no_leak(outputs_of(run, pod.tmp), SECRETS.named)


def test_a_gated_repo_prints_no_token(pod: Pod, origin: Origin) -> None:
    """The HF origin gets the token (so it is live) and answers GatedRepo."""
    origin.put(RESOLVE, DATA)
    origin.set_fault(RESOLVE, Fault(status=403, headers=(("X-Error-Code", "GatedRepo"),)))

    run = _run(pod, origin.url + RESOLVE, HF_ENDPOINT=origin.url)

    assert run.returncode == 4 and run.term["reason"] == "ModelSourceUnauthorized", str(run)
    assert "gated" in run.term["remedy"]
    sent = {r.headers.get("authorization") for r in origin.requests(RESOLVE)}
    assert sent == {f"Bearer {SECRETS.hf_token}"}, "the canary was not live"
    assert_no_leak(outputs_of(run, pod.tmp), SECRETS.named)
