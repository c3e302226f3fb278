"""How long an origin that answered 429 asks to be left alone (#22 item 5).

Every form the Hub and common CDNs send, read from one answer's headers:

- `RateLimit: "api";r=0;t=55` (the IETF structured field of
  draft-ietf-httpapi-ratelimit-headers-08 and later: a list of quota
  policies, each with its remaining quota `r` and seconds to reset `t`),
  which the Hub sends and huggingface_hub reads first; only a policy with
  nothing remaining closes the window. The older draft's dictionary form
  `RateLimit: limit=100, remaining=0, reset=55` too.
- `Retry-After` (RFC 9110 §10.2.3): delta-seconds or an HTTP date.
- `RateLimit-Reset` and `X-RateLimit-Reset`: seconds, or, as GitHub and
  others send it, a Unix time (a number that large is no sane delay).

Where several are present the structured field wins, as in huggingface_hub
(a shorter Retry-After next to it would be a request inside the window).
Every number is read with a bound (bounded.py, #29 item 8): one of
hundreds of digits raises AbsurdNumber, a bad answer.
Pure functions of the header getter and the wall clock.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from llmkube_stager.sources.wire.bounded import wire_int

HeaderGet = Callable[[str], str | None]

# A reset value above this is a Unix time, not a delay (2001-09-09; no
# origin asks to wait 31 years).
_EPOCH_FLOOR_S = 1_000_000_000
_PARAM_RE = re.compile(r"^\s*([a-z][a-z0-9_.*-]*)\s*=\s*([^;,\s]*)\s*$", re.ASCII)


def retry_after_s(value: str | None, now_s: float | None = None) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    text = (value or "").strip()
    if not text:
        return None
    seconds = wire_int(text, "Retry-After")
    if seconds is not None:
        return float(seconds)
    import email.utils  # only for an HTTP-date Retry-After; costs ~9 ms to import

    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, OverflowError):
        return None
    now = time.time() if now_s is None else now_s
    return max(0.0, when.timestamp() - now)


def reset_s(
    value: str | None, now_s: float | None = None, header: str = "X-RateLimit-Reset"
) -> float | None:
    """A `*RateLimit-Reset` value: seconds, or a Unix time."""
    seconds = wire_int(value, header)
    if seconds is None:
        return None
    if seconds < _EPOCH_FLOOR_S:
        return float(seconds)
    now = time.time() if now_s is None else now_s
    return max(0.0, seconds - now)


def _members(value: str | None) -> dict[str, dict[str, str]]:
    """`"api";r=0;t=55, "burst";r=3;t=1` -> {"api": {"r": "0", "t": "55"}, ...}."""
    found: dict[str, dict[str, str]] = {}
    for member in (value or "").split(","):
        name, *parts = member.split(";")
        params = {}
        for part in parts:
            match = _PARAM_RE.match(part.lower())
            if match:
                params[match.group(1)] = match.group(2)
        found[name.strip().strip('"')] = params
    return found


def structured_window_s(value: str | None, policy: str | None = None) -> float | None:
    """The longest reset among the exhausted policies of a `RateLimit` field
    (structured list or the older dictionary), or None. An exhausted policy
    without `t` waits its whole window, `w` of its `RateLimit-Policy`."""
    text = (value or "").strip()
    if not text:
        return None
    if ";" not in text:
        # Draft-07 dictionary: `limit=100, remaining=0, reset=55`.
        pairs = dict(_split_pair(p) for p in text.split(","))
        remaining = wire_int(pairs.get("remaining"), "RateLimit")
        reset = wire_int(pairs.get("reset"), "RateLimit")
        return float(reset) if reset is not None and remaining in (0, None) else None
    windows = _members(policy)
    waits = []
    for name, params in _members(text).items():
        if wire_int(params.get("r"), "RateLimit") not in (0, None):
            continue  # quota left in this policy: not the one that refused
        reset = wire_int(params.get("t"), "RateLimit")
        if reset is None:
            reset = wire_int(windows.get(name, {}).get("w"), "RateLimit-Policy")
        if reset is not None:
            waits.append(float(reset))
    return max(waits) if waits else None


def _split_pair(part: str) -> tuple[str, str]:
    name, _, value = part.partition("=")
    return name.strip().lower(), value.strip()


def rate_limit_wait_s(get: HeaderGet, now_s: float | None = None) -> float | None:
    """Seconds until the origin takes requests again, by the first form
    present: the structured `RateLimit` field, Retry-After, then the reset
    headers. Each form is read only when those before it said nothing."""
    forms: tuple[Callable[[], float | None], ...] = (
        lambda: structured_window_s(get("ratelimit"), get("ratelimit-policy")),
        lambda: retry_after_s(get("retry-after"), now_s),
        lambda: reset_s(get("ratelimit-reset"), now_s, "RateLimit-Reset"),
        lambda: reset_s(get("x-ratelimit-reset"), now_s, "X-RateLimit-Reset"),
    )
    for wait in forms:
        seconds = wait()
        if seconds is not None:
            return seconds
    return None


def check_waits(get: HeaderGet) -> None:
    """Read every number of every wait an answer carries, each form whatever
    the others say, each parameter whether or not it is used: AbsurdNumber
    for one beyond the bound (#29 item 8). For a client whose library reads
    them itself (huggingface_hub's int() of `RateLimit`'s r and t and of
    `RateLimit-Policy`'s q and w)."""
    for header in ("RateLimit", "RateLimit-Policy"):
        for params in _members(get(header.lower())).values():
            for value in params.values():
                wire_int(value, header)
        for part in (get(header.lower()) or "").split(","):
            wire_int(_split_pair(part)[1], header)  # the draft's `reset=55`
    retry_after_s(get("retry-after"))
    reset_s(get("ratelimit-reset"), header="RateLimit-Reset")
    reset_s(get("x-ratelimit-reset"))
