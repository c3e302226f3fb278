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


def trust_anchor(key: str, certs: str, signature: str) -> TrustAnchor | None:
    """None when no anchor is set (LLMKUBE_SIGNATURE alone verifies
    nothing: config/load.py warns)."""
    key, certs, signature = key.strip(), certs.strip(), signature.strip()
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
    return TrustAnchor(
        kind,
        pem,
        hashlib.sha256(b"".join(blocks)).hexdigest(),
        _signature(signature or DEFAULT_SIGNATURE),
    )


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
