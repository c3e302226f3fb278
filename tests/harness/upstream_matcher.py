"""The old controller's view of a failed init container, ported from Go for the
drop-in tests (docs/spec/behavior.md §2.4, §11.1, §11.2).

Kept apart from `llmkube_stager.commands.diagnose` on purpose: this is the
upstream matcher as it runs today (the thing we must keep working), not our
own reading of a termination message.

- The message is the termination file when it is non-empty, else the log tail
  (`FallbackToLogsOnError`): the last 2 KiB or 80 lines, whichever is shorter.
- `matchModelTransferFailure`: lowercase the whole message (ASCII), walk the
  signatures IN ORDER, the first substring hit wins; the condition shows the
  full line holding the hit, control characters turned into spaces, trimmed,
  cut at 200 bytes plus `...`.
"""

from __future__ import annotations

from dataclasses import dataclass

# §11.2, in order. The last row is the L3/L4 token signature.
SIGNATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "ModelSourceUntrusted",
        (
            "ssl certificate problem",
            "ssl certificate openssl verify result",
            "unable to get local issuer certificate",
            "self signed certificate",
            "certificate verify failed",
        ),
    ),
    (
        "ModelSourceUnauthorized",
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
        "ModelSourceNotFound",
        ("returned error: 404", "404 not found", "nosuchkey", "nosuchbucket"),
    ),
    ("ModelTransferOutOfSpace", ("no space left on device", "disk quota exceeded")),
    (
        "ModelSourceUnreachable",
        (
            "could not resolve host",
            "failed to connect to",
            "connection refused",
            "connection timed out",
        ),
    ),
    ("ModelCacheLockUnsupported", ("modelcachelockunsupported",)),
)
MAX_LINE_BYTES = 200
TAIL_BYTES = 2048
TAIL_LINES = 80


@dataclass(frozen=True)
class Match:
    reason: str
    needle: str
    line: str  # as the condition shows it: sanitized, cut at 200 bytes


def _ascii_lower(text: str) -> str:
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


def condition_line(line: str) -> str:
    """Control characters to spaces, trimmed, cut at 200 bytes plus `...`."""
    clean = "".join(" " if ord(c) < 0x20 or ord(c) == 0x7F else c for c in line).strip()
    raw = clean.encode()
    if len(raw) <= MAX_LINE_BYTES:
        return clean
    return raw[:MAX_LINE_BYTES].decode(errors="ignore") + "..."


def match(message: str) -> Match | None:
    lowered = _ascii_lower(message)
    for reason, needles in SIGNATURES:
        for needle in needles:
            at = lowered.find(needle)
            if at < 0:
                continue
            start = message.rfind("\n", 0, at) + 1
            end = message.find("\n", at)
            line = message[start : None if end < 0 else end]
            return Match(reason, needle, condition_line(line))
    return None


def log_tail(log: str) -> str:
    """What kubelet keeps of a failed container's log."""
    tail = log.encode()[-TAIL_BYTES:].decode(errors="replace")
    return "\n".join(tail.split("\n")[-TAIL_LINES:])


def controller_message(termination: bytes | None, log: str) -> str:
    """The Message kubelet reports with FallbackToLogsOnError."""
    if termination:
        return termination.decode(errors="replace")
    return log_tail(log)
