"""`verify`: prove, read-only and offline, that the cache holds the model.

"The mount succeeded" is no evidence (seed-003: a reader bound a new, empty
volume and nothing alerted). Every expected file must exist, be a regular
file, match its size record, and match its sha256 pin where there is one; and
the files must be one set, as `stage` judges it (cache/setstate.py: no
publish in progress, one commit; #21 items 3, 4).
Writes nothing (not even a stamp), opens no connection.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from llmkube_stager.cache.disk import is_volume_fault
from llmkube_stager.cache.runrecord import read_run_record
from llmkube_stager.cache.setstate import judge_set
from llmkube_stager.cache.state import read_local_file
from llmkube_stager.config import Config
from llmkube_stager.errors import (
    REMEDY_LEADS_OUTSIDE,
    REMEDY_SIGNATURE_RECORD,
    REMEDY_UNREADABLE,
    REMEDY_VERIFY_CHECKSUM,
    CacheError,
    ConfigError,
    Reason,
    SignatureError,
    TransferError,
)
from llmkube_stager.layout import LOCK_NAME, dest_path, destinations
from llmkube_stager.logs import Log
from llmkube_stager.model import LocalState, PinState
from llmkube_stager.plan import model_source_id, source_refusal
from llmkube_stager.schemes import of_source

# What an "empty" volume holds: filesystem furniture and our own lock file.
_FURNITURE = frozenset({"lost+found", ".snapshot", LOCK_NAME})


@dataclass
class VerifyReport:
    root: str
    checked: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    short: list[str] = field(default_factory=list)
    unrecorded: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    # Present but not for this uid (#11 item 5, 6), or not a regular file
    # inside the model directory (#11 item 1): never "missing".
    unreadable: list[str] = field(default_factory=list)
    not_files: list[str] = field(default_factory=list)
    # Why the files, each fine on its own, are not one set: a publish in
    # progress, two commits (#21 items 3, 4; the judgement `stage` makes),
    # files of another source (#46 item 2).
    refusal: CacheError | ConfigError | None = None
    # #34 item 4: the signature's state where a trust anchor is set.
    signature: str = ""


def _expected(config: Config) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(root, (rel, dest)...): MODEL_FILES / MODEL_PATH, or for a listed
    source the listing this directory recorded (#24 item 5); without one
    nothing was ever staged here."""
    if not config.listed:
        return destinations(config.cache_dir, config.model_path, config.model_files)
    from llmkube_stager.cache.listrec import read_listing

    root = config.cache_dir
    listing = read_listing(root)
    if listing is None or not listing.files:
        raise CacheError(
            f"the model directory {root} holds no recorded listing of {config.source}",
            reason=Reason.CACHE_EMPTY,
        )
    return root, tuple((f.rel, dest_path(root, f.rel)) for f in listing.files)


def _is_empty_dir(root: str) -> bool:
    try:
        return not (set(os.listdir(root)) - _FURNITURE)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError as exc:
        if is_volume_fault(exc):
            raise  # the volume's reason (the boundary's translation, #21 item 7)
        raise CacheError(
            f"the model directory {root} cannot be listed: {os.strerror(exc.errno or 0)}",
            reason=Reason.CACHE_INCOMPLETE,
            remedy=REMEDY_UNREADABLE,
        ) from None


def check_files(config: Config) -> VerifyReport:
    root, pairs = _expected(config)
    report = VerifyReport(root)
    if _is_empty_dir(root):
        raise CacheError(
            f"the model directory {root} is missing or empty",
            reason=Reason.CACHE_EMPTY,
        )
    row = of_source(config.source)
    follow = row is not None and row.verify_only
    pins = _signed_pins(config, report, tuple(rel for rel, _ in pairs))
    for rel, dest in pairs:
        local = read_local_file(rel, dest, pins.get(rel), None, root, follow)
        if local.state is LocalState.UNREADABLE:
            report.unreadable.append(f"{rel} ({local.detail})")
        elif local.state is LocalState.NOT_A_FILE:
            report.not_files.append(f"{rel} ({local.detail})")
        elif not local.present:
            report.missing.append(rel)
        elif local.pin is PinState.MISMATCH:
            report.mismatched.append(rel)
        elif local.state is LocalState.MISMATCH and not local.usable:
            report.short.append(f"{rel} (size {local.size_bytes}, record {local.record_bytes})")
        else:
            if local.state is LocalState.LEGACY and local.pin is PinState.UNPINNED:
                report.unrecorded.append(rel)
            report.checked.append(rel)
    record = read_run_record(root)
    # #46 item 2: files of another source are not this model, however
    # whole (plan.source_refusal); MODEL_SOURCE is optional here.
    report.refusal = source_refusal(
        root,
        record.source,
        model_source_id(config.source),
        any_present=bool(report.checked or report.short or report.mismatched),
        all_pinned=all(rel in pins for rel, _ in pairs),
    ) or judge_set(record, root)
    return report


def _signed_pins(config: Config, report: VerifyReport, rels: tuple[str, ...]) -> dict[str, str]:
    """With a trust anchor: the record must fit it (a refusal, before any
    file is read), and each file is checked against its signed digest
    (#34 item 4). The directory must hold the signed set and nothing
    unsigned beside it, the check `stage` makes (#40 item 2)."""
    if config.signing is None:
        return dict(config.pins)
    from llmkube_stager.commands.signature import pins_of, refuse, signature_state
    from llmkube_stager.staging.signed import refuse_strays

    state = signature_state(config, report.root, rels)
    refuse(state)
    refuse_strays(report.root, rels, multi_file=config.multi_file)
    report.signature = state.line()
    return pins_of(config, state)


def judge(report: VerifyReport, strict: bool, log: Log) -> None:
    """Raise the most telling failure; warn about what cannot be proven."""
    _judge_unusable(report)
    if report.refusal is not None:
        raise report.refusal
    if report.missing and not (report.checked or report.short or report.mismatched):
        raise CacheError(
            f"none of the model's files are in {report.root}: {_names(report.missing)}",
            reason=Reason.CACHE_EMPTY,
            file=report.missing[0],
        )
    problems = [f"missing: {_names(report.missing)}"] if report.missing else []
    if report.short:
        problems.append(f"not matching their size records: {_names(report.short)}")
    if strict and report.unrecorded:
        problems.append(f"without a size record: {_names(report.unrecorded)}")
    if problems:
        first = (report.missing or report.short or report.unrecorded)[0]
        raise CacheError(
            "; ".join(problems), reason=Reason.CACHE_INCOMPLETE, file=first.split(" ")[0]
        )
    if report.mismatched and report.signature:
        raise SignatureError(
            f"{_names(report.mismatched)} do not have the sha256 their signature gives them",
            file=report.mismatched[0],
            remedy=REMEDY_SIGNATURE_RECORD,
        )
    if report.mismatched:
        raise TransferError(
            f"spec.sha256/spec.fileSha256 mismatch for {_names(report.mismatched)}",
            reason=Reason.CHECKSUM_MISMATCH,
            file=report.mismatched[0],
            remedy=REMEDY_VERIFY_CHECKSUM,
        )
    for rel in report.unrecorded:
        log.warning(
            "no_size_record",
            f"no valid size record for {rel}; completeness cannot be proven offline",
            file=rel,
        )


def _judge_unusable(report: VerifyReport) -> None:
    """What is there but cannot be used says more than what is missing."""
    for found, what, remedy in (
        (report.unreadable, "not readable by this uid", REMEDY_UNREADABLE),
        (report.not_files, "not regular files inside the model directory", REMEDY_LEADS_OUTSIDE),
    ):
        if found:
            raise CacheError(
                f"{what}: {_names(found)}",
                reason=Reason.CACHE_INCOMPLETE,
                file=found[0].split(" ")[0],
                remedy=remedy,
            )


def _names(items: list[str], limit: int = 20) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
