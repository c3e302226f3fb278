"""`verify`: prove, read-only and offline, that the cache holds the model.

"The mount succeeded" is no evidence (seed-003: a reader bound a new, empty
volume and nothing alerted). Every expected file must exist, be a regular
file, match its size record, and match its sha256 pin where there is one.
Writes nothing (not even a stamp), opens no connection.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from llmkube_stager.cache.state import read_local_file
from llmkube_stager.config import Config
from llmkube_stager.errors import CacheError, Reason, TransferError
from llmkube_stager.layout import LOCK_NAME, destinations
from llmkube_stager.logs import Log
from llmkube_stager.model import LocalState, PinState

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


def _is_empty_dir(root: str) -> bool:
    try:
        return not (set(os.listdir(root)) - _FURNITURE)
    except OSError:
        return True


def check_files(config: Config) -> VerifyReport:
    root, pairs = destinations(config.cache_dir, config.model_path, config.model_files)
    report = VerifyReport(root)
    if _is_empty_dir(root):
        raise CacheError(
            f"the model directory {root} is missing or empty",
            reason=Reason.CACHE_EMPTY,
        )
    for rel, dest in pairs:
        local = read_local_file(rel, dest, config.pins.get(rel))
        if not local.present:
            report.missing.append(rel)
        elif local.pin is PinState.MISMATCH:
            report.mismatched.append(rel)
        elif local.state is LocalState.MISMATCH and not local.usable:
            report.short.append(f"{rel} (size {local.size_bytes}, record {local.record_bytes})")
        else:
            if local.state is LocalState.LEGACY and local.pin is PinState.UNPINNED:
                report.unrecorded.append(rel)
            report.checked.append(rel)
    return report


def judge(report: VerifyReport, strict: bool, log: Log) -> None:
    """Raise the most telling failure; warn about what cannot be proven."""
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
    if report.mismatched:
        raise TransferError(
            f"spec.sha256/spec.fileSha256 mismatch for {_names(report.mismatched)}",
            reason=Reason.CHECKSUM_MISMATCH,
            file=report.mismatched[0],
        )
    for rel in report.unrecorded:
        log.warning(
            "no_size_record",
            f"no valid size record for {rel}; completeness cannot be proven offline",
            file=rel,
        )


def _names(items: list[str], limit: int = 20) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
