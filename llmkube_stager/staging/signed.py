"""The gate of a signed model (#34 items 2, 3): with a trust anchor set,
the signed digests become the files' pins before anything is fetched.

- The record of an earlier verification (cache/sigrecord.py) serves an
  IfNotPresent warm start offline: it must name this anchor (and this
  bundle, where the bundle is local), and its digests are the pins the
  files' stamps are checked against (milliseconds, no byte read).
- Otherwise the bundle is read from the source (model.sig beside the
  model, or LLMKUBE_SIGNATURE), verified against the anchor
  (staging/bundle.py), and the staged set must equal the signed set under
  model-signing's ignore rules; each file's pin is then its signed digest,
  checked on the digest computed while the file was received
  (acting/work.py), and the set is published whole (acting/executor.py) or
  not at all. The record is written after the last rename (staging/run.py).

A changed anchor or bundle on an IfNotPresent warm start, and a reader that
may not write (a serving pod on FUSE) finding no record that fits, are
refusals: never a silent pass, never a re-verification from the network.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace

from llmkube_stager.cache.safeio import read_small, walk_files
from llmkube_stager.cache.sigrecord import (
    UNVERIFIED,
    Verification,
    read_kept,
    read_verification,
    record_path,
    record_problem,
)
from llmkube_stager.config import Config
from llmkube_stager.config.anchor import TrustAnchor, local_bundle_path
from llmkube_stager.errors import (
    REMEDY_SIGNATURE_FILES,
    REMEDY_SIGNATURE_RECORD,
    REMEDY_SIGNATURE_STRAY,
    REMEDY_SIGNATURE_UNSIGNED,
    Reason,
    SignatureError,
    StagerError,
)
from llmkube_stager.layout import (
    EVIDENCE_SUFFIX,
    LEGACY_PARTIAL_SUFFIX,
    SIZE_RECORD_SUFFIX,
    STAMP_SUFFIX,
    is_reserved_name,
)
from llmkube_stager.logs import Log, display_url
from llmkube_stager.model import Manifest
from llmkube_stager.sources.base import Body
from llmkube_stager.staging.bundle import MAX_BUNDLE_BYTES, SignedSet, too_large
from llmkube_stager.staging.prepare import Prepared, replan

# Every name the agent keeps at a model's root begins so (layout.py).
_OWN_PREFIX = ".llmkube"
# The agent's records beside a staged file: its stamp, size record, stamp
# evidence, a legacy partial (layout.py); anything else of the agent's
# carries a reserved marker (layout.is_reserved_name).
_BESIDE = (STAMP_SUFFIX, SIZE_RECORD_SUFFIX, EVIDENCE_SUFFIX, LEGACY_PARTIAL_SUFFIX)


def signature_record(prepared: Prepared) -> str:
    manifest = prepared.manifest
    rels = tuple(f.rel for f in manifest.files)
    return record_path(manifest.root, rels, manifest.multi_file)


def gate(
    config: Config, anchor: TrustAnchor, prepared: Prepared, log: Log
) -> tuple[Prepared, Verification | None]:
    """The plan with signed pins, and the verification to record once the
    set is published (None: the record in the cache already says it).
    `anchor`: the configuration's (`config.signing`), which the caller
    checked is set: passed, not asserted again (`python -O` strips asserts)."""
    recorded = read_verification(signature_record(prepared))
    local = _local_bundle(anchor, prepared)
    if config.refresh_policy == "IfNotPresent" or not prepared.strategy.may_write:
        warm = _from_record(config, anchor, prepared, recorded, local)
        if warm is not None:
            refuse_strays_of(warm.manifest)
            log.info("signature_recorded", "the model's signature was verified when staged")
            return warm, None
    data, shown = local if local is not None else _fetch_bundle(config, anchor, prepared, log)
    from llmkube_stager.staging.bundle import verify_bundle  # imports model-signing

    signed = verify_bundle(data, anchor, shown)
    for note in signed.notes:
        log.warning("signature_note", f"model-signing: {note}")
    pinned = _pinned(config, prepared, signed, anchor)
    refuse_strays_of(pinned.manifest)
    log.info("signature_verified", f"the signature {shown} verifies against the trust anchor")
    files = {f.rel: f.sha256 or "" for f in pinned.manifest.files if f.signed}
    if signed.one_file and pinned.manifest.multi_file:
        files = dict(signed.files)  # the statement's '.', as the kept bundle says
    digest = hashlib.sha256(data).hexdigest()
    verification = Verification(
        digest, anchor.fingerprint, signed.method, files, shown, signed.ignore_paths, data
    )
    return pinned, verification


def gate_prestaged(config: Config, anchor: TrustAnchor, prepared: Prepared, log: Log) -> Prepared:
    """A pre-staged model (pvc://, verified where its claim is mounted):
    with an anchor set it is verified against its bundle or refused, never
    "verified" with the key unused (#40 item 1). The bundle is read beside
    the mounted file (or where LLMKUBE_SIGNATURE points) on every start: no
    record is written on a read-only claim, so none is trusted either. The
    file's pin becomes its signed digest; the caller's check of the pin
    hashes it (staging/run.py)."""
    data, shown = _local_bundle(anchor, prepared) or _fetch_bundle(config, anchor, prepared, log)
    from llmkube_stager.staging.bundle import verify_bundle  # imports model-signing

    signed = verify_bundle(data, anchor, shown)
    for note in signed.notes:
        log.warning("signature_note", f"model-signing: {note}")
    log.info("signature_verified", f"the signature {shown} verifies against the trust anchor")
    return _pinned(config, prepared, signed, anchor)


def _from_record(
    config: Config,
    anchor: TrustAnchor,
    prepared: Prepared,
    recorded: Verification | None,
    local: tuple[bytes, str] | None,
) -> Prepared | None:
    """The plan pinned by the record, offline; None when a writer verifies
    from the source instead: no record yet (a first signed start), a record
    of another file set (MODEL_FILES changed), files to stage. A record of
    another anchor or bundle is a refusal (#34 item 3), and so is anything
    short of a fitting record for a reader that may not write (item 4)."""
    may_write = prepared.strategy.may_write
    if recorded is None:
        if may_write:
            return None
        raise SignatureError(UNVERIFIED, remedy=REMEDY_SIGNATURE_RECORD)
    seen = None if local is None else (hashlib.sha256(local[0]).hexdigest(), local[1])
    problem = record_problem(recorded, anchor.fingerprint, seen, chain=anchor.kind == "certs")
    if problem is not None:
        raise SignatureError(problem, remedy=REMEDY_SIGNATURE_RECORD)
    if not _kept_vouches(anchor, prepared, recorded):
        return None  # no kept bundle (a record of an older agent): a writer verifies again
    signed = SignedSet(recorded.files, recorded.method, recorded.ignore_paths)
    try:
        warm = _pinned(config, prepared, signed, anchor)
    except SignatureError as err:
        if may_write:
            return None
        raise err.amended(detail=f"against the recorded verification: {err.detail}") from None
    return None if warm.plan.writes and may_write else warm


def refuse_strays_of(manifest: Manifest) -> None:
    refuse_strays(manifest.root, (f.rel for f in manifest.files), multi_file=manifest.multi_file)


def refuse_strays(root: str, rels: Iterable[str], *, multi_file: bool) -> None:
    """Refuse a model directory that holds anything beside the staged set
    `rels` and the agent's own records (#40 item 2): an inference server
    loads the directory, not the manifest, so an unsigned file there (a run
    without a key, a file the source no longer lists, another writer's) is
    served as if signed. Refused, not moved out: docs/reliability.md says
    why. A single file's directory is shared by other models: not judged.
    The one check of `stage` (writer and reader) and `verify`."""
    if not multi_file:
        return
    strays = strays_of(root, rels)
    if strays:
        raise SignatureError(
            f"the model's directory holds what the signature does not sign: {_few(strays)} "
            "not signed (refused, not served)",
            file=strays[0],
            remedy=REMEDY_SIGNATURE_STRAY,
        )


def strays_of(root: str, rels: Iterable[str]) -> list[str]:
    """What the directory holds beside `rels` and the agent's records."""
    return sorted(_strays(root, set(rels)))


def _strays(root: str, staged: set[str]) -> Iterator[str]:
    # A staged file's own records by name first: one set lookup each on a
    # warm start of thousands of files (#40 item 3's budget).
    known = set(staged)
    for rel in staged:
        known.update(rel + suffix for suffix in _BESIDE)
    for directory, entries in walk_files(root):
        base = os.path.relpath(directory, root)
        if base != "." and any(p.startswith(_OWN_PREFIX) for p in base.split(os.sep)):
            continue  # the agent's own directories (writers' entries, KServe's)
        for entry in entries:
            rel = entry.name if base == "." else f"{base}/{entry.name}"
            if rel in known or entry.name.startswith(_OWN_PREFIX):
                continue
            if not is_reserved_name(entry.name):
                yield rel


def _kept_vouches(anchor: TrustAnchor, prepared: Prepared, recorded: Verification) -> bool:
    """The kept bundle's signature checked against the anchor, and the
    record against its statement (#40 item 3): one signature check, no
    file hashed. False: no kept bundle, and the caller may write (it
    verifies from the source); a kept bundle that fails is a refusal."""
    from llmkube_stager.staging.envelope import kept_problem, pin_problem

    kept = read_kept(signature_record(prepared))
    may_write = prepared.strategy.may_write
    if kept is None:
        if may_write:
            return False
        problem: str | None = "no signature bundle is kept beside the record"
    elif may_write and pin_problem(kept, anchor) is not None:
        # Another statement than the pinned one (a new pin, or a cache
        # rolled back by another writer): a writer verifies the source's
        # bundle, whose statement must then be the pinned one (#40 item 7).
        return False
    else:
        problem = kept_problem(kept, anchor, recorded, named=prepared.manifest.multi_file)
    if problem is not None:
        raise SignatureError(problem, remedy=REMEDY_SIGNATURE_RECORD)
    return True


def _pinned(config: Config, prepared: Prepared, signed: SignedSet, anchor: TrustAnchor) -> Prepared:
    manifest = signed_manifest(
        prepared.manifest, signed, _bundle_rel(anchor), one_object=config.kserve_mode
    )
    return replan(config, replace(prepared, manifest=manifest))


def signed_manifest(
    manifest: Manifest, signed: SignedSet, bundle_rel: str, *, one_object: bool = False
) -> Manifest:
    """The manifest with each file pinned to its signed digest; refused
    when the staged set is not the signed set (#34 item 2). `one_object`:
    KServe's form, where the one object of a storageUri's prefix (an
    archive it unpacks) may be signed as a file, like a single file."""
    digests = _digests_for(manifest, signed, bundle_rel, one_object)
    files = []
    for file in manifest.files:
        digest = digests.get(file.rel)
        if digest is None:
            files.append(file)
            continue
        if file.sha256 is not None and file.sha256 != digest:
            raise SignatureError(
                f"the pin of {file.rel} ({file.sha256}) and its signed sha256 ({digest}) disagree",
                file=file.rel,
                remedy=REMEDY_SIGNATURE_FILES,
            )
        files.append(replace(file, sha256=digest, signed=True))
    return replace(manifest, files=tuple(files))


def _digests_for(
    manifest: Manifest, signed: SignedSet, bundle_rel: str, one_object: bool
) -> Mapping[str, str]:
    if manifest.multi_file and one_object and signed.one_file:
        # KServe's form: an archive alone under a prefix, signed as the
        # archive file (#40 item 4); checked on its digest before a member
        # is unpacked (kserve/command.py unpacks after the run).
        objects = [f.rel for f in manifest.files if not signed.ignores(f.rel, bundle_rel)]
        if len(objects) != 1:
            raise _differs(
                objects[0] if objects else ".",
                f"the signature signs one file, and {len(objects)} objects are staged",
            )
        return {objects[0]: signed.files["."]}
    if not manifest.multi_file:
        # One file: its name in the cache is the operator's (MODEL_PATH),
        # so the statement must sign exactly one file, whatever its name.
        if len(signed.files) != 1:
            raise _differs(
                manifest.files[0].rel,
                f"the signature signs {len(signed.files)} files, not one file",
            )
        return {manifest.files[0].rel: next(iter(signed.files.values()))}
    if bundle_rel and bundle_rel in signed.files:
        # A statement that signs the bundle's own name (an old model.sig in
        # the signed directory): the bundle is never a file of the model,
        # so this set can never be staged; said as what it is.
        raise _differs(
            bundle_rel,
            f"the signature signs {bundle_rel!r}, the name of the signature bundle itself (sign "
            "the model without a bundle in its directory, or point LLMKUBE_SIGNATURE elsewhere)",
        )
    staged = {f.rel for f in manifest.files if not signed.ignores(f.rel, bundle_rel)}
    unsigned = sorted(staged - set(signed.files))
    missing = sorted(set(signed.files) - staged)
    if unsigned:
        raise _differs(unsigned[0], f"{_few(unsigned)} staged but not signed")
    if missing:
        raise _differs(missing[0], f"{_few(missing)} signed but not staged (removed or renamed)")
    return {rel: signed.files[rel] for rel in staged}


def _few(rels: list[str]) -> str:
    shown = ", ".join(repr(r)[:120] for r in rels[:5])
    more = f" and {len(rels) - 5} more" if len(rels) > 5 else ""
    return f"{shown}{more} {'is' if len(rels) == 1 else 'are'}"


def _differs(rel: str, why: str) -> SignatureError:
    return SignatureError(
        f"the files to stage are not the signed set: {why}",
        file=rel,
        remedy=REMEDY_SIGNATURE_FILES,
    )


def _bundle_rel(anchor: TrustAnchor) -> str:
    """The bundle's name when it lies among the model's files."""
    return "" if anchor.signature.startswith(("/", "http://", "https://")) else anchor.signature


def _local_bundle(anchor: TrustAnchor, prepared: Prepared) -> tuple[bytes, str] | None:
    """The bundle's bytes where they are read without a network: an absolute
    LLMKUBE_SIGNATURE (a mounted Secret) or beside a local source's model.
    None where the bundle is remote."""
    # A pvc:// claim is a local directory where it is mounted (#40 item 1).
    local = _local_base(prepared) if prepared.manifest.kind in ("local", "pvc") else None
    path = local_bundle_path(anchor.signature, local)
    if path is None:
        return None
    return read_bundle(path), path


def _local_base(prepared: Prepared) -> str:
    first = prepared.manifest.files[0]
    if prepared.manifest.multi_file:
        return first.url[: len(first.url) - len(first.rel)].rstrip("/") or "/"
    return posixpath.dirname(first.url)


def read_bundle(path: str) -> bytes:
    small = read_small(path, MAX_BUNDLE_BYTES)
    if small.too_large:
        raise too_large(path)
    if small.data is None:
        raise SignatureError(
            f"no signature bundle at {path}",
            reason=Reason.SIGNATURE_INVALID,
            remedy=REMEDY_SIGNATURE_UNSIGNED,
        )
    return small.data


def _fetch_bundle(
    config: Config, anchor: TrustAnchor, prepared: Prepared, log: Log
) -> tuple[bytes, str]:
    """The bundle read through the source's own client (its credentials,
    its endpoint): model.sig beside the model, or an http(s) URL."""
    from llmkube_stager.sources import open_source

    derived = _bundle_config(config, anchor, prepared)
    source = open_source(derived, log)
    file = source.manifest().files[0]
    shown = display_url(file.url)
    fetcher = source.fetcher()
    try:
        meta = fetcher.probe(file)
        body = fetcher.open(file, meta, 0)
        try:
            return _read_body(body, shown), shown
        finally:
            body.close()
    except StagerError as err:
        if err.reason is Reason.SOURCE_NOT_FOUND:
            raise SignatureError(
                f"no signature bundle at {shown}: {err.detail}",
                remedy=REMEDY_SIGNATURE_UNSIGNED,
            ) from None
        raise
    finally:
        fetcher.close()


def _read_body(body: Body, shown: str) -> bytes:
    buffer = bytearray(1 << 16)
    view = memoryview(buffer)
    chunks: list[bytes] = []
    total = 0
    while n := body.readinto(view):
        chunks.append(bytes(view[:n]))
        total += n
        if total > MAX_BUNDLE_BYTES:
            raise too_large(shown)
    return b"".join(chunks)


def _bundle_config(config: Config, anchor: TrustAnchor, prepared: Prepared) -> Config:
    """A configuration whose one file is the bundle: the model's source
    with the bundle's name as its file (multi-file), or beside the single
    file; an http(s) LLMKUBE_SIGNATURE as a source of its own. The
    destination is never written (the body is read into memory)."""
    scratch = os.path.join(prepared.manifest.root, ".llmkube-signature-bundle")
    if anchor.signature.startswith(("http://", "https://")):
        return replace(
            config,
            source=anchor.signature,
            model_files=(),
            model_path=scratch,
            listed=False,
            pins={},
        )
    source = config.source
    if not prepared.manifest.multi_file:
        source = _parent(prepared.manifest.kind, source)
    return replace(
        config,
        source=source,
        model_files=(anchor.signature,),
        model_path="",
        listed=False,
        pins={},
        s3_key="",
        s3_prefix=config.s3_prefix if prepared.manifest.multi_file else "",
    )


def _parent(kind: str, source: str) -> str:
    """Where a single file's directory is at the source. The URL's query is
    not part of its path (a '/' in a SAS signature is not a directory): an
    Azure blob's query is a SAS, the credential that reads its container,
    so the bundle's request carries it (#34, through every source); any
    other query signs one object only and is left out."""
    if kind == "hf" and source.startswith("hf://"):
        repo = source[len("hf://") :].split("/")
        return "hf://" + "/".join(repo[:2])
    path, mark, query = source.partition("?")
    parent = path.rsplit("/", 1)[0] + "/"
    return parent + mark + query if kind == "azure" else parent
