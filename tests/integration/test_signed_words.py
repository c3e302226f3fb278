"""#40 item 8: words. A key model-signing's key verifier does not take is
InvalidConfiguration at start (exit 2, before any request); the order of
certificates in LLMKUBE_SIGNING_CERTS does not make warm starts refuse.
Bundles made by model-signing's own signing API.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.signing import FILES, Signer

PATH = "/org/repo"


def _model(pod: Pod, origin: Origin, bundle: bytes) -> Path:
    for rel, data in FILES.items():
        origin.put(f"{PATH}/{rel}", data)
    origin.put(f"{PATH}/model.sig", bundle)
    return pod.multi(origin.url + PATH + "/", FILES)


def _public_pem(
    key: rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey,
) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


KEYS = {
    "rsa": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
    "ed25519": ed25519.Ed25519PrivateKey.generate,
    "secp256k1": lambda: ec.generate_private_key(ec.SECP256K1()),
}


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_a_key_model_signing_does_not_take_is_a_configuration_error_before_any_request(
    pod: Pod, origin: Origin, tmp_path: Path, kind: str
) -> None:
    _model(pod, origin, Signer(tmp_path / "publisher").sign(FILES))

    run = pod.run(LLMKUBE_SIGNING_KEY=_public_pem(KEYS[kind]()))

    doc = run.failed("InvalidConfiguration").term
    assert run.returncode == 2
    assert "LLMKUBE_SIGNING_KEY" in str(doc["message"])
    assert origin.requests() == []
    assert not any(pod.cache_dir.rglob("*.safetensors"))


def test_the_order_of_certificates_does_not_make_a_warm_start_refuse(
    pod: Pod, origin: Origin, tmp_path: Path
) -> None:
    signer = Signer(tmp_path / "publisher-ca", certs=True)
    other = Signer(tmp_path / "other-ca", certs=True)
    _model(pod, origin, signer.sign(FILES))
    both = signer.ca_pem.decode() + other.ca_pem.decode()
    pod.run(LLMKUBE_SIGNING_CERTS=both).ok(files=len(FILES), fetched=len(FILES))
    origin.clear_log()

    turned = other.ca_pem.decode() + signer.ca_pem.decode()
    warm = pod.run(LLMKUBE_SIGNING_CERTS=turned)

    warm.ok(files=len(FILES), fetched=0, reused=len(FILES))
    assert origin.requests() == []
