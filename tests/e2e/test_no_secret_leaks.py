"""Canary tokens over every failure path the CLI has (CONTRACT §5: no token,
key, signature or URL credential in the message, the logs, stdout, or any file
the agent writes), and the HF token sent only where it belongs (CONTRACT §3).

Each canary is random, so finding any 12-character piece of one in an output
is a leak, whole or truncated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.harness.canary import Secrets, assert_no_leak, outputs_of
from tests.harness.contract import exit_code_of
from tests.harness.origin import Blackhole, Fault, Origin, closed_port_url
from tests.harness.pod import Pod, Run
from tests.harness.proxy import ForwardProxy
from tests.harness.sample import gguf_like
from tests.harness.tlsca import tls_server_context

pytestmark = pytest.mark.e2e

SECRETS = Secrets.new("CANARY")
HF_TOKEN = SECRETS.hf_token
AWS_SECRET_ACCESS_KEY = SECRETS.aws_secret
AWS_SESSION_TOKEN = SECRETS.aws_session
URL_PASSWORD = SECRETS.url_password
URL_SIGNATURE = SECRETS.url_signature
URL_TOKEN = SECRETS.url_token
PROXY_PASSWORD = SECRETS.proxy_password
ENV_SECRETS = SECRETS.env
CANARIES = SECRETS.named

MODEL = "/m/model.gguf"
DATA = gguf_like(600_000, seed=4)


def secret_url(base: str, path: str, *, query: bool = True) -> str:
    """`base` + `path` with userinfo credentials and a signed query string."""
    parts = urlsplit(base)
    netloc = f"llmkube:{URL_PASSWORD}@{parts.netloc}"
    q = f"X-Amz-Signature={URL_SIGNATURE}&token={URL_TOKEN}" if query else ""
    return urlunsplit((parts.scheme, netloc, path, q, ""))


def assert_clean(pod: Pod, run: Run, *origins: Origin) -> None:
    """No canary in stdout, stderr, the termination file, or any file (content
    or name) the agent left under the pod's directories; no HF/AWS canary in a
    request header to an origin that is not the HF endpoint."""
    assert_no_leak(outputs_of(run, pod.tmp), CANARIES)
    for srv in origins:
        for req in srv.requests():
            for header, value in req.headers.items():
                for name, canary in ENV_SECRETS.items():
                    assert canary not in value, f"{name} was sent in {header} to {req.path}"


# -- every path, one canary-laden environment ----------------------------------------


@dataclass
class Scenario:
    args: tuple[str, ...] = ("stage",)
    env: dict[str, str | None] = field(default_factory=dict)
    exit_code: int | None = None  # None: the contract's for `reason`
    reason: str | None = None

    @property
    def expected_exit_code(self) -> int:
        if self.exit_code is not None:
            return self.exit_code
        assert self.reason is not None
        return exit_code_of(self.reason)


Setup = Callable[[Pod, Origin, ExitStack], Scenario]


def _success(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    origin.put(MODEL, DATA)
    pod.single(secret_url(origin.url, MODEL))
    return Scenario(exit_code=0, reason="ModelTransferSucceeded")


def _status(status: int, reason: str) -> Setup:
    def setup(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
        origin.put(MODEL, DATA)
        origin.set_fault(MODEL, Fault(status=status, retry_after="0"))
        pod.single(secret_url(origin.url, MODEL))
        return Scenario(reason=reason)

    return setup


def _not_found(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    pod.single(secret_url(origin.url, MODEL))
    return Scenario(reason="ModelSourceNotFound")


def _not_found_json_logs(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    pod.single(secret_url(origin.url, MODEL))
    return Scenario(env={"LLMKUBE_LOG_FORMAT": "json"}, reason="ModelSourceNotFound")


def _closed_port(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    pod.single(secret_url(closed_port_url(), MODEL))
    return Scenario(reason="ModelSourceUnreachable")


def _blackhole(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    hole = stack.enter_context(Blackhole("accept"))
    pod.single(secret_url(hole.url, MODEL))
    return Scenario(env={"LLMKUBE_RETRIES": "0"}, reason="ModelSourceUnreachable")


def _tls_untrusted(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    ctx, _ = tls_server_context(pod.tmp)
    srv = stack.enter_context(Origin(tls=ctx))
    srv.put(MODEL, DATA)
    empty = pod.tmp / "no-certs"
    empty.mkdir()
    pod.single(secret_url(srv.url, MODEL))
    return Scenario(env={"LLMKUBE_CA_DIR": str(empty)}, reason="ModelSourceUntrusted")


def _hang_up_then_resume(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    origin.put(MODEL, DATA)
    origin.set_fault(MODEL, Fault(truncate_after=100_000, times=1, methods=("GET",)))
    pod.single(secret_url(origin.url, MODEL))
    return Scenario(exit_code=0, reason="ModelTransferSucceeded")


def _redirect_to_presigned(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    """A CDN-style redirect to a signed URL whose target refuses (403)."""
    signed = f"{origin.url}/cdn/blob?X-Amz-Signature={URL_SIGNATURE}&token={URL_TOKEN}"
    origin.set_fault(MODEL, Fault(redirect_to=signed))
    origin.set_fault("/cdn/blob", Fault(status=403))
    pod.single(origin.url + MODEL)
    return Scenario(reason="ModelSourceUnauthorized")


def _multi_not_found(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    origin.put("/repo/config.json", b"{}")
    pod.multi(secret_url(origin.url, "/repo/", query=False), ["config.json", "gone.bin"])
    return Scenario(reason="ModelSourceNotFound")


def _invalid_config(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    pod.single(secret_url(origin.url, MODEL))
    return Scenario(
        env={"LLMKUBE_CONNECT_TIMEOUT": "abc"}, exit_code=2, reason="InvalidConfiguration"
    )


def _invalid_source(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    pod.single(f"ftp://llmkube:{URL_PASSWORD}@127.0.0.1/m.gguf?token={URL_TOKEN}")
    return Scenario(exit_code=2, reason="InvalidConfiguration")


def _invalid_port(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    pod.single(secret_url("http://127.0.0.1:99999999", MODEL))
    return Scenario(exit_code=2, reason="InvalidConfiguration")


def _invalid_file_set(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    pod.multi(secret_url(origin.url, "/repo/", query=False), ["config.json", "../escape"])
    return Scenario(exit_code=2, reason="InvalidFileSet")


def _plan(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    origin.put(MODEL, DATA)
    pod.single(secret_url(origin.url, MODEL))
    return Scenario(args=("plan",), exit_code=0)


def _plan_json_probe(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    origin.put("/repo/config.json", b"{}")
    pod.multi(secret_url(origin.url, "/repo/", query=False), ["config.json", "gone.bin"])
    # A failed probe fails the plan (#46 item 6): its error line is checked too.
    return Scenario(args=("plan", "--json", "--probe"), exit_code=4)


def _plan_probe_single_signed(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    pod.single(secret_url(origin.url, MODEL))  # the probe gets a 404
    return Scenario(args=("plan", "--probe"), exit_code=4)


def _plan_invalid(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    pod.single(secret_url(origin.url, MODEL))
    return Scenario(args=("plan", "--json"), env={"LLMKUBE_STALL_TIMEOUT": "-1"}, exit_code=2)


def _tolerated_values_holding_secrets(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    """Values the scripts tolerated are echoed in a warning (#14):
    never a secret, whole or cut."""
    origin.put(MODEL, DATA)
    pod.single(secret_url(origin.url, MODEL))
    env: dict[str, str | None] = {
        "LLMKUBE_REFRESH_POLICY": AWS_SESSION_TOKEN,
        "PROGRESS_INTERVAL": HF_TOKEN,
        "LLMKUBE_PREFETCH_STAGER": AWS_SECRET_ACCESS_KEY,
    }
    return Scenario(env=env, exit_code=0, reason="ModelTransferSucceeded")


def _proxy(password: str, reason: str, exit_code: int | None = None) -> Setup:
    """Through a proxy that wants `agent:<password>`; the pod sends PROXY_PASSWORD."""

    def setup(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
        origin.put(MODEL, DATA)
        proxy = stack.enter_context(ForwardProxy(credentials=("agent", password)))
        pod.single(secret_url(origin.url, MODEL))
        url = f"http://agent:{PROXY_PASSWORD}@127.0.0.1:{proxy.port}"
        return Scenario(env={"http_proxy": url}, exit_code=exit_code, reason=reason)

    return setup


def _proxy_down(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    origin.put(MODEL, DATA)
    pod.single(secret_url(origin.url, MODEL))
    dead = closed_port_url().replace("http://", f"http://agent:{PROXY_PASSWORD}@")
    return Scenario(env={"HTTP_PROXY": dead}, reason="ModelSourceUnreachable")


def _proxy_invalid(pod: Pod, origin: Origin, stack: ExitStack) -> Scenario:
    pod.single(secret_url(origin.url, MODEL))
    bad = f"socks5://agent:{PROXY_PASSWORD}@127.0.0.1:1080"
    return Scenario(env={"HTTPS_PROXY": bad}, exit_code=2, reason="InvalidConfiguration")


SCENARIOS: dict[str, Setup] = {
    "proxy-success": _proxy(PROXY_PASSWORD, "ModelTransferSucceeded", exit_code=0),
    # #22 item 6: a 407 is the proxy credentials, exit 4.
    "proxy-407": _proxy("another-password", "ModelSourceUnauthorized"),
    "proxy-down": _proxy_down,
    "proxy-invalid": _proxy_invalid,
    "success": _success,
    "http-401": _status(401, "ModelSourceUnauthorized"),
    "http-403": _status(403, "ModelSourceUnauthorized"),
    "http-404": _not_found,
    "http-404-json-logs": _not_found_json_logs,
    "http-429": _status(429, "ModelSourceRateLimited"),
    "http-500": _status(500, "ModelSourceUnavailable"),
    "closed-port": _closed_port,
    "blackhole": _blackhole,
    "tls-untrusted": _tls_untrusted,
    "hang-up-then-resume": _hang_up_then_resume,
    "redirect-to-presigned-403": _redirect_to_presigned,
    "multi-file-404": _multi_not_found,
    "invalid-config": _invalid_config,
    "invalid-source-scheme": _invalid_source,
    "invalid-source-port": _invalid_port,
    "invalid-file-set": _invalid_file_set,
    "plan": _plan,
    "plan-json-probe": _plan_json_probe,
    "plan-probe-404": _plan_probe_single_signed,
    "plan-invalid-config": _plan_invalid,
    "tolerated-values-holding-secrets": _tolerated_values_holding_secrets,
}


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


@pytest.mark.parametrize("setup", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_no_canary_in_any_output(pod: Pod, origin: Origin, stack: ExitStack, setup: Setup) -> None:
    # At the debug level (#46 item 5), which adds a line for each request.
    pod.env.update({**ENV_SECRETS, "LLMKUBE_LOG_LEVEL": "debug"})
    scenario = setup(pod, origin, stack)
    run = pod.run(*scenario.args, env=scenario.env, timeout=30)
    assert run.returncode == scenario.expected_exit_code, str(run)
    if scenario.reason is not None:
        assert run.term["reason"] == scenario.reason, str(run)
    assert run.stdout or run.stderr, "nothing was printed: the check would prove nothing"
    assert_clean(pod, run, origin)


def test_secrets_given_as_flags_are_redacted_too(pod: Pod, origin: Origin) -> None:
    """The secret flags feed the redactor like the environment does."""
    pod.single(origin.url + MODEL)
    run = pod.run(
        "stage",
        "--hf-token",
        HF_TOKEN,
        "--aws-secret-access-key",
        AWS_SECRET_ACCESS_KEY,
        # A value the agent echoes back: it must come out redacted.
        "--llmkube-connect-timeout",
        f"{AWS_SECRET_ACCESS_KEY}",
    )
    assert run.returncode == 2, str(run)
    assert "LLMKUBE_CONNECT_TIMEOUT" in run.stderr
    assert_clean(pod, run, origin)


# -- the HF token: live, but only where it belongs -----------------------------------

# A file on the mirror that is not repo-shaped: plain HTTP, with the token
# (as the scripts sent it to the HF_ENDPOINT origin).
HF_PATH = "/mirror/files/model.gguf"


@pytest.mark.parametrize("status", [None, 401, 404], ids=["success", "401", "404"])
def test_hf_token_is_sent_to_the_hf_endpoint_but_never_shown(
    pod: Pod, origin: Origin, status: int | None
) -> None:
    origin.put(HF_PATH, DATA)
    if status is not None:
        origin.set_fault(HF_PATH, Fault(status=status))
    pod.env.update(ENV_SECRETS, HF_ENDPOINT=origin.url)
    dest = pod.single(origin.url + HF_PATH)
    run = pod.run("stage")
    assert run.returncode == (0 if status is None else 4), str(run)
    requests = origin.requests(HF_PATH)
    assert requests
    # The canary was live: the origin got it, so any echo of it would show below.
    for req in requests:
        assert req.headers.get("authorization") == f"Bearer {HF_TOKEN}", req
    assert dest.exists() is (status is None)
    assert_clean(pod, run)  # the endpoint may get the token; outputs and files may not


def test_hf_token_to_a_mirror_without_the_repo_is_never_shown(pod: Pod, origin: Origin) -> None:
    """A repo-shaped URL on HF_ENDPOINT whose repo the mirror does not have:
    every request to the mirror may carry the token, no output may show it."""
    pod.env.update(ENV_SECRETS, HF_ENDPOINT=origin.url)
    pod.single(origin.url + "/org/repo/resolve/main/model.gguf")
    run = pod.run("stage")
    assert run.returncode == 4, str(run)  # ModelSourceNotFound
    sent = [r.headers["authorization"] for r in origin.requests() if "authorization" in r.headers]
    assert sent, "the token never reached the mirror: the canary proves nothing"
    assert set(sent) == {f"Bearer {HF_TOKEN}"}
    assert_clean(pod, run)  # the mirror may get the token; outputs and files may not


def test_hf_token_not_sent_to_other_origins(pod: Pod, origin: Origin) -> None:
    origin.put(MODEL, DATA)
    pod.env.update(ENV_SECRETS)
    pod.single(origin.url + MODEL)
    run = pod.run("stage")
    assert run.returncode == 0, str(run)
    assert origin.requests(MODEL)
    for req in origin.requests():
        assert "authorization" not in req.headers, req
    assert_clean(pod, run, origin)


def test_hf_token_not_forwarded_across_a_redirect(pod: Pod, origin: Origin) -> None:
    with Origin() as cdn:
        cdn.put("/blob/model.gguf", DATA)
        origin.set_fault(HF_PATH, Fault(redirect_to=cdn.url + "/blob/model.gguf"))
        pod.env.update(ENV_SECRETS, HF_ENDPOINT=origin.url, LLMKUBE_LOG_LEVEL="debug")
        dest = pod.single(origin.url + HF_PATH)
        run = pod.run("stage")
        assert run.returncode == 0, str(run)
        assert dest.read_bytes() == DATA
        # The debug line of the redirect names where it went; the next, that
        # no credentials went there.
        assert run.has_line(f"| Location: {cdn.url}/blob/model.gguf"), run.stderr
        assert any(x.startswith(f"> GET {cdn.url}/") and "auth:" not in x for x in run.lines)
        hf_requests = origin.requests(HF_PATH)
        assert hf_requests
        assert all(r.headers.get("authorization") == f"Bearer {HF_TOKEN}" for r in hf_requests)
        assert cdn.requests(method="GET"), "the redirect was not followed"
        for req in cdn.requests():
            assert "authorization" not in req.headers, f"token forwarded to another host: {req}"
        assert_clean(pod, run, cdn)
