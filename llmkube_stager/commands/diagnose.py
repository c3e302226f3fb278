"""`diagnose`: a termination message (or, failing that, a log tail) -> the
condition a controller should set (CONTRACT §2, spec §11).

Importable by a Python controller: `condition_for(text)`. The structured
message wins; for a plain log tail (an older downloader, or
FallbackToLogsOnError) the operator's signatures apply in their order, first
hit wins, and unknown text is never labelled (spec §11.1 item 8).
"""

from __future__ import annotations

import json
import re
from typing import Any

from llmkube_stager.errors import REMEDIES_BY_CAUSE, REMEDIES_BY_KIND, Reason, remedy_for

CONDITION_TYPE = "ModelTransferHealthy"
_MAX_LINE_BYTES = 200  # the operator's cap on the matched line (spec §11.1)
_TOKEN_RE = re.compile(r"ERROR: ([A-Z][A-Za-z]+):")
_KNOWN = {r.value for r in Reason}

# spec §11.2, in order; lowercase substrings.
SIGNATURES: tuple[tuple[Reason, tuple[str, ...]], ...] = (
    (
        Reason.SOURCE_UNTRUSTED,
        (
            "ssl certificate problem",
            "ssl certificate openssl verify result",
            "unable to get local issuer certificate",
            "self signed certificate",
            "certificate verify failed",
        ),
    ),
    (
        Reason.SOURCE_UNAUTHORIZED,
        (
            "returned error: 401",
            "returned error: 403",
            "403 forbidden",
            "401 unauthorized",
            "signaturedoesnotmatch",
            "invalidaccesskeyid",
        ),
    ),
    (
        Reason.SOURCE_NOT_FOUND,
        ("returned error: 404", "404 not found", "nosuchkey", "nosuchbucket"),
    ),
    (Reason.OUT_OF_SPACE, ("no space left on device", "disk quota exceeded")),
    (
        Reason.SOURCE_UNREACHABLE,
        (
            "could not resolve host",
            "failed to connect to",
            "connection refused",
            "connection timed out",
        ),
    ),
)


def condition_for(text: str) -> dict[str, Any] | None:
    """The condition for a termination message or log tail; None: unknown."""
    doc = _json(text)
    if doc is not None:
        return _from_message(doc)
    return _from_log(text)


def _json(text: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and "reason" in doc and "outcome" in doc else None


def _from_message(doc: dict[str, Any]) -> dict[str, Any]:
    if doc.get("outcome") == "succeeded":
        return _condition("True", Reason.SUCCEEDED.value, "Model weights staged successfully")
    reason = str(doc.get("reason", Reason.INTERNAL.value))
    message = f"Model transfer failed: {doc.get('message', reason)}"
    return _condition("False", reason, message, str(doc.get("remedy", "")), doc.get("retryable"))


def _from_log(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        token = _TOKEN_RE.search(line)
        if token and token.group(1) in _KNOWN:
            return _failed(Reason(token.group(1)), line)
    lowered = text.lower()
    for reason, needles in SIGNATURES:
        for needle in needles:
            if needle in lowered:
                line = next(x for x in text.splitlines() if needle in x.lower())
                return _failed(reason, line)
    return None


def _failed(reason: Reason, line: str) -> dict[str, Any]:
    clean = " ".join("".join(c if c.isprintable() else " " for c in line).split())
    if len(clean.encode()) > _MAX_LINE_BYTES:
        clean = clean.encode()[:_MAX_LINE_BYTES].decode(errors="ignore") + "..."
    remedy = _remedy_in(reason, line) if reason in REMEDIES_BY_KIND else remedy_for(reason)
    # #34: the cause's own remedy, where the reason has several.
    remedy = next((r for r in REMEDIES_BY_CAUSE.get(reason, ()) if r in line), remedy)
    return _condition("False", reason.value, f"Model transfer failed: {clean}", remedy)


def _remedy_in(reason: Reason, line: str) -> str:
    """cacheLockRemedyIn: the remedy the downloader printed (spec §11.3),
    for every reason whose remedy depends on the source kind."""
    from llmkube_stager.words import variables_remedy

    for kind, remedy in REMEDIES_BY_KIND[reason].items():
        # Either words: the operator's, or a Job's own (#46 item 6).
        for printed in (remedy, variables_remedy(remedy, kind)):
            if printed in line:
                return printed
    if reason is Reason.CACHE_LOCK_UNSUPPORTED:
        return "see the model-downloader container's log for the remedy"
    return remedy_for(reason)


def _condition(
    status: str, reason: str, message: str, remedy: str = "", retryable: Any = None
) -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": CONDITION_TYPE,
        "status": status,
        "reason": reason,
        "message": f"{message}. {remedy}" if remedy and remedy not in message else message,
    }
    if isinstance(retryable, bool):
        condition["retryable"] = retryable
    return condition
