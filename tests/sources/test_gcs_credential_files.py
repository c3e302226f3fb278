"""#41 item 1: the GOOGLE_APPLICATION_CREDENTIALS files other than a
service-account key (Workload Identity Federation's `external_account`,
file- and URL-sourced, with and without impersonation; `authorized_user`;
`impersonated_service_account`) against the suite's fake Google identity
endpoints (tests/harness/gcs_identity.py) over TLS from a CA of the test's
(LLMKUBE_CA_DIR), through the GCS emulator's front.

Every name the agent looks up and every address it connects to is
recorded by the audit hook (`Run.network`): all loopback. The host
google-auth pins for impersonation (iamcredentials.googleapis.com) is
reached only through the agent's proxy (HTTPS_PROXY), which the suite's
proxy routes to the fake; the proxy's log shows every host asked for.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmkube_stager.sources.gcs.errors import REMEDY_UNAUTHORIZED_GCS
from tests.harness.canary import Secrets, assert_no_leak, outputs_of
from tests.harness.gcs import GceMetadata, GcsFront, gcs_env
from tests.harness.gcs_identity import (
    IAM_HOST,
    OAUTH_HOST,
    OAUTH_PATH,
    STS_PATH,
    SUBJECT_PATH,
    GoogleIdentity,
)
from tests.harness.origin import Blackhole
from tests.harness.pod import Pod, Run
from tests.harness.proxy import ForwardProxy
from tests.harness.sample import KIB, payload
from tests.harness.tlsca import LocalCA, make_ca

pytestmark = pytest.mark.floors

_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
_IAM = "/v1/projects/-/serviceAccounts/model-reader@proj.iam.gserviceaccount.com"
_IAM_CALL = f"{_IAM}:generateAccessToken"

# kind -> (the identity requests in order, the kind of token GCS is sent,
# the pinned hosts asked through the proxy)
_OAUTH, _IAM_PINNED = ("CONNECT", f"{OAUTH_HOST}:443"), ("CONNECT", f"{IAM_HOST}:443")
_FLOWS = {
    "external-file": ([("POST", STS_PATH)], "sts", []),
    "external-url": ([("GET", SUBJECT_PATH), ("POST", STS_PATH)], "sts", []),
    "external-url-json": ([("GET", f"{SUBJECT_PATH}?json=1"), ("POST", STS_PATH)], "sts", []),
    "external-impersonated": ([("POST", STS_PATH), ("POST", _IAM_CALL)], "imp", []),
    "authorized-user": ([("POST", OAUTH_PATH)], "user", [_OAUTH]),
    "impersonated-account": (
        [("POST", OAUTH_PATH), ("POST", _IAM_CALL)],
        "imp",
        [_OAUTH, _IAM_PINNED],
    ),
}


@pytest.fixture
def ca(tmp_path_factory: pytest.TempPathFactory) -> LocalCA:
    hosts = ("127.0.0.1", "localhost", OAUTH_HOST, IAM_HOST)
    return make_ca(tmp_path_factory.mktemp("identity-pki"), hosts)


@pytest.fixture
def identity(ca: LocalCA) -> Iterator[GoogleIdentity]:
    with GoogleIdentity(tls=ca.server_context()) as fake:
        yield fake


@pytest.fixture
def routed_proxy(identity: GoogleIdentity) -> Iterator[ForwardProxy]:
    """The egress proxy: the hosts google-auth pins go to the fake,
    anything else not on loopback is refused (and recorded)."""
    port = int(identity.url.rsplit(":", 1)[1])
    routes = {f"{OAUTH_HOST}:443": port, f"{IAM_HOST}:443": port}
    with ForwardProxy(routes=routes) as proxy:
        yield proxy


@dataclass
class Scene:
    """A gs:// pod with the fakes of one test: GCS's front, no metadata
    server, Google's identity endpoints (TLS from `ca`), the egress proxy,
    and a directory for the credentials (a Secret's mount, outside the
    pod's own directories)."""

    pod: Pod
    gcs: GcsFront
    bucket: str
    metadata: GceMetadata
    identity: GoogleIdentity
    proxy: ForwardProxy
    ca: LocalCA
    secret_dir: Path

    def credentials(self, kind: str) -> Path:
        path, identity = self.secret_dir / "credentials.json", self.identity
        subject = self.secret_dir / "subject-token"
        if kind == "external-file":
            return identity.external_account_file(path, source="file", subject_file=subject)
        if kind in ("external-url", "external-url-json"):
            return identity.external_account_file(path, source=kind.removeprefix("external-"))
        if kind == "external-impersonated":
            return identity.external_account_file(
                path, source="file", subject_file=subject, impersonate=True
            )
        if kind == "authorized-user":
            return identity.authorized_user_file(path)
        return identity.impersonated_file(path)

    def run(self, credentials: Path, *, audit: bool = False, **extra: str) -> Run:
        env = gcs_env(
            self.gcs,
            self.metadata,
            GOOGLE_APPLICATION_CREDENTIALS=str(credentials),
            LLMKUBE_CA_DIR=str(self.ca.ca_dir),
            HTTPS_PROXY=self.proxy.url,
            NO_PROXY="127.0.0.1,localhost",
            **extra,
        )
        pod_env = self.pod.single_env(f"gs://{self.bucket}/model.gguf", **env)
        return self.pod.run(env=pod_env, audit=audit, timeout=120)


@pytest.fixture
def scene(
    pod: Pod,
    gcs: GcsFront,
    gcs_bucket: str,
    no_metadata: GceMetadata,
    identity: GoogleIdentity,
    routed_proxy: ForwardProxy,
    ca: LocalCA,
    tmp_path_factory: pytest.TempPathFactory,
) -> Scene:
    secret_dir = tmp_path_factory.mktemp("secret")
    return Scene(pod, gcs, gcs_bucket, no_metadata, identity, routed_proxy, ca, secret_dir)


def _loads_impersonation_files() -> bool:
    from google.auth import _default

    return hasattr(_default, "_IMPERSONATED_SERVICE_ACCOUNT_TYPE")


def _off_loopback(network: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(e, a) for e, a in network if a.rsplit(":", 1)[0].strip("[]") not in _LOOPBACK_HOSTS]


@pytest.mark.parametrize("kind", list(_FLOWS))
def test_each_credential_file_gets_its_token_on_the_agents_wire_and_nothing_else(
    scene: Scene, kind: str
) -> None:
    """The file's token flow against the fakes (trusted through
    LLMKUBE_CA_DIR only), the token it ends with on every GCS request, no
    project-id lookup (cloudresourcemanager), no name looked up or address
    connected to off loopback, the pinned hosts only through the proxy,
    and no secret of the file or token in any output.
    Failed before (the external_account kinds): google-auth's loader did the
    token exchange on its own `requests` stack, which knows no
    LLMKUBE_CA_DIR (certificate verify failed), to go on to
    cloudresourcemanager.googleapis.com for a project id: exit 3,
    ModelStagerInternalError. The other two kinds passed before."""
    gcs, identity = scene.gcs, scene.identity
    data = payload(48 * KIB)
    gcs.emulator.put(scene.bucket, "model.gguf", data)
    flow, final_kind, pinned_hosts = _FLOWS[kind]
    gcs.accept("never-issued")

    def accept(token: str) -> None:
        if token.startswith(f"ya29.{final_kind}-"):
            with gcs.state.lock:
                gcs.state.tokens = {*(gcs.state.tokens or set()), token}

    identity.state.on_issue = accept
    secrets = Secrets.new("CANARY")

    run = scene.run(scene.credentials(kind), audit=True, **secrets.env)

    if kind == "impersonated-account" and not _loads_impersonation_files():
        # The library floor (google-auth 2.0.0) has no loader for the type:
        # a configuration error naming the variable, nothing asked.
        run.failed("InvalidConfiguration")
        assert "GOOGLE_APPLICATION_CREDENTIALS" in run.compact_term()["message"]
        assert identity.requests == [] and _off_loopback(run.network) == []
        return
    run.ok(files=1, fetched=1)
    assert scene.pod.dest().read_bytes() == data
    assert [(r.method, r.path) for r in identity.requests] == flow
    final = [t for t in identity.issued if t.startswith(f"ya29.{final_kind}-")]
    assert len(final) == 1
    assert {r.bearer for r in gcs.requests()} == {final[0]}
    assert [(r.method, r.target) for r in scene.proxy.requests()] == pinned_hosts
    assert run.network and _off_loopback(run.network) == []
    canaries = {
        **identity.canaries,
        **secrets.named,
        **{f"token-{i}": t for i, t in enumerate(identity.issued)},
    }
    assert_no_leak(outputs_of(run, scene.pod.tmp), canaries)


@pytest.mark.parametrize("status", [400, 401])
@pytest.mark.parametrize("kind", ["external-file", "external-url", "authorized-user"])
def test_a_token_endpoint_that_refuses_is_unauthorized_naming_the_variable(
    scene: Scene, kind: str, status: int
) -> None:
    """STS (or the OAuth endpoint) answers 400/401: ModelSourceUnauthorized,
    exit 4, the GCS remedy, the message naming GOOGLE_APPLICATION_CREDENTIALS,
    no GCS request, no secret shown.
    Failed before (external_account): exit 3, ModelStagerInternalError."""
    scene.gcs.emulator.put(scene.bucket, "model.gguf", b"x" * 100)
    credentials = scene.credentials(kind)
    scene.identity.refuse(status)

    run = scene.run(credentials)

    run.failed("ModelSourceUnauthorized")
    assert run.returncode == 4
    term = run.compact_term()
    assert term["remedy"] == REMEDY_UNAUTHORIZED_GCS
    assert "GOOGLE_APPLICATION_CREDENTIALS" in term["message"]
    assert f"HTTP {status}" in term["message"]
    assert scene.gcs.requests() == []
    assert {r.target for r in scene.proxy.requests()} <= {f"{OAUTH_HOST}:443"}
    assert_no_leak(outputs_of(run, scene.pod.tmp), scene.identity.canaries)


def test_a_token_endpoint_in_trouble_is_unavailable_and_retryable(scene: Scene) -> None:
    """STS answers 503: ModelSourceUnavailable, retryable (exit 1), never
    taken for a refused credential."""
    scene.gcs.emulator.put(scene.bucket, "model.gguf", b"x" * 100)
    credentials = scene.credentials("external-file")
    scene.identity.refuse(503)

    run = scene.run(credentials)

    run.failed("ModelSourceUnavailable", retryable=True)
    assert run.returncode == 1 and "HTTP 503" in run.term["message"]
    assert scene.gcs.requests() == []


def test_a_token_endpoint_that_accepts_and_never_answers_is_left_within_its_bound(
    scene: Scene,
) -> None:
    """The file's token_url accepts the connection and never answers: the
    exchange is left after the token bound (10 s), not LLMKUBE_STALL_TIMEOUT
    (60 s here), as a retryable ModelSourceUnreachable.
    Failed before: google-auth's own `requests` waited (its 120 s), then exit 3."""
    scene.gcs.emulator.put(scene.bucket, "model.gguf", b"x" * 100)
    with Blackhole("accept") as hole:
        credentials = scene.identity.external_account_file(
            scene.secret_dir / "credentials.json",
            source="file",
            subject_file=scene.secret_dir / "subject-token",
            token_url=f"{hole.url}{STS_PATH}",
        )
        started = time.monotonic()
        run = scene.run(credentials, LLMKUBE_STALL_TIMEOUT="60", LLMKUBE_RETRIES="0")
        elapsed_s = time.monotonic() - started
        asked = hole.connections

    assert asked >= 1
    run.failed("ModelSourceUnreachable", retryable=True)
    assert "GOOGLE_APPLICATION_CREDENTIALS" in run.term["message"]
    assert elapsed_s < 10 + 15, elapsed_s
    assert scene.gcs.requests() == []
    assert_no_leak(outputs_of(run, scene.pod.tmp), scene.identity.canaries)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("executable", {"command": "/bin/echo token", "timeout_millis": 5000}),
        ("certificate", {"certificate_config_location": "/var/run/cert.json"}),
    ],
)
def test_a_subject_token_source_the_wire_cannot_serve_is_refused_by_name(
    scene: Scene, key: str, value: dict[str, object]
) -> None:
    """A program google-auth would run, or mutual TLS on the token exchange:
    InvalidConfiguration naming the variable and the source, before any request."""
    path = scene.credentials("external-url")
    doc = json.loads(path.read_text())
    doc["credential_source"] = {key: value}
    path.write_text(json.dumps(doc))

    run = scene.run(path)

    run.failed("InvalidConfiguration")
    message = run.compact_term()["message"]
    assert "GOOGLE_APPLICATION_CREDENTIALS" in message and f"credential_source.{key}" in message
    assert scene.identity.requests == [] and scene.gcs.requests() == []
    assert scene.proxy.requests() == []
