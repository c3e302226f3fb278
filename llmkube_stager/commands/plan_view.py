"""`plan` output: the per-file decisions as a table or one JSON document.

Writes nothing. Asks the source only with `--probe` (its listing where
there is one, then one HEAD per file); without it, what only the source
could say is reported as unknown (`offline`), never asked for.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from llmkube_stager.config import Config
from llmkube_stager.errors import StagerError
from llmkube_stager.logs import Log
from llmkube_stager.model import Action, LocalFile

if TYPE_CHECKING:
    from llmkube_stager.staging import Prepared


def _row(action: Action, local: LocalFile) -> dict[str, Any]:
    return {
        "file": action.rel,
        "decision": action.decision.value,
        "why": action.why,
        "local_state": local.state.value,
        "pin": local.pin.value,
        "size_bytes": local.size_bytes,
        "record_bytes": local.record_bytes,
        "backfill_record": action.backfill_record,
        "failure": action.failure.value if action.failure else None,
        "message": action.message,
    }


def _probe_rows(prepared: Prepared, rows: list[dict[str, Any]], log: Log) -> StagerError | None:
    """Each row's answer; the first probe that failed (None: none did)."""
    first: StagerError | None = None
    fetcher = prepared.source.fetcher()
    try:
        for row in rows:
            try:
                meta = fetcher.probe(prepared.manifest.file(row["file"]))
            except StagerError as err:
                row["remote"] = {"error": err.reason.value, "detail": err.detail}
                first = first or err.amended(file=row["file"])
                continue
            row["remote"] = {
                "size_bytes": meta.size_bytes,
                "etag": meta.etag,
                "accept_ranges": meta.accept_ranges,
            }
    finally:
        fetcher.close()
    return first


def _set_verdict(prepared: Prepared) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The publishes in progress and what `stage` refuses, by the judgement
    every reader makes (cache/setstate.py, #21 item 3): a writer rolls an
    interrupted publish forward, a reader refuses it."""
    from llmkube_stager.cache.setstate import judge_set, pending_publishes

    record, root = prepared.record, prepared.manifest.root
    pending = pending_publishes(record, root)
    publishing = [{"writer": p.key, "files": [e.rel for e in p.entries]} for p in pending]
    refusal = None
    if not (pending and prepared.strategy.may_write):
        err = judge_set(record, root, prepared.manifest.kind)
        if err is not None:
            refusal = {"reason": err.reason.value, "detail": err.detail}
    return publishing, refusal


def plan_document(
    config: Config, prepared: Prepared, *, probe: bool, log: Log
) -> tuple[dict[str, Any], StagerError | None]:
    """The plan, and the first probe that failed (the command's exit code)."""
    rows = [_row(a, prepared.cache.files[a.rel]) for a in prepared.plan.actions]
    failed = _probe_rows(prepared, rows, log) if probe else None
    fs = prepared.fs
    publishing, refusal = _set_verdict(prepared)
    return {
        "source": prepared.manifest.display_source,
        "kind": prepared.manifest.kind,
        "root": prepared.manifest.root,
        "policy": config.refresh_policy,
        "role": prepared.role,
        "fs": {
            "path": fs.path,
            "fstype": fs.fstype,
            "driver": fs.driver,
            "fuse": fs.is_fuse,
            "read_only": fs.read_only,
            "lock_scope": fs.lock_scope,
            "free_bytes": fs.free_bytes,
        },
        "may_write": prepared.plan.may_write,
        # Files not known yet are asked for by `stage`: network.
        "needs_network": prepared.plan.needs_network or bool(prepared.unknown),
        "offline": _offline(prepared),
        "warnings": list(prepared.plan.warnings),
        "publishing": publishing,
        "refusal": refusal,
        "signature": _signature(config, prepared),
        "files": rows,
    }, failed


OFFLINE_REMEDY = "`llmkube-stager plan --probe` asks the source"


def _offline(prepared: Prepared) -> dict[str, object]:
    """What the plan could not know without asking the source, and how to
    ask it; an empty list and message when nothing was left unknown."""
    unknown = list(prepared.unknown)
    message = ""
    if unknown:
        message = f"not known without asking the source: {'; '.join(unknown)}; {OFFLINE_REMEDY}"
    return {"unknown": unknown, "message": message}


def _signature(config: Config, prepared: Prepared) -> dict[str, object]:
    """#34 item 4: the recorded verification against this run's anchor."""
    from llmkube_stager.commands.signature import signature_state

    manifest = prepared.manifest
    rels = tuple(f.rel for f in manifest.files)
    state = signature_state(config, manifest.root, rels, may_write=prepared.strategy.may_write)
    return {**state.as_dict(), "line": state.line()}


def render_plan(
    config: Config, prepared: Prepared, *, as_json: bool, probe: bool, log: Log
) -> tuple[str, StagerError | None]:
    """The plan as text or JSON, and the first probe that failed: the plan
    is printed whole, then `plan --probe` fails with that probe's reason."""
    doc, failed = plan_document(config, prepared, probe=probe, log=log)
    if as_json:
        return json.dumps(doc, indent=2, sort_keys=False), failed
    return _table(doc), failed


def _table(doc: dict[str, Any]) -> str:
    fs = doc["fs"]
    lines = [
        f"source:  {doc['source']} ({doc['kind']})",
        f"cache:   {doc['root']} on {fs['fstype']} (driver {fs['driver']}, "
        f"fuse={fs['fuse']}, read_only={fs['read_only']}, lock scope {fs['lock_scope']})",
        f"policy:  {doc['policy']}, role {doc['role']}, may write: {doc['may_write']}, "
        f"network needed: {doc['needs_network']}",
        "",
    ]
    header = ("FILE", "DECISION", "LOCAL", "SIZE", "RECORD", "REMOTE", "WHY")
    table = [header] + [_cells(row) for row in doc["files"]]
    widths = [max(len(r[i]) for r in table) for i in range(len(header) - 1)]
    for cells in table:
        padded = [c.ljust(w) for c, w in zip(cells[:-1], widths, strict=True)]
        lines.append("  ".join([*padded, cells[-1]]).rstrip())
    lines.extend(f"warning: {w}" for w in doc["warnings"])
    if doc["offline"]["unknown"]:
        lines.append(f"unknown: {doc['offline']['message']}")
    for pending in doc["publishing"]:
        lines.append(
            f"publish in progress ({pending['writer']}): {len(pending['files'])} file(s) "
            "not in place yet" + ("; this writer finishes it" if doc["may_write"] else "")
        )
    if doc["refusal"] is not None:
        lines.append(f"refused: {doc['refusal']['reason']}: {doc['refusal']['detail']}")
    if doc["signature"]["state"] != "unchecked":  # #34: with a trust anchor only
        lines.append(doc["signature"]["line"])
    return "\n".join(lines)


def _cells(row: dict[str, Any]) -> tuple[str, ...]:
    remote = row.get("remote")
    remote_text = "-"
    if remote is not None:
        remote_text = remote.get("error") or str(remote.get("size_bytes") or "unknown")
    return (
        row["file"],
        row["decision"] + ("+backfill" if row["backfill_record"] else ""),
        row["local_state"],
        "-" if row["size_bytes"] is None else str(row["size_bytes"]),
        "-" if row["record_bytes"] is None else str(row["record_bytes"]),
        remote_text,
        row["why"],
    )
