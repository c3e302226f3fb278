"""What a reader says of a signed model (#34 item 4), offline and without
model-signing: `verify` refuses a model whose recorded verification does
not fit its trust anchor and checks the files against the recorded signed
digests; `plan` and `inspect` show the record's state. The judgement is
the one a staging run makes (cache/sigrecord.py `record_problem`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from llmkube_stager.cache.safeio import read_small
from llmkube_stager.cache.sigrecord import (
    KEPT_SUFFIX,
    SIGNATURE_RECORD_NAME,
    UNVERIFIED,
    Verification,
    read_kept,
    read_verification,
    record_path,
    record_problem,
)
from llmkube_stager.config import Config
from llmkube_stager.config.anchor import TrustAnchor, local_bundle_path
from llmkube_stager.errors import REMEDY_SIGNATURE_RECORD, SignatureError
from llmkube_stager.schemes import of_source

_MAX_BUNDLE_BYTES = 64 << 20
_NOT_KEPT = "no signature bundle is kept beside the record"


@dataclass(frozen=True)
class SignatureState:
    """`state`: "unchecked" (no anchor), "verified" (the record fits the
    anchor), "pending" (a writer verifies the bundle from the source before
    publishing: no record yet, or OnChange) or "refused" (`detail` says why)."""

    state: str
    detail: str = ""
    anchor: str = ""  # the anchor's fingerprint, first 16 hex
    signature: str = ""
    # The recorded signed digests (verified only).
    files: Mapping[str, str] = field(default_factory=dict)
    # LLMKUBE_SIGNED_DIGEST, the one statement accepted ("": any).
    signed_digest: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "state": self.state,
            "detail": self.detail,
            "anchor": self.anchor,
            "signature": self.signature,
            "signed_files": len(self.files),
            "signed_digest": self.signed_digest,
        }

    def line(self) -> str:
        if self.state == "unchecked":
            return "signature: not checked (no LLMKUBE_SIGNING_KEY / LLMKUBE_SIGNING_CERTS)"
        return self._judged() + (
            f"; statement pinned to sha256 {self.signed_digest[:16]}" if self.signed_digest else ""
        )

    def _judged(self) -> str:
        if self.state == "pending":
            return f"signature: to verify from the source ({self.detail})"
        if self.state == "verified":
            return (
                f"signature: verified against anchor {self.anchor} ({self.signature}, "
                f"{len(self.files)} signed files)"
            )
        return f"signature: REFUSED: {self.detail}"


def signature_state(
    config: Config, root: str, rels: tuple[str, ...], *, may_write: bool = False
) -> SignatureState:
    """`may_write`: the run would write the cache (`plan`'s writer), so it
    verifies from the source where a reader refuses (staging/signed.py)."""
    anchor = config.signing
    if anchor is None:
        return SignatureState("unchecked")
    return replace(
        _state(config, anchor, root, rels, may_write=may_write), signed_digest=anchor.signed_digest
    )


def _state(
    config: Config, anchor: TrustAnchor, root: str, rels: tuple[str, ...], *, may_write: bool
) -> SignatureState:
    recorded = read_verification(record_path(root, rels, config.multi_file))
    shown = "" if recorded is None else recorded.signature
    if may_write and (recorded is None or config.refresh_policy == "OnChange"):
        why = "no record yet" if recorded is None else "OnChange verifies on every start"
        return SignatureState("pending", why, anchor.fingerprint[:16], shown)
    local = _local_bundle(config, anchor)  # read, as before, even without a record
    if recorded is None:
        return SignatureState("refused", UNVERIFIED, anchor.fingerprint[:16], shown)
    chain = anchor.kind == "certs"
    problem = record_problem(recorded, anchor.fingerprint, local, chain=chain) or _set_problem(
        recorded, rels, config, anchor.signature
    )
    if problem is None:
        problem = _kept_problem(config, anchor, root, rels, recorded)
    if (
        problem is not None
        and may_write
        and (problem == _NOT_KEPT or _pin_differs(anchor, root, rels, config))
    ):
        # A writer verifies the source's bundle (staging/signed.py).
        return SignatureState("pending", problem, anchor.fingerprint[:16], shown)
    if problem is not None:
        return SignatureState("refused", problem, anchor.fingerprint[:16], shown)
    files = recorded.files
    if not config.multi_file:
        files = {rels[0]: next(iter(recorded.files.values()))}
    return SignatureState("verified", "", anchor.fingerprint[:16], shown, files)


def _kept_problem(
    config: Config, anchor: TrustAnchor, root: str, rels: tuple[str, ...], recorded: Verification
) -> str | None:
    """The kept bundle's signature checked against the anchor, and the
    record against its statement (#40 item 3): the record is a cache of
    the bundle's statement, never its authority."""
    from llmkube_stager.staging.envelope import kept_problem

    kept = read_kept(record_path(root, rels, config.multi_file))
    if kept is None:
        return _NOT_KEPT
    return kept_problem(kept, anchor, recorded, named=config.multi_file)


def _pin_differs(anchor: TrustAnchor, root: str, rels: tuple[str, ...], config: Config) -> bool:
    from llmkube_stager.staging.envelope import pin_problem

    kept = read_kept(record_path(root, rels, config.multi_file))
    return kept is not None and pin_problem(kept, anchor) is not None


def pins_of(config: Config, state: SignatureState) -> dict[str, str]:
    """The pins a reader checks the files against: the signed digests (a
    pin of the user's that disagrees is a refusal, as when staging)."""
    pins = dict(config.pins)
    for rel, digest in state.files.items():
        if pins.get(rel, digest) != digest:
            raise SignatureError(
                f"the pin of {rel} ({pins[rel]}) and its recorded signed sha256 ({digest}) "
                "disagree",
                file=rel,
                remedy=REMEDY_SIGNATURE_RECORD,
            )
        pins[rel] = digest
    return pins


def refuse(state: SignatureState) -> None:
    if state.state == "refused":
        raise SignatureError(state.detail, remedy=REMEDY_SIGNATURE_RECORD)


def _set_problem(
    recorded: Verification, rels: tuple[str, ...], config: Config, signature: str
) -> str | None:
    if not config.multi_file:
        return None if len(recorded.files) == 1 else "the record signs more than one file"
    from llmkube_stager.staging.bundle import SignedSet

    signed = SignedSet(recorded.files, recorded.method, recorded.ignore_paths)
    staged = {r for r in rels if not signed.ignores(r, _bundle_rel(signature))}
    if config.kserve_mode and signed.one_file and len(staged) == 1:
        return None  # KServe's one object signed as a file (staging/signed.py)
    differ = sorted(staged ^ set(recorded.files))
    if differ:
        return f"the files are not the verified set: {differ[0]!r} and {len(differ) - 1} more"
    return None


def _local_bundle(config: Config, anchor: TrustAnchor) -> tuple[str, str] | None:
    base = None
    row = of_source(config.source) if config.source else None
    if row is not None and row.kind == "local":
        from llmkube_stager.sources.local import local_path

        base = local_path(config.source)
        if not config.multi_file:
            base = os.path.dirname(base)
    path = local_bundle_path(anchor.signature, base)
    if path is None:
        return None
    small = read_small(path, _MAX_BUNDLE_BYTES)
    if small.data is None:
        return ("", path)  # gone: not the bundle that was verified
    import hashlib  # only with an anchor: a plan without one loads no OpenSSL

    return hashlib.sha256(small.data).hexdigest(), path


def recorded_signatures(root: str) -> list[dict[str, object]]:
    """`inspect`: every verification record in the directory, as recorded
    (no anchor to judge them against)."""
    found = []
    try:
        names = sorted(
            n
            for n in os.listdir(root)
            if n.startswith(SIGNATURE_RECORD_NAME) and not n.endswith(KEPT_SUFFIX)
        )
    except OSError:
        return []
    for name in names:
        recorded = read_verification(os.path.join(root, name))
        kept = read_kept(os.path.join(root, name))
        if recorded is None:
            found.append({"record": name, "valid": False})
            continue
        found.append(
            {
                "record": name,
                "valid": True,
                # #40 item 2: what a reader with an anchor refuses, named.
                "unsigned": _unsigned(root, recorded) if name == SIGNATURE_RECORD_NAME else [],
                "anchor": recorded.anchor_fingerprint[:16],
                "signature": recorded.signature,
                "bundle_sha256": recorded.bundle_sha256,
                "signed_files": len(recorded.files),
                # #40 item 3: the bundle every reader checks the record against.
                "bundle_kept": kept is not None,
                # #40 item 7: what LLMKUBE_SIGNED_DIGEST would pin.
                "statement_sha256": _statement_of(kept),
            }
        )
    return found


def _unsigned(root: str, recorded: Verification) -> list[str]:
    """Files beside a signed set that its statement does not sign (nor
    leaves out by its own rule: git paths, the bundle)."""
    from llmkube_stager.staging.bundle import SignedSet
    from llmkube_stager.staging.signed import strays_of

    signed = SignedSet(recorded.files, recorded.method, recorded.ignore_paths)
    if signed.one_file:
        return []  # one file signed as '.' (KServe's archive): no names to judge by
    bundle_rel = _bundle_rel(recorded.signature)
    return [rel for rel in strays_of(root, recorded.files) if not signed.ignores(rel, bundle_rel)]


def _bundle_rel(signature: str) -> str:
    """The bundle's path in the model's directory ("": it is elsewhere)."""
    return "" if signature.startswith(("/", "http://", "https://")) else signature


def _statement_of(kept: bytes | None) -> str:
    from llmkube_stager.staging.envelope import statement_sha256

    if kept is None:
        return ""
    try:
        return statement_sha256(kept)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return ""
