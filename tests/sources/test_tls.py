"""TLS trust (spec §3.6, §11.2 row 1): LLMKUBE_CA_DIR is ADDED to the system
roots, never replacing them, for the HTTP data path, the hub API through
huggingface_hub, and botocore (a PEM bundle file). Servers use a CA
generated per test.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmkube_stager.errors import REMEDY_UNTRUSTED
from llmkube_stager.sources.wire.tls import make_ssl_context, write_ca_bundle
from tests.harness.canary import HF_TOKEN, leaks
from tests.harness.features import missing_feature
from tests.harness.hub import FakeHub
from tests.harness.origin import Origin
from tests.harness.s3front import S3Front
from tests.harness.sample import payload
from tests.harness.seaweed import READER, SeaweedS3
from tests.harness.tlsca import LocalCA, make_ca

KIB = 1024
PATH = "/files/model.gguf"


@pytest.fixture
def ca(tmp_path: Path) -> LocalCA:
    return make_ca(tmp_path / "pki")


@pytest.fixture
def https_origin(ca: LocalCA) -> Iterator[Origin]:
    with Origin(tls=ca.server_context()) as origin:
        yield origin


def system_roots() -> list[bytes]:
    return list(ssl.create_default_context().get_ca_certs(binary_form=True))


# -- the HTTP data path ----------------------------------------------------------------------------


def test_untrusted_origin_fails_at_once_without_retries(pod, https_origin) -> None:
    https_origin.put(PATH, payload(8 * KIB))

    run = pod.stage(pod.single_env(https_origin.url + PATH)).failed("ModelSourceUntrusted")

    assert run.sleeps == []  # a certificate problem is not transient
    assert not run.has_line("retrying")
    assert https_origin.requests() == []  # no request got past the handshake
    assert not run.error.retryable
    assert not pod.dest().exists()


def test_untrusted_termination_matches_the_controller_signature(pod, https_origin) -> None:
    https_origin.put(PATH, payload(8 * KIB))

    run = pod.run(env=pod.single_env(https_origin.url + PATH))

    doc = run.failed("ModelSourceUntrusted", retryable=False).term
    # spec §11.2: the controller's first signature is a lowercase substring match.
    assert "certificate verify failed" in doc["message"].lower()
    # Outside the operator the remedy names the variable (#46 item 6); under
    # it, the operator's constant with its --ca-cert-configmap.
    assert "LLMKUBE_CA_DIR" in doc["remedy"] and "--ca-cert-configmap" not in doc["remedy"]
    operator = pod.run(env=pod.single_env(https_origin.url + PATH), LLMKUBE_REMEDY_WORDS="operator")
    assert operator.failed("ModelSourceUntrusted").term["remedy"] == REMEDY_UNTRUSTED


def test_trusted_with_the_ca_dir(pod, https_origin, ca) -> None:
    data = payload(96 * KIB)
    https_origin.put(PATH, data)

    pod.stage(pod.single_env(https_origin.url + PATH, LLMKUBE_CA_DIR=str(ca.ca_dir))).ok()

    assert pod.dest().read_bytes() == data
    assert [r.method for r in https_origin.requests()] == ["HEAD", "GET"]


# -- the trust store itself ------------------------------------------------------------------------


def test_ca_dir_is_added_to_the_system_roots(ca) -> None:
    roots = system_roots()
    context = make_ssl_context(str(ca.ca_dir))
    loaded = context.get_ca_certs(binary_form=True)
    custom = ssl.PEM_cert_to_DER_cert(ca.ca_pem.read_text())
    assert custom in loaded
    if not roots:
        missing_feature("this system has no CA store loaded into default contexts")
    assert set(roots) <= set(loaded)
    assert len(loaded) == len(roots) + 1


def test_non_certificate_entries_of_the_ca_dir_are_skipped(ca) -> None:
    (ca.ca_dir / "README").write_text("not a certificate\n")
    (ca.ca_dir / ".hidden.pem").write_text("garbage\n")
    (ca.ca_dir / "subdir").mkdir()

    context = make_ssl_context(str(ca.ca_dir))

    custom = ssl.PEM_cert_to_DER_cert(ca.ca_pem.read_text())
    assert custom in context.get_ca_certs(binary_form=True)
    assert len(context.get_ca_certs()) == len(system_roots()) + 1


def test_ca_bundle_file_is_the_system_bundle_plus_the_custom_certs(ca, tmp_path) -> None:
    path = write_ca_bundle(str(ca.ca_dir))

    assert path is not None
    try:
        bundle = Path(path).read_bytes()
    finally:
        Path(path).unlink()
    assert ca.ca_pem.read_bytes().strip() in bundle
    system = ssl.get_default_verify_paths().cafile
    if system and Path(system).is_file():
        assert bundle.startswith(Path(system).read_bytes().strip())
    # No extra certificate: no file at all (#13 item 3, a read-only root has no /tmp).
    assert write_ca_bundle(str(tmp_path / "no-such-dir")) is None


# -- the hub API through huggingface_hub, and its CDN ----------------------------------------------


@pytest.fixture
def tls_hub(ca: LocalCA) -> Iterator[FakeHub]:
    with (
        Origin(tls=ca.server_context()) as cdn,
        FakeHub(cdn, tls=ca.server_context(), tokens={HF_TOKEN}) as hub,
    ):
        yield hub


def hub_env(pod, hub: FakeHub, **extra: str) -> dict[str, str]:
    return pod.multi_env(
        "hf://org/repo@main",
        ["model.safetensors", "config.json"],
        **{"HF_ENDPOINT": hub.url, "HF_TOKEN": HF_TOKEN, **extra},
    )


def test_hub_over_tls_with_the_ca_dir(pod, tls_hub, ca) -> None:
    files = {"model.safetensors": payload(64 * KIB), "config.json": b"{}"}
    tls_hub.add_repo("org/repo", files)

    pod.stage(hub_env(pod, tls_hub, LLMKUBE_CA_DIR=str(ca.ca_dir))).ok()

    for rel, data in files.items():
        assert pod.dest(rel).read_bytes() == data
    assert tls_hub.url.startswith("https://") and tls_hub.cdn.url.startswith("https://")
    assert len(tls_hub.requests("api")) == 1 and len(tls_hub.cdn.requests()) == 1


def test_hub_over_tls_without_the_ca_dir_is_untrusted(pod, tls_hub) -> None:
    tls_hub.add_repo("org/repo", {"model.safetensors": payload(4 * KIB), "config.json": b"{}"})

    run = pod.run(env=hub_env(pod, tls_hub))

    run.failed("ModelSourceUntrusted", retryable=False)
    assert tls_hub.requests() == []
    assert leaks(HF_TOKEN, run.outputs) == []


def test_cdn_signed_by_an_unknown_ca_is_untrusted(pod, ca, tmp_path) -> None:
    other = make_ca(tmp_path / "other-pki")
    with (
        Origin(tls=other.server_context()) as cdn,
        FakeHub(cdn, tls=ca.server_context(), tokens={HF_TOKEN}) as hub,
    ):
        hub.add_repo("org/repo", {"model.safetensors": payload(4 * KIB), "config.json": b"{}"})

        run = pod.stage(hub_env(pod, hub, LLMKUBE_CA_DIR=str(ca.ca_dir))).failed(
            "ModelSourceUntrusted"
        )

        assert len(hub.requests("api")) == 1
        assert cdn.requests() == []
        assert run.sleeps == []


# -- S3 over TLS (botocore with the bundle file) ---------------------------------------------------


@pytest.fixture
def tls_s3(s3: SeaweedS3, ca: LocalCA) -> Iterator[S3Front]:
    """SeaweedFS behind a front that speaks TLS with this test's CA."""
    with S3Front(s3.s3_port, tls=ca.server_context()) as front:
        yield front


def s3_env(pod, front: S3Front, key: str, **extra: str) -> dict[str, str]:
    return pod.single_env(
        key,
        AWS_ENDPOINT_URL=front.url,
        AWS_REGION="us-east-1",
        AWS_ACCESS_KEY_ID=READER[0],
        AWS_SECRET_ACCESS_KEY=READER[1],
        **extra,
    )


def test_s3_over_tls_with_the_ca_dir(pod, s3, bucket, tls_s3, ca) -> None:
    data = payload(48 * KIB)
    s3.put(bucket, "m.gguf", data)

    pod.stage(s3_env(pod, tls_s3, f"s3://{bucket}/m.gguf", LLMKUBE_CA_DIR=str(ca.ca_dir))).ok()

    assert pod.dest().read_bytes() == data
    methods = [r.method for r in tls_s3.requests() if r.path == f"/{bucket}/m.gguf"]
    assert methods == ["HEAD", "GET"]


def test_s3_over_tls_without_the_ca_dir_is_untrusted(pod, s3, bucket, tls_s3) -> None:
    s3.put(bucket, "m.gguf", payload(4 * KIB))

    run = pod.stage(s3_env(pod, tls_s3, f"s3://{bucket}/m.gguf")).failed("ModelSourceUntrusted")

    assert tls_s3.requests() == []
    assert run.sleeps == []
