"""The record of a signed model's verification (#34 item 3), the one owner
of its format: `<root>/.llmkube-validators.signature` for a model directory
(`.llmkube-validators.signature.<key>` for a single file, whose directory
other models may share). JSON: the bundle's sha256, the trust anchor's
fingerprint, the serialization the publisher signed with, and the signed
sha256 of every file. An IfNotPresent warm start checks the model against
it offline: the files' stamps against the recorded digests, the record
against the anchor it is given (and the bundle, where it is local).

Written only after every file of the set is published (acting/wholeset.py):
until then a reader with an anchor finds no record, or the old version's
digests, which the new files' stamps do not answer, and refuses them
(docs/design.md "#34: signed models").
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from llmkube_stager.cache.records import write_atomic
from llmkube_stager.cache.safeio import read_small
from llmkube_stager.layout import VALIDATORS_NAME

SIGNATURE_RECORD_NAME = VALIDATORS_NAME + ".signature"
_MAX_RECORD_BYTES = 16 << 20  # a model of 100,000 files and their digests
_MAX_BUNDLE_BYTES = 64 << 20  # staging/bundle.py MAX_BUNDLE_BYTES
KEPT_SUFFIX = ".bundle"
# Why no record vouches for the model: there is none (#34 items 3, 4).
UNVERIFIED = "the model was not verified against a signature when it was staged"


@dataclass(frozen=True)
class Verification:
    """What a verification proved: this bundle, against this anchor, signs
    these files with these digests."""

    bundle_sha256: str
    anchor_fingerprint: str
    method: str
    files: Mapping[str, str] = field(default_factory=dict)
    # Where the bundle was (display form: no credentials or query).
    signature: str = ""
    # What the publisher's serialization left out (model-signing's ignore_paths).
    ignore_paths: tuple[str, ...] = ()
    # The bundle's bytes, kept beside the record (`kept_path`) when it is
    # written: the record is a cache of its statement (#40 item 3).
    bundle: bytes = field(default=b"", repr=False, compare=False)


def record_path(root: str, rels: tuple[str, ...], multi_file: bool) -> str:
    if multi_file:
        return os.path.join(root, SIGNATURE_RECORD_NAME)
    # Imported here: OpenSSL's load is paid only by a single-file model's
    # record lookup, not by every plan and inspect that imports this module.
    import hashlib

    key = hashlib.sha256(rels[0].encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(root, f"{SIGNATURE_RECORD_NAME}.{key}")


def kept_path(record: str) -> str:
    """Where the verified bundle is kept: beside its record (#40 item 3)."""
    return record + KEPT_SUFFIX


def read_kept(record: str) -> bytes | None:
    return read_small(kept_path(record), _MAX_BUNDLE_BYTES).data


def read_verification(path: str) -> Verification | None:
    """None when missing, unreadable or not a record (a reader with an
    anchor then refuses: nothing says the model was verified)."""
    small = read_small(path, _MAX_RECORD_BYTES)
    if small.data is None:
        return None
    try:
        doc = json.loads(small.data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("v") != 1:
        return None
    files = doc.get("files")
    strings = [doc.get(k) for k in ("bundle_sha256", "anchor", "method", "signature")]
    if not isinstance(files, dict) or not all(isinstance(s, str) for s in strings):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return None
    bundle, anchor, method, signature = (str(s) for s in strings)
    ignore = doc.get("ignore_paths", [])
    if not isinstance(ignore, list) or not all(isinstance(p, str) for p in ignore):
        return None
    return Verification(bundle, anchor, method, dict(files), signature, tuple(ignore))


def write_verification(path: str, verification: Verification) -> None:
    doc = {
        "v": 1,
        "bundle_sha256": verification.bundle_sha256,
        "anchor": verification.anchor_fingerprint,
        "method": verification.method,
        "signature": verification.signature,
        "ignore_paths": list(verification.ignore_paths),
        "files": dict(sorted(verification.files.items())),
    }
    if verification.bundle:
        # The bundle before the record that names it (#40 item 3): a record
        # whose bundle is not there yet is verified again, never trusted.
        write_atomic(kept_path(path), verification.bundle)
    write_atomic(path, json.dumps(doc, separators=(",", ":")).encode("utf-8"))


def record_problem(
    recorded: Verification,
    fingerprint: str,
    bundle: tuple[str, str] | None,
    *,
    chain: bool = False,
) -> str | None:
    """Why the record does not vouch for the model under this anchor (None:
    it does): the judgement every reader makes offline (#34 items 3, 4);
    no record at all is `UNVERIFIED`, said by the caller, which then knows
    it holds a record. `bundle`: (sha256, shown) of the bundle where it is
    read offline. `chain`: the anchor is a set of certificates, whose
    fingerprint changes when a root is added during a rotation while the
    trust does not (#40 item 8): the kept bundle, verified against the set
    as it is now, is the judge, not the fingerprint."""
    if recorded.anchor_fingerprint != fingerprint and not chain:
        return (
            "the model was verified against another trust anchor when it was staged "
            f"(recorded {recorded.anchor_fingerprint[:16]}, this pod's {fingerprint[:16]})"
        )
    if bundle is not None and bundle[0] != recorded.bundle_sha256:
        return f"the signature bundle {bundle[1]} changed since the model was verified and staged"
    return None
