"""#40 item 8: words. A key model-signing's key verifier does not take is
InvalidConfiguration at start (exit 2, before any request); the order of
certificates in LLMKUBE_SIGNING_CERTS, or a second root added during a
rotation, does not make warm starts refuse; a bundle over the size bound
is refused with a remedy about the bundle. Bundles made by model-signing's
own signing API.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from tests.harness.origin import Origin
from tests.harness.pod import Pod, as_fuse
from tests.harness.signing import FILES, REASON, Signer, refused

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


def test_a_root_added_during_a_rotation_does_not_make_a_warm_start_refuse(
    pod: Pod, origin: Origin, tmp_path: Path
) -> None:
    """The model was verified against the old root alone; the Secret then
    holds the old root and the new one. The kept bundle, verified against
    the configured roots, still vouches: the warm start, a reader that may
    not write and `verify` pass offline. With the old root gone it does
    not, and every reader refuses."""
    signer = Signer(tmp_path / "publisher-ca", certs=True)
    new = Signer(tmp_path / "new-ca", certs=True)
    _model(pod, origin, signer.sign(FILES))
    pod.run(LLMKUBE_SIGNING_CERTS=signer.ca_pem.decode()).ok(files=len(FILES), fetched=len(FILES))
    origin.clear_log()

    both = signer.ca_pem.decode() + new.ca_pem.decode()
    pod.run(LLMKUBE_SIGNING_CERTS=both).ok(files=len(FILES), fetched=0, reused=len(FILES))
    pod.stage(fs=as_fuse, LLMKUBE_SIGNING_CERTS=both).ok(
        files=len(FILES), fetched=0, reused=len(FILES)
    )
    assert pod.run("verify", LLMKUBE_SIGNING_CERTS=both).returncode == 0
    assert origin.requests() == []

    reader = pod.stage(fs=as_fuse, LLMKUBE_SIGNING_CERTS=new.ca_pem.decode())
    reader.failed(REASON)
    assert pod.run("verify", LLMKUBE_SIGNING_CERTS=new.ca_pem.decode()).returncode == 4
    assert origin.requests() == []


@pytest.mark.parametrize("where", ["http", "local"])
def test_a_bundle_over_the_size_bound_gets_a_remedy_about_the_bundle(
    pod: Pod, origin: Origin, tmp_path: Path, where: str
) -> None:
    signer = Signer(tmp_path / "publisher")
    huge = b"{" + b" " * (64 << 20) + b"}"
    if where == "http":
        cache_dir = _model(pod, origin, huge)
    else:
        model = tmp_path / "src"
        for rel, data in FILES.items():
            (model / rel).parent.mkdir(parents=True, exist_ok=True)
            (model / rel).write_bytes(data)
        (model / "model.sig").write_bytes(huge)
        cache_dir = pod.multi(str(model), FILES)

    run = pod.run(**signer.anchor_env)

    doc = refused(run, cache_dir, sorted(FILES), "larger than 64 MiB")
    assert "MODEL_FILES" not in str(doc["remedy"]), doc["remedy"]
    assert "bundle" in str(doc["remedy"]), doc["remedy"]
