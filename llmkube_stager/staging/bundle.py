"""An OpenSSF model-signing bundle verified against a trust anchor (#34
items 2, 5): the bundle's DSSE signature checked by model-signing's own key
or certificate verifier (offline: no Rekor, no TUF), its in-toto statement
read into the signed set (path -> sha256). The files themselves are not
hashed here: model-signing's `verifying.Config.verify` hashes a model
directory again, and the agent already hashed every byte while receiving
(transfer/engine.py). So the signed digests become the files' pins: each
file is checked against its signed digest before it is published
(acting/work.py), the set against the signed set before anything is
fetched (staging/signed.py).

model-signing is imported here, inside the functions, only when a trust
anchor is set (#34 item 5). It is pinned to 1.1.1 (pyproject.toml): the
verifier classes used are its `_signing` modules', whose constructors take
paths; their subclasses below take the anchor's bytes instead, so that
nothing is written outside the cache.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from llmkube_stager.config.anchor import TrustAnchor
from llmkube_stager.errors import (
    REMEDY_SIGNATURE_BUNDLE_SIZE,
    REMEDY_SIGNATURE_PIN,
    REMEDY_SIGNATURE_WRONG_KEY,
    ConfigError,
    SignatureError,
)

MAX_BUNDLE_BYTES = 64 << 20  # a statement of ~500,000 files


@dataclass(frozen=True)
class SignedSet:
    """What the publisher signed: every file's sha256, and what their
    serialization leaves out of the set."""

    files: Mapping[str, str]
    method: str
    ignore_paths: tuple[str, ...] = field(default=())
    # What the verifier said on the side (a bundle of an older format).
    notes: tuple[str, ...] = ()

    @property
    def one_file(self) -> bool:
        """One file signed as a file (`model_signing sign key m.gguf`): its
        one resource is '.', a digest without a name."""
        return list(self.files) == ["."]

    def ignores(self, rel: str, bundle_rel: str) -> bool:
        """model-signing's rule: an ignored path and everything under it;
        the bundle itself is never a file of the model. Git's files are
        ignored only where the statement says so (#40 item 5): model-signing
        1.1.1 records `.git`, `.gitattributes`, `.github`, `.gitignore` in
        ignore_paths by default, and nothing with `--no-ignore-git-paths`,
        which signs them like any file (every Hugging Face repo holds a
        `.gitattributes`)."""
        if rel == bundle_rel:
            return True
        for path in self.ignore_paths:
            path = path.strip("/")
            if path and (rel == path or rel.startswith(path + "/")):
                return True
        return False


def verify_bundle(data: bytes, anchor: TrustAnchor, shown: str) -> SignedSet:
    """The signed set, or SignatureError naming why not (a truncated or
    foreign bundle, another key, a chain that does not lead to the anchor,
    an unsupported serialization)."""
    _require()
    if len(data) > MAX_BUNDLE_BYTES:
        raise too_large(shown)
    try:
        signature = _parse(data)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
        raise _refused(shown, f"it is not a model-signing bundle ({type(err).__name__})") from None
    manifest, said = _verified_manifest(signature, anchor, shown)
    signed = _signed_set(manifest, shown)
    _check_names(_statement_names(data, shown), shown)
    _check_pin(data, anchor, shown)
    notes = tuple(" ".join(line.split()) for line in said.split("WARNING:") if line.strip())
    return replace(signed, notes=notes)


def _require() -> None:
    """An image without model-signing (or the pyOpenSSL 1.1.1 imports
    without declaring it) is the image's configuration problem, said before
    anything is fetched, as sources/deps.py says a missing client library."""
    try:
        import model_signing._signing.sign_certificate  # noqa: F401
    except ImportError as err:
        raise ConfigError(
            "a trust anchor is set (LLMKUBE_SIGNING_KEY / LLMKUBE_SIGNING_CERTS) but this image "
            f"cannot verify model-signing bundles: {err.name or 'model_signing'} is not "
            "installed (pip install model-signing==1.1.1 pyOpenSSL)"
        ) from None


def _parse(data: bytes) -> Any:
    """sigstore_pb.Signature.read, from bytes (its read takes a path)."""
    from model_signing._signing import sign_sigstore_pb
    from sigstore_models.bundle import v1 as bundle_pb

    doc = json.loads(data.decode("utf-8"))
    material = doc["verificationMaterial"]
    material.setdefault("tlogEntries", [])
    if "publicKey" in material:
        material["publicKey"].setdefault("hint", None)
        for k in ("rawBytes", "keyDetails"):
            material["publicKey"].pop(k, None)
    return sign_sigstore_pb.Signature(bundle_pb.Bundle.from_dict(doc))


def _verified_manifest(signature: Any, anchor: TrustAnchor, shown: str) -> tuple[Any, str]:
    # The key verifier print()s a warning to stdout for a bundle without a
    # key hint; `stage` writes nothing to stdout (plan --json's one document
    # is there), so it is caught and returned as a log line's text.
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said):
            return _first_that_verifies(signature, anchor), said.getvalue()
    except Exception as err:
        # The verifiers raise ValueError (a key hint or media type that
        # differs, a statement that does not hash to its subject),
        # cryptography's InvalidSignature, pyOpenSSL's X509StoreContextError
        # (a chain that does not lead to the anchor), KeyError/TypeError on
        # a statement missing its parts: every one means "not signed by the
        # anchor", and the type is all the detail that is safe to show.
        raise _refused(
            shown, f"it does not verify against the {_anchor_words(anchor)} ({type(err).__name__})"
        ) from None


def _first_that_verifies(signature: Any, anchor: TrustAnchor) -> Any:
    """The manifest the anchor's verifier returns. OpenSSL's store takes the
    first certificate whose subject names the issuer, so two roots of one
    name (a CA re-keyed during a rotation) verify in one order only: each
    certificate of LLMKUBE_SIGNING_CERTS is tried first in turn (#40 item
    8), the last failure raised."""
    count = 1 if anchor.kind == "key" else max(1, anchor.pem.count(b"-----BEGIN CERTIFICATE"))
    failure: Exception | None = None
    for first in range(count):
        try:
            return _verifier(anchor, first).verify(signature)
        except Exception as err:  # the caller says what every one means
            failure = err
    raise failure or ValueError("no certificate to verify with")


def _anchor_words(anchor: TrustAnchor) -> str:
    if anchor.kind == "key":
        return "key of LLMKUBE_SIGNING_KEY"
    return "certificate chain of LLMKUBE_SIGNING_CERTS"


def _verifier(anchor: TrustAnchor, first: int = 0) -> Any:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from model_signing._signing import sign_certificate, sign_ec_key
    from OpenSSL import crypto

    class KeyVerifier(sign_ec_key.Verifier):
        def __init__(self, pem: bytes) -> None:
            key = serialization.load_pem_public_key(pem)
            if not isinstance(key, ec.EllipticCurvePublicKey):
                raise ValueError("model-signing verifies elliptic-curve keys only")
            sign_ec_key._check_supported_ec_key(key)
            self._public_key = key

    class CertVerifier(sign_certificate.Verifier):
        def __init__(self, pem: bytes) -> None:
            self._log_fingerprints = False
            self._store = crypto.X509Store()
            certificates = x509.load_pem_x509_certificates(pem)
            certificates.insert(0, certificates.pop(min(first, len(certificates) - 1)))
            for certificate in certificates:
                self._store.add_cert(crypto.X509.from_cryptography(certificate))

    try:
        if anchor.kind == "key":
            return KeyVerifier(anchor.pem)
        return CertVerifier(anchor.pem)
    except (ValueError, TypeError) as err:
        # Parsed as PEM by config/anchor.py; not a key model-signing takes
        # (an RSA or ed25519 key: it signs with EC keys only).
        raise SignatureError(
            f"the trust anchor cannot verify model-signing bundles: {err}",
            remedy=REMEDY_SIGNATURE_WRONG_KEY,
        ) from None


def _signed_set(manifest: Any, shown: str) -> SignedSet:
    """Only the per-file serialization with sha256 is accepted: its digests
    are whole-file sha256, which the agent computes while receiving. The
    sharded one signs digests of fixed-size shards, which would need every
    file read again: refused with its own words."""
    params = manifest.serialization_type
    method = str(params.get("method", ""))
    if method != "files" or params.get("hash_type") != "sha256":
        raise _refused(
            shown,
            f"it was signed with the {method or 'unknown'} serialization hashed with "
            f"{params.get('hash_type')}; the agent verifies only model-signing's per-file "
            "serialization with sha256 (model-signing's default: sign without choosing the "
            "sharded serialization or another hash)",
        )
    files: dict[str, str] = {}
    for descriptor in manifest.resource_descriptors():
        digest = descriptor.digest
        if digest.algorithm != "sha256":
            raise _refused(shown, f"it lists {descriptor.identifier} with {digest.algorithm}")
        files[str(descriptor.identifier)] = digest.digest_hex
    ignore = tuple(str(p) for p in params.get("ignore_paths", ()) or ())
    return SignedSet(files, method, ignore)


def _statement_names(data: bytes, shown: str) -> list[str]:
    """Every file name the signed statement lists, as written (the DSSE
    payload is the signed bytes themselves, verified above): model-signing
    turns them into PurePosixPath keys of a dict, so a name listed twice
    keeps its LAST digest and 'a/' or './a' becomes 'a' without a word."""
    try:
        doc = json.loads(data.decode("utf-8"))
        statement = json.loads(base64.b64decode(doc["dsseEnvelope"]["payload"]))
        predicate = statement.get("predicate") or {}
        rows = predicate["resources"] if "resources" in predicate else statement["subject"]
        return [str(row["name"]) for row in rows]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
        raise _refused(shown, f"its statement cannot be read ({type(err).__name__})") from None


def _check_names(names: list[str], shown: str) -> None:
    """A statement the agent would read otherwise than another verifier is
    refused, never resolved by a choice (#34 adversarial pass): a name not
    in the form a signer writes (a relative POSIX path, no '.', '..' or
    empty part, no trailing '/', no absolute path), and a name listed twice
    (also once NFC-normalized: two spellings of one name on a normalizing
    filesystem, where the publisher hashed one of them)."""
    if names == ["."]:
        # One file signed as a file (`model_signing sign key m.gguf`): its one
        # resource is `.` (#40 item 4); a single-file source takes it, a
        # directory's set never equals it (staging/signed.py).
        return
    seen: set[str] = set()
    for name in names:
        parts = name.split("/")
        if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise _refused(
                shown, f"its statement lists {name[:120]!r}, not a relative path of a model file"
            )
        key = unicodedata.normalize("NFC", name)
        if key in seen:
            raise _refused(shown, f"its statement lists {name[:120]!r} twice")
        seen.add(key)


def _check_pin(data: bytes, anchor: TrustAnchor, shown: str) -> None:
    """LLMKUBE_SIGNED_DIGEST (#40 item 7), after the signature: a pin's
    refusal says the key's statement verified, and which one it was."""
    from llmkube_stager.staging.envelope import pin_problem

    problem = pin_problem(data, anchor)
    if problem is not None:
        raise SignatureError(
            f"the model's signature bundle {shown} was refused: {problem}",
            remedy=REMEDY_SIGNATURE_PIN,
        )


def too_large(shown: str) -> SignatureError:
    """A bundle over the bound: said about the bundle, not the model's
    files (#40 item 8)."""
    return SignatureError(
        f"the model's signature bundle {shown} was refused: it is larger than 64 MiB",
        remedy=REMEDY_SIGNATURE_BUNDLE_SIZE,
    )


def _refused(shown: str, why: str) -> SignatureError:
    return SignatureError(
        f"the model's signature bundle {shown} was refused: {why}",
        remedy=REMEDY_SIGNATURE_WRONG_KEY,
    )
