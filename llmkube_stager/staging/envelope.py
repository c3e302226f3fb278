"""The kept bundle checked on every warm start and every `verify` (#40
item 3): the record of a verification (cache/sigrecord.py) lives on the
cache volume, which any pod with write access can edit, so it is only a
cache of the bundle's statement, never its authority. The bundle the
verification accepted is kept beside the record; each reader checks its
DSSE signature against the anchor once (no file is hashed again: the
stamps answer the statement's digests) and that the record says what the
statement says.

A key anchor is checked with `cryptography` directly (the DSSE envelope's
ECDSA signature over its pre-authentication encoding, as model-signing
1.1.1's key verifier does, its pre-1.0 encoding included): model-signing
is not imported on the warm path. A certificate chain is checked by
model-signing's own certificate verifier (staging/bundle.py), whose chain
rules are its own.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from llmkube_stager.cache.sigrecord import Verification
from llmkube_stager.config.anchor import TrustAnchor
from llmkube_stager.errors import SignatureError

_PAYLOAD_TYPE = "application/vnd.in-toto+json"


def kept_problem(
    data: bytes, anchor: TrustAnchor, recorded: Verification, *, named: bool
) -> str | None:
    """Why the kept bundle does not vouch for the record under this anchor
    (None: it does). `named`: a model directory, whose record names the
    statement's files; a single file's record names it by MODEL_PATH."""
    if hashlib.sha256(data).hexdigest() != recorded.bundle_sha256:
        return "the kept signature bundle is not the one the record names"
    try:
        statement = _statement(data, anchor)
    except SignatureError as err:
        return f"the kept signature bundle does not verify: {err.detail}"
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as err:
        return f"the kept signature bundle cannot be read ({type(err).__name__})"
    if _said(statement, named) != _recorded(recorded, named):
        return "the record does not say what its signature bundle signs (edited in the cache)"
    return pin_problem(data, anchor)


def statement_sha256(data: bytes) -> str:
    """What LLMKUBE_SIGNED_DIGEST pins (#40 item 7): the sha256 of the
    DSSE payload, the in-toto statement's bytes exactly as the key signed
    them (base64-decoded from the bundle). Not the bundle's own sha256: a
    bundle carries verification material (a certificate, a key hint) that
    may change while the statement, which names every file's digest, does
    not; and the payload is what `jq -r .dsseEnvelope.payload model.sig |
    base64 -d | sha256sum` prints. ValueError/KeyError/TypeError: not a
    bundle."""
    envelope = json.loads(data.decode("utf-8"))["dsseEnvelope"]
    return hashlib.sha256(base64.b64decode(envelope["payload"], validate=True)).hexdigest()


def pin_problem(data: bytes, anchor: TrustAnchor) -> str | None:
    """Why the bundle's statement is not the pinned one (None: it is, or
    nothing is pinned). model-signing proves who signed a statement, not
    which: an older version or another model the same key signed verifies
    (rollback, replay); the pin says which one."""
    if not anchor.signed_digest:
        return None
    try:
        said = statement_sha256(data)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
        return f"its statement cannot be read ({type(err).__name__})"
    if said == anchor.signed_digest:
        return None
    return (
        f"it signs the statement sha256 {said[:16]}, not the one LLMKUBE_SIGNED_DIGEST pins "
        f"({anchor.signed_digest[:16]}): an older version or another model signed by the same key"
    )


def _statement(data: bytes, anchor: TrustAnchor) -> Any:
    if anchor.kind != "key":
        from llmkube_stager.staging.bundle import verify_bundle  # imports model-signing

        verify_bundle(data, anchor, "kept in the cache")
    envelope = json.loads(data.decode("utf-8"))["dsseEnvelope"]
    payload = base64.b64decode(envelope["payload"], validate=True)
    if anchor.kind == "key":
        if envelope["payloadType"] != _PAYLOAD_TYPE:
            raise ValueError("not an in-toto statement")
        signature = base64.b64decode(envelope["signatures"][0]["sig"], validate=True)
        _check_key_signature(anchor.pem, signature, payload)
    return json.loads(payload)


def _check_key_signature(pem: bytes, signature: bytes, payload: bytes) -> None:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = _ec_key(pem)
    digest = {256: hashes.SHA256(), 384: hashes.SHA384(), 521: hashes.SHA512()}
    algorithm = _ecdsa(ec, digest.get(key.curve.key_size, hashes.SHA256()))
    head = f"{len(_PAYLOAD_TYPE)} {_PAYLOAD_TYPE} {len(payload)}"
    # model-signing 1.1.1's `pae`, then its `pae_compat` for bundles signed
    # before 1.0 (the payload's repr inside the text).
    for signed in (f"DSSEv1 {head} ".encode() + payload, f"DSSEV1 {head} {payload!r}".encode()):
        try:
            key.verify(signature, signed, algorithm)
            return
        except InvalidSignature:
            continue
    raise SignatureError("its signature is not the anchor's (InvalidSignature)")


def _ecdsa(ec: Any, hash_algorithm: Any) -> Any:
    """`ec.ECDSA(hash_algorithm)` without its constructor's import of
    cryptography's OpenSSL backend (~12 ms of a warm start, more on a busy
    node), which it makes only to check deterministic *signing*, never used
    to verify. Built with the two attributes the constructor sets in
    cryptography 50 and read back through the public properties; any other
    layout takes the constructor (the check is the same either way: the
    Rust verifier reads only the hash algorithm)."""
    algorithm = ec.ECDSA.__new__(ec.ECDSA)
    try:
        algorithm._algorithm = hash_algorithm
        algorithm._deterministic_signing = False
        if algorithm.algorithm is hash_algorithm and algorithm.deterministic_signing is False:
            return algorithm
    except AttributeError:
        pass
    return ec.ECDSA(hash_algorithm)


def _ec_key(pem: bytes) -> Any:
    """The anchor's EC key from its SubjectPublicKeyInfo: the named curves'
    DER prefix and the point taken as they are, which spares importing
    cryptography's serialization modules (~10-20 ms) on every warm start
    (#40 item 3's budget); any other form is loaded by cryptography."""
    from cryptography.hazmat.primitives.asymmetric import ec

    body = b"".join(pem.split(b"-----")[2].split()) if pem.count(b"-----") >= 4 else b""
    der = base64.b64decode(body) if body else b""
    for prefix, curve, point_bytes in _SPKI_PREFIXES:
        if der.startswith(prefix) and len(der) == len(prefix) + point_bytes:
            point = der[len(prefix) :]
            return ec.EllipticCurvePublicKey.from_encoded_point(getattr(ec, curve)(), point)
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    key = load_pem_public_key(pem)
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise SignatureError("the anchor is not an elliptic-curve key")
    return key


# (SubjectPublicKeyInfo DER before an uncompressed point, curve, point bytes)
_SPKI_PREFIXES = (
    (
        bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d030107034200"),
        "SECP256R1",
        65,
    ),
    (bytes.fromhex("3076301006072a8648ce3d020106052b81040022036200"), "SECP384R1", 97),
    (bytes.fromhex("30819b301006072a8648ce3d020106052b8104002303818600"), "SECP521R1", 133),
)


def _said(statement: Any, named: bool) -> tuple[object, ...]:
    predicate = statement["predicate"]
    serialization = predicate["serialization"]
    files = [(str(r["name"]), str(r["digest"])) for r in predicate["resources"]]
    ignore = sorted(str(p) for p in serialization.get("ignore_paths", ()) or ())
    return _compared(str(serialization["method"]), ignore, files, named)


def _recorded(recorded: Verification, named: bool) -> tuple[object, ...]:
    files = list(recorded.files.items())
    return _compared(recorded.method, sorted(recorded.ignore_paths), files, named)


def _compared(
    method: str, ignore: list[str], files: list[tuple[str, str]], named: bool
) -> tuple[object, ...]:
    digests = sorted(d for _, d in files)
    return (method, ignore, sorted(files) if named else digests)
