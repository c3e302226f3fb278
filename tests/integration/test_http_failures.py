"""HTTP failure handling: status codes and retries, timeouts, HF token scope,
out of space and TLS trust (CONTRACT §3, §5; spec §3.2, §3.6).

Retry waits are recorded by the injected `sleep`, never slept.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmkube_stager.errors import REMEDY_RATE_LIMITED_HTTP
from llmkube_stager.logs import Redactor
from tests.harness.disk import record_of
from tests.harness.features import missing_feature
from tests.harness.mounts import tmpfs
from tests.harness.origin import Blackhole, Fault, Origin, closed_port_url
from tests.harness.pod import Run
from tests.harness.sample import payload
from tests.harness.tlsca import make_ca

PATH = "/files/model.gguf"
KIB = 1024
MIB = 1024 * KIB
CANARY = "canary-Zq7x0-not-a-real-token"


def _methods(origin: Origin) -> list[str]:
    return [r.method for r in origin.requests()]


# --- status codes and retries ---------------------------------------------------------


@pytest.mark.parametrize("methods", [("GET", "HEAD"), ("GET",)], ids=["probe", "get"])
def test_429_retry_after_is_honoured_then_succeeds(origin, pod, methods: tuple[str, ...]) -> None:
    data = payload(64 * KIB)
    origin.put(PATH, data)
    origin.set_fault(PATH, Fault(status=429, retry_after="2", times=1, methods=methods))

    run = pod.stage(pod.single_env(origin.url + PATH)).ok()

    assert 2.0 in run.sleeps
    assert [r.status for r in origin.requests()].count(429) == 1
    assert pod.dest().read_bytes() == data
    assert record_of(pod.dest()) == str(len(data))


def test_429_every_time_fails_rate_limited_after_the_retries(origin, pod) -> None:
    origin.put(PATH, payload(64 * KIB))
    origin.set_fault(PATH, Fault(status=429, retry_after="1"))

    run = pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_RETRIES="2")).failed()

    assert run.reason == "ModelSourceRateLimited"
    assert len(origin.requests()) == 3
    assert run.sleeps == [1.0, 1.0]
    # A plain origin's remedy: HF_TOKEN means nothing to it.
    assert run.term["remedy"] == REMEDY_RATE_LIMITED_HTTP, run.term
    assert not pod.dest().exists()


def test_retry_after_beyond_the_max_wait_fails_at_once(origin, pod) -> None:
    origin.put(PATH, payload(64 * KIB))
    origin.set_fault(PATH, Fault(status=429, retry_after="30"))

    run = pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_MAX_RETRY_WAIT="5")).failed()

    assert run.reason == "ModelSourceRateLimited"
    assert len(origin.requests()) == 1
    assert run.sleeps == []


def test_503_is_retried_then_fails_unavailable(origin, pod) -> None:
    origin.put(PATH, payload(64 * KIB))
    origin.set_fault(PATH, Fault(status=503))

    run = pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_RETRIES="2")).failed()

    assert run.reason == "ModelSourceUnavailable"
    assert len(origin.requests()) == 3
    assert len(run.sleeps) == 2
    assert all(0 < s <= 60 for s in run.sleeps)
    assert not pod.dest().exists()


def test_503_retry_after_on_the_get_is_honoured(origin, pod) -> None:
    data = payload(64 * KIB)
    origin.put(PATH, data)
    origin.set_fault(PATH, Fault(status=503, retry_after="3", times=1, methods=("GET",)))

    run = pod.stage(pod.single_env(origin.url + PATH)).ok()

    assert [r.status for r in origin.requests(PATH, "GET")] == [503, 200]
    assert run.sleeps == [3.0]
    assert pod.dest().read_bytes() == data


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("methods", [("GET", "HEAD"), ("GET",)], ids=["probe", "get"])
def test_401_403_fail_unauthorized_without_retries(
    origin, pod, status: int, methods: tuple[str, ...]
) -> None:
    origin.put(PATH, payload(64 * KIB))
    origin.set_fault(PATH, Fault(status=status, methods=methods))

    run = pod.stage(pod.single_env(origin.url + PATH)).failed()

    assert run.reason == "ModelSourceUnauthorized"
    assert [r.status for r in origin.requests()].count(status) == 1
    assert len(origin.requests(method="GET")) <= 1
    assert run.sleeps == []
    assert not pod.dest().exists()


def test_404_fails_not_found_without_retries(origin, pod) -> None:
    run = pod.stage(pod.single_env(origin.url + PATH)).failed()

    assert run.reason == "ModelSourceNotFound"
    assert len(origin.requests()) == 1
    assert run.sleeps == []


def test_presigned_url_with_head_refused_is_fetched_by_get(origin, pod) -> None:
    """A URL signed for GET only answers 403 to HEAD: the GET decides, and the
    signature in the query string never reaches the log."""
    signature = "sekrit0123456789abcdef"
    data = payload(64 * KIB)
    origin.put(PATH, data)
    origin.set_fault(PATH, Fault(status=403, methods=("HEAD",)))
    source = f"{origin.url}{PATH}?X-Amz-Expires=60&X-Amz-Signature={signature}"

    run = pod.stage(pod.single_env(source), redactor=Redactor()).ok()

    (get,) = origin.requests(PATH, "GET")
    assert get.path.endswith(f"X-Amz-Signature={signature}")
    assert pod.dest().read_bytes() == data
    assert record_of(pod.dest()) == str(len(data))
    assert signature not in run.stderr


# --- timeouts and dead origins --------------------------------------------------------


def _dead_host_run(pod, watchdog, mode: str, **timeout: str) -> Run:
    """One retry against a blackhole of `mode` with a 0.5 s `timeout`."""
    with Blackhole(mode) as hole:
        watchdog(10, hole.close)
        return pod.stage(pod.single_env(hole.url + PATH, LLMKUBE_RETRIES="1", **timeout)).failed()


def test_syn_drop_ends_with_the_connect_timeout(pod, watchdog) -> None:
    run = _dead_host_run(pod, watchdog, "syn-drop", LLMKUBE_CONNECT_TIMEOUT="0.5")

    assert run.reason == "ModelSourceUnreachable"
    assert len(run.sleeps) == 1
    # Two attempts of 0.5 s: a correctness bound against unbounded waits.
    assert run.seconds < 10
    assert not pod.dest().exists()


def test_silent_origin_ends_with_the_stall_timeout(pod, watchdog) -> None:
    run = _dead_host_run(pod, watchdog, "accept", LLMKUBE_STALL_TIMEOUT="0.5")

    assert run.reason == "ModelSourceUnreachable"
    assert len(run.sleeps) == 1
    assert run.seconds < 10


@pytest.mark.parametrize("mode", ["syn-drop", "accept"])
def test_body_request_to_a_dead_host_is_bounded_too(origin, pod, watchdog, mode: str) -> None:
    """The probe answers, but the GET is redirected to a host that never
    connects / never answers: the data path has its own connect and stall
    timeouts."""
    origin.put(PATH, payload(64 * KIB))
    with Blackhole(mode) as hole:  # type: ignore[arg-type]
        watchdog(10, hole.close)
        origin.set_fault(PATH, Fault(redirect_to=hole.url + "/blob", methods=("GET",)))
        run = pod.stage(
            pod.single_env(
                origin.url + PATH,
                LLMKUBE_CONNECT_TIMEOUT="0.5",
                LLMKUBE_STALL_TIMEOUT="0.5",
                LLMKUBE_RETRIES="1",
            )
        ).failed()

    assert run.reason == "ModelSourceUnreachable"
    assert len(origin.requests(PATH, "GET")) == 2  # first attempt + one retry
    assert run.seconds < 10
    assert not pod.dest().exists()


def test_closed_port_is_unreachable(pod) -> None:
    run = pod.stage(pod.single_env(closed_port_url() + PATH, LLMKUBE_RETRIES="2")).failed()

    assert run.reason == "ModelSourceUnreachable"
    assert len(run.sleeps) == 2  # transient: retried
    assert run.seconds < 10


# --- Hugging Face token scope (spec §3.2, scenario 90) ---------------------------------


def _auth(record) -> str | None:  # type: ignore[no-untyped-def]
    return record.headers.get("authorization")


@pytest.mark.parametrize("endpoint_suffix", ["", "/", "\n"], ids=["exact", "slash", "newline"])
def test_hf_token_goes_to_the_hf_endpoint_origin(origin, pod, endpoint_suffix: str) -> None:
    data = payload(64 * KIB)
    origin.put(PATH, data)
    env = pod.single_env(
        origin.url + PATH, HF_TOKEN=CANARY, HF_ENDPOINT=origin.url + endpoint_suffix
    )

    run = pod.stage(env, redactor=Redactor()).ok()  # no redaction: the code must not log it

    assert _methods(origin) == ["HEAD", "GET"]
    assert all(_auth(r) == f"Bearer {CANARY}" for r in origin.requests())
    assert pod.dest().read_bytes() == data
    assert CANARY not in run.stderr


@pytest.mark.parametrize("methods", [("GET", "HEAD"), ("GET",)], ids=["probe", "get"])
def test_hf_token_never_follows_a_redirect_to_another_host(
    origin, origin_b, pod, methods: tuple[str, ...]
) -> None:
    data = payload(64 * KIB)
    origin.put(PATH, data, etag='"v1"')
    origin_b.put("/blobs/abc", data, etag='"v1"')
    origin.set_fault(PATH, Fault(redirect_to=origin_b.url + "/blobs/abc", methods=methods))
    env = pod.single_env(origin.url + PATH, HF_TOKEN=CANARY, HF_ENDPOINT=origin.url)

    run = pod.stage(env, redactor=Redactor()).ok()

    assert origin.requests(), "the HF origin was never asked"
    assert all(_auth(r) == f"Bearer {CANARY}" for r in origin.requests())
    assert origin_b.requests(method="GET"), "the redirect target served nothing"
    assert all(_auth(r) is None for r in origin_b.requests())
    assert pod.dest().read_bytes() == data
    assert CANARY not in run.stderr


def test_hf_token_never_goes_to_a_non_hf_origin(origin, origin_b, pod) -> None:
    data = payload(64 * KIB)
    origin_b.put(PATH, data)
    env = pod.single_env(origin_b.url + PATH, HF_TOKEN=CANARY, HF_ENDPOINT=origin.url)

    run = pod.stage(env, redactor=Redactor()).ok()

    assert [r.method for r in origin_b.requests()] == ["HEAD", "GET"]
    assert all(_auth(r) is None for r in origin_b.requests())
    assert origin.requests() == []
    assert pod.dest().read_bytes() == data
    assert CANARY not in run.stderr


def test_hf_token_stays_out_of_failure_logs_and_errors(origin, pod) -> None:
    origin.set_fault(PATH, Fault(status=401))
    env = pod.single_env(origin.url + PATH, HF_TOKEN=CANARY, HF_ENDPOINT=origin.url)

    run = pod.stage(env, redactor=Redactor()).failed()

    assert run.reason == "ModelSourceUnauthorized"
    assert _auth(origin.requests()[0]) == f"Bearer {CANARY}"
    assert CANARY not in run.stderr
    assert run.error is not None and CANARY not in str(run.error)


# --- out of space ---------------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: a real ENOSPC and a real statvfs for the preflight."""
    with tmpfs(tmp_path / "small") as mount_point:
        yield mount_point


def _tmpfs_env(pod, url: str, mount_point: Path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    env = pod.single_env(url)
    env["CACHE_DIR"] = str(mount_point)
    env["MODEL_PATH"] = str(mount_point / "model.gguf")
    return env


def test_space_preflight_refuses_a_file_that_cannot_fit(origin, pod, small_tmpfs: Path) -> None:
    origin.put(PATH, payload(4 * MIB))

    run = pod.stage(_tmpfs_env(pod, origin.url + PATH, small_tmpfs)).failed()

    assert run.reason == "ModelTransferOutOfSpace"
    assert origin.requests(method="GET") == []  # refused before any body transfer
    assert run.sleeps == []
    assert not (small_tmpfs / "model.gguf").exists()


def test_enospc_while_writing_fails_out_of_space(origin, pod, small_tmpfs: Path) -> None:
    data = payload(4 * MIB)
    origin.put(PATH, data)
    origin.set_fault(PATH, Fault(no_content_length=True))  # size unknown: no preflight
    env = _tmpfs_env(pod, origin.url + PATH, small_tmpfs)
    # Pinned: a body of unknown length is complete only by its digest (#10).
    env["MODEL_SHA256"] = hashlib.sha256(data).hexdigest()

    run = pod.stage(env).failed()

    assert run.reason == "ModelTransferOutOfSpace"
    assert len(origin.requests(method="GET")) == 1  # a full disk is not retried
    assert run.sleeps == []
    assert not (small_tmpfs / "model.gguf").exists()


# --- TLS trust (spec §3.6) -------------------------------------------------------------


@pytest.fixture
def tls_origin(tmp_path: Path) -> Iterator[tuple[Origin, Path]]:
    ca = make_ca(tmp_path / "pki")
    with Origin(tls=ca.server_context()) as srv:
        yield srv, ca.ca_pem


def test_untrusted_certificate_fails_untrusted_without_retries(tls_origin, pod) -> None:
    origin, _ca = tls_origin
    origin.put(PATH, payload(64 * KIB))
    env = pod.single_env(origin.url + PATH)
    env["LLMKUBE_CA_DIR"] = None  # the default, /custom-certs
    if os.path.isdir("/custom-certs"):
        missing_feature("/custom-certs exists on this machine; the default CA dir is not empty")

    run = pod.stage(env).failed()

    assert run.reason == "ModelSourceUntrusted"
    assert run.sleeps == []  # a trust failure is not transient
    assert origin.requests() == []  # no request ever went over the failed handshake
    assert not pod.dest().exists()


def test_ca_dir_makes_the_private_ca_trusted(tls_origin, pod, tmp_path) -> None:
    origin, ca = tls_origin
    data = payload(256 * KIB)
    origin.put(PATH, data, etag='"vA"')
    ca_dir = tmp_path / "custom-certs"
    ca_dir.mkdir()
    (ca_dir / "ca.crt").write_bytes(ca.read_bytes())
    (ca_dir / "README").write_text("not a certificate\n")  # ConfigMaps carry other keys

    pod.stage(pod.single_env(origin.url + PATH, LLMKUBE_CA_DIR=str(ca_dir))).ok()

    assert pod.dest().read_bytes() == data
    assert record_of(pod.dest()) == str(len(data))
    assert [r.method for r in origin.requests()] == ["HEAD", "GET"]


def test_hf_token_kept_on_a_relative_redirect_within_the_same_origin(origin, pod) -> None:
    data = payload(64 * KIB)
    origin.put(PATH, data)
    origin.put("/cdn/blob", data)
    origin.set_fault(PATH, Fault(redirect_to="/cdn/blob"))
    env = pod.single_env(origin.url + PATH, HF_TOKEN=CANARY, HF_ENDPOINT=origin.url)

    run = pod.stage(env, redactor=Redactor()).ok()

    assert origin.requests("/cdn/blob", "GET"), "the relative Location was not followed"
    assert all(_auth(r) == f"Bearer {CANARY}" for r in origin.requests())
    assert pod.dest().read_bytes() == data
    assert CANARY not in run.stderr


def test_redirect_loop_ends(origin, pod) -> None:
    origin.set_fault(PATH, Fault(redirect_to=PATH))

    run = pod.stage(pod.single_env(origin.url + PATH)).failed()

    assert run.reason == "ModelSourceRejected"
    assert run.sleeps == []  # a redirect loop is not transient
    assert len(origin.requests()) <= 11  # bounded hops
    assert not pod.dest().exists()
