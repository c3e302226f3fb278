"""`llmkube-stager SRC_URI DEST_DIR [SRC_URI DEST_DIR ...]` (#24 item 1).

Each pair is staged by the engine of `stage` (stage.run_stage) into the
pair's private model directory, then exposed in DEST_DIR (expose.py) or,
for an archive, unpacked into it (archive.py). Pairs run in turn, as
KServe's Storage.download_files does. Every pair's configuration is checked
before the first byte moves, so a bad second URI fails the run with
InvalidConfiguration (exit 2) and nothing on disk. One termination message
for the run: the first failure, or the sum of every pair's stats.

Imports no click (entry.py dispatches here first): a warm start stays cheap.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, NoReturn

from llmkube_stager.boundary import Boundary, Flags, cancel_on_sigterm, no_flags
from llmkube_stager.config import Config
from llmkube_stager.errors import ConfigError, SignatureError, StagerError
from llmkube_stager.kserve.uris import Pair, parse_pairs
from llmkube_stager.schemes import of_source


def kserve_command(args: list[str]) -> NoReturn:
    pairs_or_error: tuple[Pair, ...] | ConfigError
    try:
        pairs_or_error = parse_pairs(args, os.getcwd())
    except ConfigError as err:
        pairs_or_error = err
    first = _flags(pairs_or_error[0]) if isinstance(pairs_or_error, tuple) else no_flags()
    boundary = Boundary(first, os.environ, terminate=True)
    boundary.words = "kserve"  # _in_kserve_words below
    cancel_on_sigterm()

    def body() -> dict[str, Any]:
        if isinstance(pairs_or_error, ConfigError):
            raise pairs_or_error
        _refuse_confidential(os.environ)
        # The model directory is the pair's private one (#31 item 4: a listed
        # `x.sha256` is then a file like any other, layout.staged_rel).
        configs = [
            replace(boundary.config(_flags(pair)), kserve_mode=True) for pair in pairs_or_error
        ]
        return _stage_all(boundary, pairs_or_error, configs)

    boundary.run(lambda: _in_kserve_words(body))


def _in_kserve_words(body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A failure names what an InferenceService has, never LLMKube's spec.*
    fields (#31 item 5): translated here, once, before the boundary reports it."""
    from llmkube_stager.kserve.words import kserve_remedy, kserve_words

    try:
        return body()
    except StagerError as err:
        err.detail = kserve_words(err.detail)
        err._remedy = kserve_remedy(err.remedy)  # one error, reworded once
        raise
    except OSError as exc:
        # What the boundary would make of it (a fault of the volume), reworded too.
        from llmkube_stager.cache.disk import storage_fault

        where = exc.filename if isinstance(exc.filename, str) else ""
        fault = storage_fault(exc, f"using {where}" if where else "using the cache")
        if fault is None:
            raise
        fault._remedy = kserve_remedy(fault.remedy)
        raise fault from None


def _refuse_confidential(environ: Mapping[str, str]) -> None:
    """KServe's webhook sets CONFIDENTIAL_ENABLED for an InferenceService
    annotated for confidential model serving: its initializer then decrypts
    the model (kserve-decrypt). This image does not; the server must never
    get still-encrypted bytes (#31 item 11)."""
    if environ.get("CONFIDENTIAL_ENABLED", "").strip().lower() == "true":
        raise ConfigError(
            "CONFIDENTIAL_ENABLED=true: this InferenceService asks for confidential model serving, "
            "whose models KServe's own initializer decrypts; this image does not decrypt and "
            "stages nothing rather than hand the model server encrypted bytes: name KServe's "
            "default ClusterStorageContainer with the predictor's storageContainerName"
        )


def _flags(pair: Pair) -> Flags:
    return {**no_flags(), **pair.flags}


def _stage_all(
    boundary: Boundary, pairs: tuple[Pair, ...], configs: list[Config]
) -> dict[str, Any]:
    from llmkube_stager.cache.fs import probe_fs_quick
    from llmkube_stager.logs import display_url
    from llmkube_stager.model import Outcome
    from llmkube_stager.staging import Effects
    from llmkube_stager.termination import log_staged, success_doc

    effects = Effects(log=boundary.log, probe_fs=probe_fs_quick)
    results: list[Any] = []
    seconds = 0.0
    shown: list[str] = []
    for pair, config in zip(pairs, configs, strict=True):
        boundary.source = display_url(pair.uri)
        outcome, display = _stage_pair(boundary, pair, config, effects)
        results.extend(outcome.results)
        seconds += outcome.seconds
        shown.append(display)
    total = Outcome(tuple(results), seconds)
    source = shown[0] if len(shown) == 1 else f"{shown[0]} (+{len(shown) - 1} more)"
    doc = success_doc(total, source)
    log_staged(boundary.log, doc, total)
    return doc


def _stage_pair(boundary: Boundary, pair: Pair, config: Config, effects: Any) -> tuple[Any, str]:
    from llmkube_stager.cache.disk import ensure_dir
    from llmkube_stager.kserve.uris import PRIVATE_DIR
    from llmkube_stager.logs import display_url
    from llmkube_stager.model import Decision, FileResult, Outcome
    from llmkube_stager.staging import run_stage
    from llmkube_stager.unpack.archive import tidy, unpacked_record

    done = unpacked_record(pair.private, pair.uri, pair.dest)
    if done is not None:
        tidy(pair.private, done)
        # A warm restart of an unpacked archive (an http(s) URL, an s3://
        # key or the one object of a prefix): nothing to fetch or move.
        # One result repeated: a 100,000-member archive's warm start holds
        # no object per file (#31 item 6).
        results = (FileResult(display_url(pair.uri), Decision.REUSE),) * done.files
        boundary.log.info("unpacked_hit", f"{done.files} unpacked files in {pair.dest}")
        return Outcome(results, 0.0), display_url(pair.uri)
    # The private directory first: a TMPDIR there (a read-only root
    # filesystem's only writable place, docs/kubernetes/kserve/) exists
    # before botocore writes its CA bundle.
    ensure_dir(pair.private, pair.dest, PRIVATE_DIR)
    try:
        prepared, outcome = run_stage(config, effects)
    except SignatureError as err:
        raise _signed_archive_words(pair, err) from None
    manifest = prepared.manifest
    files = [(f.rel, f.dest) for f in manifest.files]
    archive = _archive_of(pair, [f for f in files if f[0] != _bundle_rel(config)])
    if archive is not None:
        _unpack(boundary, pair, config, archive)
    else:
        _expose(boundary, pair, files, drop=config.refresh_policy == "OnChange")
    return outcome, manifest.display_source


def _bundle_rel(config: Config) -> str:
    """The signature bundle's name among a listing's files (#34: model.sig
    beside the model): not a second object of the model, so a signed
    archive alone under a prefix is still the one object KServe unpacks.
    '' without an anchor, or with the bundle at a path or URL of its own."""
    anchor = config.signing
    if anchor is None or anchor.signature.startswith(("/", "http://", "https://")):
        return ""
    return anchor.signature


def _signed_archive_words(pair: Pair, err: SignatureError) -> SignatureError:
    """An archive KServe unpacks is verified as one file: the bundle must
    sign the archive object itself, checked on the digest taken while it
    was received, before a member is unpacked (#34 in KServe mode). A
    bundle of the unpacked tree is not verified: its members would reach
    DEST_DIR before their digests were checked. Said in those words when
    the signed set is not the archive."""
    from urllib.parse import urlsplit

    from llmkube_stager.errors import REMEDY_SIGNATURE_FILES
    from llmkube_stager.unpack.archive import archive_kind

    name = pair.archive_name or posixpath.basename(urlsplit(pair.uri).path)
    if archive_kind(name) is None or err.remedy != REMEDY_SIGNATURE_FILES:
        return err
    if "signed set" not in err.detail:
        return err
    return err.amended(
        detail=(
            f"{err.detail}; KServe unpacks {name}: the agent verifies the archive as one file "
            "before unpacking it, so the publisher must sign the archive file itself "
            "(`model_signing sign` on the archive file, or over a directory holding only the "
            "archive; its model.sig beside it), not the unpacked tree"
        )
    )


def _archive_of(pair: Pair, files: list[tuple[str, str]]) -> tuple[str, str, str] | None:
    """(rel, staged path, kind) of the archive KServe would unpack: the one
    file it fetched, a URL or the one object of an s3:// prefix beside empty
    ones (`_SUCCESS` markers: KServe skips empty objects, #31 item 1);
    never a Hugging Face repo's file (its _download_hf does not unpack, #24
    review)."""
    from llmkube_stager.unpack.archive import archive_kind

    row = of_source(pair.uri)
    if row is not None and row.kserve == "repo":
        return None
    filled = files
    if len(files) > 1:
        filled = []
        for rel, path in files:
            if os.stat(path).st_size > 0:
                filled.append((rel, path))
                if len(filled) > 1:
                    return None
    if len(filled) != 1:
        return None
    rel, path = filled[0]
    kind = archive_kind(pair.archive_name or rel)
    return None if kind is None else (rel, path, kind)


def _expose(boundary: Boundary, pair: Pair, files: list[tuple[str, str]], drop: bool) -> None:
    from llmkube_stager.kserve.expose import drop_stale, expose

    linked = expose(pair.dest, pair.private, files)
    if linked:
        boundary.log.info(
            "exposed", f"Linked {linked} file(s) into {pair.dest}", path=pair.dest, files=linked
        )
    # Only OnChange can change a pair's set in place (IfNotPresent keeps its
    # recorded listing or commit): a warm start walks nothing (#16).
    dropped = drop_stale(pair.dest, pair.root, (rel for rel, _ in files)) if drop else 0
    if dropped:
        boundary.log.info(
            "unexposed",
            f"Removed {dropped} file(s) the source no longer has from {pair.dest}",
            path=pair.dest,
            files=dropped,
        )


def _unpack(boundary: Boundary, pair: Pair, config: Config, archive: tuple[str, str, str]) -> None:
    from llmkube_stager.cache.disk import disk_error
    from llmkube_stager.unpack.archive import unpack
    from llmkube_stager.unpack.members import ArchiveLimits

    rel, path, kind = archive
    limits = ArchiveLimits(config.archive_max_bytes, config.archive_max_files)
    try:
        done = unpack(path, rel, kind, pair.uri, pair.dest, limits)
    except OSError as exc:
        translated = disk_error(exc, "unpacking", rel)
        if isinstance(translated, OSError):
            raise
        raise translated from None
    boundary.log.info(
        "unpacked",
        f"Unpacked {done.files} files of {rel} into {pair.dest}",
        files=done.files,
        size_bytes=done.size_bytes,
    )
