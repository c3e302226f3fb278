"""`inspect`: a read-only report of a cache directory.

Files with their size records and whether they match, sha256 stamps and
rejection markers, partials and temp debris with their ages (and whether the
sweep would take them), the filesystem (FUSE or not, driver, lock scope, free
space). Classifies by the names of spec §4.2; writes nothing.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import asdict, dataclass, field
from typing import Any

from llmkube_stager.cache.fs import probe_fs
from llmkube_stager.cache.records import read_record, stamp_status
from llmkube_stager.cache.safeio import kind_of, walk_files
from llmkube_stager.cache.sigrecord import SIGNATURE_RECORD_NAME
from llmkube_stager.cache.sweep import DEBRIS_AGE_S, FUTURE_SLACK_S, is_atomic_debris
from llmkube_stager.layout import (
    AGENT_PARTIAL_SUFFIXES,
    EVIDENCE_SUFFIX,
    LISTING_NAME,
    LOCK_NAME,
    MARKER_SUFFIX,
    SHARDS_NAME,
    SIZE_RECORD_SUFFIX,
    STAMP_SUFFIX,
    VALIDATORS_NAME,
)

_MARKER_RE = re.compile(r"^(?P<base>.+)\.(?P<digest>[0-9a-f]{64})" + re.escape(MARKER_SUFFIX) + "$")
_LEGACY_PARTIAL_RE = re.compile(r"^(?P<base>.+)\.[0-9a-f]{12}\.tmp$")
_STAMP_TMP_RE = re.compile(r"^.+\.sha256\.[A-Za-z0-9]{6}$")


@dataclass
class ModelFile:
    path: str
    size_bytes: int
    record_bytes: int | None
    record_matches: bool | None
    stamp: str  # "absent", "unreadable", "matches", "stale", "legacy", "contradicted",
    # "replaced" (#29 item 2)
    markers: list[str] = field(default_factory=list)
    # Why a record that exists gives no size: invalid (treated as absent) or
    # unreadable (the file is unusable), #11.
    record_problem: str = ""


@dataclass
class Leftover:
    path: str
    kind: str
    size_bytes: int
    age_s: float
    swept_by_writers: bool
    # Its mtime lies ahead of now: the next writer resets it to now (sweep.py).
    mtime_in_future: bool = False


@dataclass
class Odd:
    """Something that is not a regular file where the cache holds files."""

    path: str
    kind: str


@dataclass
class Report:
    root: str
    fs: dict[str, Any]
    files: list[ModelFile] = field(default_factory=list)
    leftovers: list[Leftover] = field(default_factory=list)
    lock_file: bool = False
    odd: list[Odd] = field(default_factory=list)
    # Publishes in progress (writer key -> files not in place yet) and what
    # a reader (`stage` read-only, `verify`) says of the set: #21 item 3.
    publishing: dict[str, list[str]] = field(default_factory=dict)
    refusal: dict[str, str] | None = None
    # #34 item 4: the verification records of signed models, as recorded.
    signatures: list[dict[str, object]] = field(default_factory=list)
    # What the run record says the model came from (#46 item 6): the source
    # (credentials removed), and for Hugging Face the revision and commit.
    origin: dict[str, str] = field(default_factory=dict)


def _leftover_kind(name: str) -> str | None:
    if name.endswith(AGENT_PARTIAL_SUFFIXES):
        return "partial"
    if _LEGACY_PARTIAL_RE.match(name):
        return "legacy-partial"
    if is_atomic_debris(name):
        return "atomic-temp"
    if _STAMP_TMP_RE.match(name):
        return "stamp-temp (never swept: delete by hand)"
    return None


def _is_metadata(name: str) -> bool:
    """The agent's own records, never listed as model files (the validators,
    written by every run since #46 item 1, were)."""
    return (
        name.endswith((SIZE_RECORD_SUFFIX, STAMP_SUFFIX, EVIDENCE_SUFFIX))
        or bool(_MARKER_RE.match(name))
        or name == LOCK_NAME
        or name.startswith((SIGNATURE_RECORD_NAME, VALIDATORS_NAME, SHARDS_NAME, LISTING_NAME))
    )


def _model_file(path: str, rel: str, st: os.stat_result, markers: list[str]) -> ModelFile:
    record = read_record(path)
    size = record.size_bytes
    return ModelFile(
        path=rel,
        size_bytes=st.st_size,
        record_bytes=size,
        record_matches=None if size is None else size == st.st_size,
        stamp=stamp_status(path, st),
        markers=markers,
        record_problem=record.problem,
    )


def inspect_dir(root: str, now_s: float) -> Report:
    fs = probe_fs(root)
    report = Report(root, {**asdict(fs), "lock_scope": fs.lock_scope})
    markers: dict[str, list[str]] = {}
    entries: list[tuple[str, str, os.stat_result]] = []
    for dirpath, found in walk_files(root):
        for entry in sorted(found, key=lambda e: e.name):
            path = os.path.join(dirpath, entry.name)
            marker = _MARKER_RE.match(entry.name)
            if marker:
                base = os.path.join(dirpath, marker.group("base"))
                markers.setdefault(base, []).append(marker.group("digest"))
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            entries.append((path, os.path.relpath(path, root), st))
    for path, rel, st in entries:
        _classify(report, path, rel, st, markers, now_s)
    _judge_set(report, root)
    from llmkube_stager.commands.signature import recorded_signatures

    report.signatures = recorded_signatures(root)
    return report


def _judge_set(report: Report, root: str) -> None:
    """The judgement every reader makes (cache/setstate.py)."""
    from llmkube_stager.cache.runrecord import read_run_record
    from llmkube_stager.cache.setstate import judge_set, pending_publishes

    record = read_run_record(root)
    run = record.run()
    recorded = {"source": record.source, "revision": run.revision, "commit": run.commit}
    report.origin = {key: value for key, value in recorded.items() if value}
    for pending in pending_publishes(record, root):
        report.publishing[pending.key] = [e.rel for e in pending.entries]
    err = judge_set(record, root)
    if err is not None:
        report.refusal = {"reason": err.reason.value, "detail": err.detail}


def _classify(
    report: Report,
    path: str,
    rel: str,
    st: os.stat_result,
    markers: dict[str, list[str]],
    now_s: float,
) -> None:
    name = os.path.basename(path)
    kind = _leftover_kind(name)
    if name == LOCK_NAME:
        report.lock_file = True
    elif kind is not None:
        age = now_s - st.st_mtime
        swept = not kind.startswith("stamp-temp") and age >= DEBRIS_AGE_S
        leftover = Leftover(rel, kind, st.st_size, round(max(0.0, age), 1), swept)
        leftover.mtime_in_future = age < -FUTURE_SLACK_S
        report.leftovers.append(leftover)
    elif not stat.S_ISREG(st.st_mode):
        report.odd.append(Odd(rel, kind_of(st.st_mode)))
    elif not _is_metadata(name):
        report.files.append(_model_file(path, rel, st, markers.get(path, [])))


def render(report: Report, as_json: bool) -> str:
    if as_json:
        return json.dumps(asdict(report), indent=2)
    fs = report.fs
    lines = [
        f"cache:  {report.root}",
        f"fs:     {fs['fstype']} (driver {fs['driver']}), fuse={fs['is_fuse']}, "
        f"read_only={fs['read_only']}, lock scope {fs['lock_scope']}, "
        f"free {_size(fs['free_bytes'])}, lock file {'present' if report.lock_file else 'absent'}",
    ]
    if report.origin:
        lines.append("from:   " + ", ".join(f"{k} {v}" for k, v in report.origin.items()))
    lines += ["", "FILES"]
    for f in report.files:
        record = "no record" if f.record_bytes is None else f"record {f.record_bytes}"
        if f.record_problem:
            record = f"record unusable: {f.record_problem}"
        verdict = {None: "unproven", True: "ok", False: "MISMATCH"}[f.record_matches]
        marks = f", REJECTED for {len(f.markers)} pin(s)" if f.markers else ""
        lines.append(
            f"  {f.path}  {f.size_bytes} bytes, {record} ({verdict}), stamp {f.stamp}{marks}"
        )
    lines.append("LEFTOVERS" if report.leftovers else "LEFTOVERS: none")
    for item in report.leftovers:
        swept = "swept by the next writer" if item.swept_by_writers else "kept"
        if item.mtime_in_future:
            swept = "mtime in the future: the next writer resets it to now"
        lines.append(
            f"  {item.path}  {item.kind}, {item.size_bytes} bytes, age {item.age_s:.0f}s ({swept})"
        )
    if report.odd:
        lines.append("NOT REGULAR FILES (never followed nor opened)")
    lines.extend(f"  {item.path}  {item.kind}" for item in report.odd)
    for key, rels in report.publishing.items():
        lines.append(f"PUBLISH IN PROGRESS ({key}): {len(rels)} file(s) not in place yet")
    if report.refusal is not None:
        lines.append(f"READERS REFUSE: {report.refusal['reason']}: {report.refusal['detail']}")
    lines.extend(_signature_line(s) for s in report.signatures)
    for found in report.signatures:
        unsigned = found.get("unsigned")
        if isinstance(unsigned, list) and unsigned:
            lines.append(
                "NOT SIGNED (readers with a signing key refuse the directory): "
                + ", ".join(map(str, unsigned))
            )
    if not report.signatures:
        lines.append("SIGNATURE: no verification record (staged without a trust anchor)")
    return "\n".join(lines)


def _signature_line(found: dict[str, object]) -> str:
    if not found["valid"]:
        return f"SIGNATURE: {found['record']} is not a valid record (readers with an anchor refuse)"
    return (
        f"SIGNATURE: verified against anchor {found['anchor']}, bundle {found['signature']} "
        f"(sha256 {str(found['bundle_sha256'])[:16]}), {found['signed_files']} signed files"
        + (f", statement sha256 {found['statement_sha256']}" if found["statement_sha256"] else "")
    )


def _size(value: int | None) -> str:
    return "unknown" if value is None else f"{value / 1024**3:.1f} GiB"
