"""Outcome / StagerError -> the bounded JSON termination message (CONTRACT §5).

Kubernetes keeps at most 4096 bytes of /dev/termination-log; a longer message
is cut, which would make it invalid JSON. So the document is shrunk field by
field (longest free-text first) and re-encoded until it fits: always valid
JSON, never over the limit, `v`/`outcome`/`reason`/`retryable` always present.

`message` is the object's FIRST member: today's controller reads the file as
text and shows the matched line (the whole one-line document) cut at 200
bytes, so those bytes must be `{"message":"ERROR: <Reason>: <cause>...`, not
JSON framing and the remedy (spec §11.1, #14).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable
from typing import Any

from llmkube_stager import __version__
from llmkube_stager.errors import Reason, StagerError, operator_phrase
from llmkube_stager.logs import Log, human_bytes
from llmkube_stager.model import Decision, Outcome

# Well under the kubelet's 4096 per file: it also cuts every container of a
# pod to 12 KiB / (containers + init containers), so 2048 arrives whole in a
# pod of up to six (docs/operations.md "Termination message"). Real messages
# are 280-800 bytes; only a huge URL or detail gets shrunk.
MAX_BYTES = 2048
_ELLIPSIS = "..."
# Never the remedy: the controller looks it up verbatim (spec §11.3).
_SHRINKABLE = ("detail", "source", "file")


def success_doc(outcome: Outcome, source: str, verb: str = "staged") -> dict[str, Any]:
    fetched = outcome.count(Decision.FETCH, Decision.REPAIR, Decision.REFRESH)
    reused = outcome.count(Decision.REUSE)
    kept = outcome.count(Decision.KEEP)
    return {
        "message": (
            f"Model {verb}: {len(outcome.results)} files "
            f"({fetched} fetched, {reused} reused, {kept} kept)"
        ),
        "v": 1,
        "outcome": "succeeded",
        "reason": Reason.SUCCEEDED.value,
        "retryable": False,
        "source": source,
        "stats": {
            "files": len(outcome.results),
            "fetched": fetched,
            "reused": reused,
            "kept": kept,
            "bytes": outcome.bytes_fetched,
            "seconds": round(outcome.seconds, 3),
            "version": __version__,
        },
    }


def log_staged(log: Log, doc: dict[str, Any], outcome: Outcome) -> None:
    """A run's last line: the success message, then the bytes received and
    the average rate over the run; its counts are the event's fields."""
    stats = doc["stats"]
    nbytes, seconds = int(stats["bytes"]), outcome.seconds
    rate_bps = nbytes / seconds if seconds > 0 else 0.0
    message = str(doc["message"])
    if nbytes:
        message += (
            f"; {human_bytes(nbytes)} received in {seconds:.1f} s, "
            f"{human_bytes(rate_bps)}/s on average"
        )
    counts = {k: stats[k] for k in ("files", "fetched", "reused", "kept", "bytes")}
    log.info("staged", message, **counts, seconds=round(seconds, 3), rate_bps=round(rate_bps))


def failure_doc(err: StagerError, source: str, redact: Callable[[str], str]) -> dict[str, Any]:
    """The failure document before encoding: `detail` and `phrase` are
    helper keys that `encode` turns into `message` (see `_message`)."""
    doc: dict[str, Any] = {
        "detail": redact(err.detail),
        "phrase": redact(operator_phrase(err)),
        "v": 1,
        "outcome": "failed",
        "reason": err.reason.value,
        "retryable": err.retryable,
        "remedy": err.remedy,
    }
    window_s = getattr(err, "retry_after_s", None)
    if err.reason is Reason.SOURCE_RATE_LIMITED and window_s is not None:
        # #22 item 5: how long the origin's rate-limit window still is, so
        # that a controller can requeue after it rather than into it.
        doc["retryAfterSeconds"] = math.ceil(window_s)
    if err.file:
        doc["file"] = redact(err.file)
    if source:
        doc["source"] = redact(source)
    return doc


def _message(reason: str, detail: str, phrase: str, remedy: str) -> str:
    """`ERROR: <Reason>: <cause> (<curl's words>); <remedy>`: the reason
    first for today's substring-matching controller, the words its
    signatures look for (errors.operator_phrase), the remedy last and
    identical to `remedy`."""
    cause = f"{detail} ({phrase})" if phrase else detail
    return f"ERROR: {reason}: {cause}" + (f"; {remedy}" if remedy else "")


def failure_message(err: StagerError, redact: Callable[[str], str]) -> str:
    """The full failure line, as logged (the termination copy may be shrunk)."""
    return _message(err.reason.value, redact(err.detail), redact(operator_phrase(err)), err.remedy)


def _finish(doc: dict[str, Any]) -> dict[str, Any]:
    """`message` first (built from the helper keys for a failure)."""
    out = dict(doc)
    detail = out.pop("detail", None)
    phrase = out.pop("phrase", "")
    if detail is not None:
        out["message"] = _message(out["reason"], detail, phrase, out.get("remedy", ""))
    if "message" not in out:
        return out
    return {"message": out.pop("message"), **out}


def encode(doc: dict[str, Any], max_bytes: int = MAX_BYTES) -> bytes:
    """Compact JSON of at most `max_bytes`, shrinking free text as needed."""
    work = dict(doc)
    while True:
        data = json.dumps(_finish(work), separators=(",", ":"), ensure_ascii=True).encode()
        if len(data) <= max_bytes:
            return data
        if not _shrink_longest(work):
            return _last_resort(work, max_bytes)


def _last_resort(work: dict[str, Any], max_bytes: int) -> bytes:
    """The minimal document; below any real budget (a remedy is at most a
    few hundred bytes), the four mandatory members and the reason alone."""
    data = json.dumps(_minimal(work), separators=(",", ":")).encode()
    if len(data) <= max_bytes:
        return data
    bare = {k: work[k] for k in ("v", "outcome", "reason", "retryable")}
    if work["outcome"] == "failed":
        bare = {"message": f"ERROR: {work['reason']}: see the pod log", **bare}
    return json.dumps(bare, separators=(",", ":")).encode()


def _minimal(work: dict[str, Any]) -> dict[str, Any]:
    """The four mandatory members after the message, which for a failure is
    the reason and the remedy (the controller looks the remedy up verbatim;
    the longest remedy keeps this document far below MAX_BYTES)."""
    minimal = {k: work[k] for k in ("v", "outcome", "reason", "retryable")}
    if work["outcome"] == "failed":
        remedy = work.get("remedy", "")
        message = f"ERROR: {work['reason']}: see the pod log; {remedy}"
        return {"message": message, **minimal, "remedy": remedy}
    return minimal


def _shrink_longest(work: dict[str, Any]) -> bool:
    candidates = [k for k in _SHRINKABLE if isinstance(work.get(k), str) and len(work[k]) > 8]
    if not candidates:
        if "stats" in work or "message" in work:
            work.pop("stats", None)
            if "detail" not in work:
                work.pop("message", None)
            return True
        return False
    key = max(candidates, key=lambda k: len(json.dumps(work[k])))
    text: str = work[key]
    work[key] = text[: len(text) // 2] + _ELLIPSIS
    return True


def write_termination(path: str, data: bytes) -> bool:
    """Write in place: the path is a bind mount, so never rename onto it.
    Skipped quietly when not writable (a local run, a read-only /dev)."""
    if not path:
        return False
    if path.startswith("/dev/") and not os.path.exists(path):
        # The kubelet mounts /dev/termination-log into every container; with
        # none there this is a local run, which must not create files in /dev.
        return False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError:
        return False
    try:
        with contextlib.suppress(OSError):
            os.write(fd, data)
            return True
        return False
    finally:
        os.close(fd)
