"""Signed models for the tests of #34: keys and certificate chains made
here, bundles made by model-signing's own signing API (its elliptic-key
and certificate signers, offline), never by the agent's code.

`Signer.sign(files)` writes the files into a scratch directory under the
test's tmp, signs it and returns the bundle's bytes (the statement names
each file by its path relative to that directory, as a publisher's would).

What the signed-model tests share: a model of four files (`FILES`), the
refusal every tampered model must end in (`refused`: exit 4,
ModelSignatureInvalid, not retryable, nothing published, no record).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.harness.pod import Run
from tests.harness.sample import KIB, payload

_PEM = serialization.Encoding.PEM
REASON = "ModelSignatureInvalid"
RECORD = ".llmkube-validators.signature"
FILES = {
    "model-00001-of-00002.safetensors": payload(96 * KIB, 1),
    "model-00002-of-00002.safetensors": payload(64 * KIB, 2),
    "config.json": b'{"model_type": "llama"}',
    "tokenizer/tokenizer.json": b'{"version": "1.0"}',
}


def changed_byte(files: dict[str, bytes]) -> dict[str, bytes]:
    """`FILES` with one bit of its second shard flipped."""
    rel = "model-00002-of-00002.safetensors"
    bad = bytearray(files[rel])
    bad[len(bad) // 2] ^= 0x01
    return {**files, rel: bytes(bad)}


def nothing_published(cache_dir: Path, rels: list[str]) -> None:
    for rel in rels:
        assert not (cache_dir / rel).exists(), f"{rel} was published"
    assert not (cache_dir / RECORD).exists()


def refused(run: Run, cache_dir: Path, rels: list[str], words: str) -> dict[str, object]:
    """The run refused the model as a signature check does, saying `words`."""
    doc = run.failed(REASON).term
    assert run.returncode == 4
    assert doc["retryable"] is False
    assert words in str(doc["message"]), doc["message"]
    nothing_published(cache_dir, rels)
    return doc


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _public_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(_PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: str,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=not ca,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    return builder.sign(issuer_key, hashes.SHA256())


@dataclass
class Signer:
    """One publisher: a key (and, with `certs`, a CA and a leaf for it)."""

    workdir: Path
    certs: bool = False

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self.key_path = self.workdir / "signing.key"
        self.key_path.write_bytes(_private_pem(self._key))
        self.public_pem = _public_pem(self._key)
        self._count = 0
        if self.certs:
            ca_key = ec.generate_private_key(ec.SECP256R1())
            ca = _cert("test model CA", ca_key, "test model CA", ca_key, ca=True)
            leaf = _cert("publisher", self._key, "test model CA", ca_key, ca=False)
            self.ca_pem = ca.public_bytes(_PEM)
            self.leaf_path = self.workdir / "leaf.pem"
            self.leaf_path.write_bytes(leaf.public_bytes(_PEM))
            self.chain_path = self.workdir / "ca.pem"
            self.chain_path.write_bytes(self.ca_pem)

    @property
    def anchor_env(self) -> dict[str, str]:
        """The environment that trusts this publisher (by value)."""
        if self.certs:
            return {"LLMKUBE_SIGNING_CERTS": self.ca_pem.decode()}
        return {"LLMKUBE_SIGNING_KEY": self.public_pem.decode()}

    def sign(self, files: Mapping[str, bytes]) -> bytes:
        import model_signing

        self._count += 1
        model = self.workdir / f"model-{self._count}"
        for rel, data in files.items():
            (model / rel).parent.mkdir(parents=True, exist_ok=True)
            (model / rel).write_bytes(data)
        bundle = self.workdir / f"model-{self._count}.sig"
        config = model_signing.signing.Config()
        if self.certs:
            config.use_certificate_signer(
                private_key=self.key_path,
                signing_certificate=self.leaf_path,
                certificate_chain=[self.chain_path],
            )
        else:
            config.use_elliptic_key_signer(private_key=self.key_path)
        config.sign(model, bundle)
        return bundle.read_bytes()

    def sign_file(self, name: str, data: bytes) -> bytes:
        """One file signed as a file (`model_signing sign key m.gguf`): the
        statement's one resource is named '.'."""
        import model_signing

        self._count += 1
        path = self.workdir / f"file-{self._count}" / name
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        bundle = self.workdir / f"file-{self._count}.sig"
        config = model_signing.signing.Config().use_elliptic_key_signer(private_key=self.key_path)
        config.sign(path, bundle)
        return bundle.read_bytes()

    def sign_sharded(self, files: Mapping[str, bytes]) -> bytes:
        """The same model under model-signing's shard serialization."""
        import model_signing

        return self.sign_hashed(files, model_signing.hashing.Config().use_shard_serialization())

    def sign_hashed(self, files: Mapping[str, bytes], hashing_config: object) -> bytes:
        """Signed under another hashing configuration (model_signing.hashing.Config)."""
        import model_signing

        self._count += 1
        model = self.workdir / f"model-{self._count}"
        for rel, data in files.items():
            (model / rel).parent.mkdir(parents=True, exist_ok=True)
            (model / rel).write_bytes(data)
        bundle = self.workdir / f"model-{self._count}.sig"
        config = model_signing.signing.Config().use_elliptic_key_signer(private_key=self.key_path)
        config.set_hashing_config(hashing_config)  # type: ignore[arg-type]
        config.sign(model, bundle)
        return bundle.read_bytes()


def statement_sha256(bundle: bytes) -> str:
    """What LLMKUBE_SIGNED_DIGEST pins: the sha256 of the DSSE payload (the
    in-toto statement the key signed), as `jq -r .dsseEnvelope.payload
    model.sig | base64 -d | sha256sum` prints it."""
    import base64
    import hashlib
    import json

    payload = base64.b64decode(json.loads(bundle)["dsseEnvelope"]["payload"])
    return hashlib.sha256(payload).hexdigest()
