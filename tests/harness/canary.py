"""Canary secrets: random values whose appearance anywhere is a leak."""

from __future__ import annotations

import secrets
import string

_ALNUM = string.ascii_letters + string.digits


def canary(prefix: str, n: int = 32) -> str:
    """A random secret; any 12-character piece of it in an output is a leak.
    Deliberately not shaped like an hf_/AKIA token, so that shape-based
    redaction cannot hide a leak of the value itself."""
    return prefix + "".join(secrets.choice(_ALNUM) for _ in range(n))


def leaks(secret: str, *texts: str) -> list[str]:
    """Pieces (12 chars) of `secret` found in `texts`."""
    pieces = {secret[i : i + 12] for i in range(0, max(1, len(secret) - 11))}
    return sorted(p for p in pieces for t in texts if p in t)


# One canary token per test session: the `hub` fixture accepts exactly this one.
HF_TOKEN = canary("hfcanary")
