"""The trust anchor of a signed model (#34 item 1): LLMKUBE_SIGNING_KEY (a
PEM public key, by value or by path) or LLMKUBE_SIGNING_CERTS (the PEM
certificate chain to trust, by value or by path), and LLMKUBE_SIGNATURE
(where the model-signing bundle is). Parsed with the standard library only:
a run without an anchor imports nothing of model-signing, and a warm start
with one compares fingerprints without it (#34 item 5).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from llmkube_stager.errors import ConfigError

AnchorKind = Literal["key", "certs"]
# The bundle's default name beside the model at the source (#34 item 1),
# as model-signing's CLI writes it.
DEFAULT_SIGNATURE = "model.sig"
_MAX_PEM_BYTES = 1 << 20
# hashlib, re and base64 are imported only when an anchor is set: a warm
# start without one loads no OpenSSL (tests/e2e/test_cli_stage.py).
_PEM = rb"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----"


@dataclass(frozen=True)
class TrustAnchor:
    """What a signature must verify against, and where the bundle is."""

    kind: AnchorKind
    pem: bytes
    # sha256 over the DER of every PEM block, in order: what the
    # verification record names the anchor by (cache/sigrecord.py).
    fingerprint: str
    # "": model.sig beside the model at the source; a name relative to the
    # model at the source; an absolute path; or an http(s) URL.
    signature: str = DEFAULT_SIGNATURE
    # LLMKUBE_SIGNED_DIGEST (#40 item 7): the sha256 (64 lowercase hex) of
    # the one statement to accept, the DSSE payload's bytes as signed; ""
    # accepts any statement the anchor signed.
    signed_digest: str = ""


def trust_anchor(
    key: str, certs: str, signature: str, signed_digest: str = ""
) -> TrustAnchor | None:
    """None when no anchor is set (LLMKUBE_SIGNATURE alone verifies
    nothing: config/load.py warns)."""
    key, certs, signature = key.strip(), certs.strip(), signature.strip()
    pin = _signed_digest(signed_digest)
    if pin and not (key or certs):
        # A pin nobody checks must not look like protection; unlike a
        # bundle name, it is only ever set to refuse something.
        raise ConfigError(
            "LLMKUBE_SIGNED_DIGEST is set without LLMKUBE_SIGNING_KEY or LLMKUBE_SIGNING_CERTS: "
            "set the anchor the pinned statement is signed by"
        )
    if key and certs:
        raise ConfigError(
            "LLMKUBE_SIGNING_KEY and LLMKUBE_SIGNING_CERTS are both set: set the one anchor "
            "the model is signed for"
        )
    if not key and not certs:
        return None
    name = "LLMKUBE_SIGNING_KEY" if key else "LLMKUBE_SIGNING_CERTS"
    kind: AnchorKind = "key" if key else "certs"
    wanted = b"PUBLIC KEY" if kind == "key" else b"CERTIFICATE"
    pem = _pem_of(name, key or certs, wanted)
    blocks = _blocks(name, pem, wanted)
    import hashlib

    if kind == "key" and len(blocks) != 1:
        raise ConfigError(f"{name} must hold exactly one PEM public key")
    if kind == "key":
        _check_key(name, blocks[0])
    return TrustAnchor(
        kind,
        pem,
        # The blocks in order of their bytes: the order a Secret lists its
        # certificates in does not change the anchor (#40 item 8).
        hashlib.sha256(b"".join(sorted(blocks))).hexdigest(),
        _signature(signature or DEFAULT_SIGNATURE),
        pin,
    )


def _signed_digest(value: str) -> str:
    """64 hex digits, optionally after 'sha256:', any case; "" when unset."""
    text = value.strip().lower().removeprefix("sha256:")
    if not text:
        return ""
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise ConfigError(
            "LLMKUBE_SIGNED_DIGEST must be the sha256 (64 hex digits) of the signed statement: "
            "jq -r .dsseEnvelope.payload model.sig | base64 -d | sha256sum"
        )
    return text


def _pem_of(name: str, value: str, label: bytes) -> bytes:
    """By value (a PEM text, or the base64 of one DER block without its
    armour, as a Secret's one-line value often is) or by an absolute path
    (a mounted Secret or ConfigMap)."""
    if value.startswith("-----BEGIN"):
        return value.encode("ascii", "replace")
    if not value.startswith("/"):
        return _armoured(name, value, label)
    try:
        with open(value, "rb") as f:
            data = f.read(_MAX_PEM_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"{name}: cannot read {value}: {os.strerror(err.errno or 0)}") from None
    if len(data) > _MAX_PEM_BYTES:
        raise ConfigError(f"{name}: {value} is larger than 1 MiB")
    return data


def _armoured(name: str, value: str, label: bytes) -> bytes:
    import base64
    import binascii

    body = "".join(value.split()).encode("ascii", "replace")
    try:
        base64.b64decode(body, validate=True)
    except binascii.Error:
        raise ConfigError(
            f"{name} must be a PEM text, the base64 of its DER, or an absolute path to one"
        ) from None
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return b"\n".join([b"-----BEGIN " + label + b"-----", *lines, b"-----END " + label + b"-----"])


def _blocks(name: str, pem: bytes, wanted: bytes) -> list[bytes]:
    import base64
    import binascii
    import re

    blocks: list[bytes] = []
    for label, body in re.findall(_PEM, pem, re.S):
        if label != wanted:
            continue
        try:
            blocks.append(base64.b64decode(b"".join(body.split()), validate=True))
        except binascii.Error:
            raise ConfigError(f"{name}: a PEM block is not valid base64") from None
    if not blocks:
        raise ConfigError(f"{name} holds no PEM {wanted.decode()}")
    return blocks


# The AlgorithmIdentifier of a SubjectPublicKeyInfo (its DER content):
# model-signing 1.1.1's key verifier takes EC keys on these curves only
# (sign_ec_key._check_supported_ec_key); what the others are, for the words.
_EC = "06072a8648ce3d0201"
_TAKEN = {
    bytes.fromhex(_EC + c) for c in ("06082a8648ce3d030107", "06052b81040022", "06052b81040023")
}
_NOT_TAKEN = {
    bytes.fromhex("06092a864886f70d0101010500"): "an RSA key",
    bytes.fromhex("06032b6570"): "an Ed25519 key",
    bytes.fromhex("06032b6571"): "an Ed448 key",
}


def _check_key(name: str, der: bytes) -> None:
    """A key model-signing's key verifier does not take is a configuration
    error at start, before any request (#40 item 8): before, it was
    `ModelSignatureInvalid` after the bundle was fetched."""
    algorithm = _algorithm_of(der)
    if algorithm in _TAKEN:
        return
    what = _NOT_TAKEN.get(algorithm)
    if what is None:
        ec = algorithm.startswith(bytes.fromhex(_EC))
        what = "an elliptic-curve key on another curve" if ec else "not a key model-signing takes"
    raise ConfigError(
        f"{name} is {what}: model-signing's key verifier takes elliptic-curve keys on P-256, "
        "P-384 or P-521 only; set the publisher's signing key of such a curve, or their CA in "
        "LLMKUBE_SIGNING_CERTS"
    )


def _algorithm_of(der: bytes) -> bytes:
    """SEQUENCE { SEQUENCE { algorithm, parameters }, BIT STRING }: the
    inner SEQUENCE's content; b"" when the DER is not of that form."""
    if len(der) < 4 or der[0] != 0x30:
        return b""
    at = 2 + (der[1] & 0x7F if der[1] & 0x80 else 0)
    if at + 2 > len(der) or der[at] != 0x30 or der[at + 1] & 0x80:
        return b""
    return der[at + 2 : at + 2 + der[at + 1]]


def local_bundle_path(signature: str, local_base: str | None) -> str | None:
    """Where the bundle is read without a network (#34 item 3): an absolute
    LLMKUBE_SIGNATURE, or a name beside a local source's model (its
    directory, `local_base`); None where it is remote."""
    if signature.startswith("/"):
        return signature
    if local_base is None or signature.startswith(("http://", "https://")):
        return None
    return os.path.join(local_base, signature)


def _signature(value: str) -> str:
    if "://" in value and not value.startswith(("http://", "https://")):
        raise ConfigError(
            "LLMKUBE_SIGNATURE must be a name beside the model at the source, an absolute "
            "path or an http(s) URL"
        )
    if not value.startswith(("/", "http://", "https://")):
        parts = value.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise ConfigError(
                "LLMKUBE_SIGNATURE: a relative name must not hold '..' or empty parts"
            )
    return value
