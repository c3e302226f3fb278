"""HTTP status and header math shared by the probe (httpx) and the data path
(http.client). Pure functions: classify by status code, never by message text.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit, urlunsplit

from llmkube_stager.errors import Reason, SourceError, Wire, proxy_unauthorized

USER_AGENT = "llmkube-stager/0.1"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 10
_CONTENT_RANGE_RE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_UNSATISFIED_RANGE_RE = re.compile(r"bytes\s+\*/(\d+)")

HeaderGet = Callable[[str], str | None]


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Origin:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        port = parts.port or (443 if scheme == "https" else 80)
        return cls(scheme, (parts.hostname or "").lower(), port)


_HF_HOSTS = frozenset({"huggingface.co", "www.huggingface.co"})


def is_hf_auth_origin(origin: Origin, hf_endpoint: str) -> bool:
    """spec §3.2: https://huggingface.co (optional www., case-folded), or
    exactly the scheme+host+port of HF_ENDPOINT. Lookalikes get nothing."""
    if origin.scheme == "https" and origin.host in _HF_HOSTS:
        return True
    if not hf_endpoint.strip():
        return False
    try:
        return Origin.of(hf_endpoint.strip()) == origin
    except ValueError:
        # A malformed HF_ENDPOINT matches nothing here (a plain URL source
        # gets no token); an hf source refuses it (hfref.check_endpoint).
        return False


@dataclass(frozen=True)
class BasicCredentials:
    """`user:pass@` of the source URL, bound to that URL's origin (#11.13)."""

    origin: Origin
    header: str = field(repr=False)


def split_userinfo(url: str) -> tuple[str, BasicCredentials | None]:
    """The URL without its userinfo, and the credentials it carried. Only the
    Authorization header carries them: no client ever sees them in a URL
    (httpx would send them itself, http.client never)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc or parts.scheme.lower() not in ("http", "https"):
        return url, None
    import base64  # only for a URL with credentials: not on the warm path

    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    bare = urlunsplit(parts._replace(netloc=hostport))
    # Percent-decoded, as curl does (a '@' in a password is written %40).
    pair = f"{unquote(user)}:{unquote(password)}".encode()
    header = "Basic " + base64.b64encode(pair).decode("ascii")
    return bare, BasicCredentials(Origin.of(bare), header)


@dataclass(frozen=True)
class AuthPolicy:
    """Bearer token only for the HF host / HF_ENDPOINT origin the request was
    first sent to; never across a redirect to another host (spec §3.2).
    Credentials from the source URL's userinfo go with every request to that
    origin (probe, GET, each hop that stays there) and to no other (#11.13);
    where both apply the token wins, as `curl -H` did over the URL's."""

    token: str = field(repr=False)
    hf_endpoint: str
    basic: BasicCredentials | None = field(default=None, repr=False)

    def headers_for(self, url: str, first_url: str) -> dict[str, str]:
        origin = Origin.of(url)
        if (
            self.token
            and origin == Origin.of(first_url)
            and is_hf_auth_origin(origin, self.hf_endpoint)
        ):
            return {"Authorization": f"Bearer {self.token}"}
        if self.basic is not None and origin == self.basic.origin:
            return {"Authorization": self.basic.header}
        return {}


def parse_digits(value: str | None) -> int | None:
    """A decimal header value; anything else (ASCII digits only: a latin-1
    '²' passes str.isdigit) is None."""
    text = (value or "").strip()
    return int(text) if text.isascii() and text.isdigit() else None


def content_length(get: HeaderGet) -> int | None:
    """Content-Length, with absent or 0 meaning "unknown" (spec §8.1 CL0)."""
    return parse_digits(get("content-length")) or None


def parse_content_range(value: str | None) -> tuple[int, int, int | None] | None:
    """`bytes start-end/total` -> (start, end, total|None)."""
    match = _CONTENT_RANGE_RE.fullmatch((value or "").strip())
    if not match:
        return None
    total = None if match.group(3) == "*" else int(match.group(3))
    return int(match.group(1)), int(match.group(2)), total


def parse_unsatisfied_range(value: str | None) -> int | None:
    """`bytes */total` of a 416 -> total."""
    match = _UNSATISFIED_RANGE_RE.fullmatch((value or "").strip())
    return int(match.group(1)) if match else None


def retry_after_s(value: str | None, now_s: float | None = None) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    text = (value or "").strip()
    if not text:
        return None
    seconds = parse_digits(text)
    if seconds is not None:
        return float(seconds)
    import email.utils  # only for an HTTP-date Retry-After; costs ~9 ms to import

    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    now = time.time() if now_s is None else now_s
    return max(0.0, when.timestamp() - now)


def rate_limit_wait_s(get: HeaderGet) -> float | None:
    """Retry-After, else the IETF RateLimit reset hint HF sends."""
    wait = retry_after_s(get("retry-after"))
    if wait is not None:
        return wait
    reset = parse_digits(get("ratelimit-reset") or get("x-ratelimit-reset"))
    return None if reset is None else float(reset)


def status_error(status: int, get: HeaderGet, where: str) -> SourceError:
    """Map an HTTP error status to a contract reason; 429/5xx are transient.
    The status rides along as a fact (`Wire`), for the operator's matcher."""
    text = f"{where} returned HTTP {status}"
    wire = Wire(http_status=status)
    if status in (401, 403):
        return SourceError(text, reason=Reason.SOURCE_UNAUTHORIZED, answered=True, wire=wire)
    if status in (404, 410):
        return SourceError(text, reason=Reason.SOURCE_NOT_FOUND, answered=True, wire=wire)
    if status == 407:
        # A proxy in the way wants (other) credentials: exit 4 (#22 item 6).
        return proxy_unauthorized(text, credentials_sent=None)
    if status == 412:
        # If-Match failed: the object changed under a pinned transfer.
        return SourceError(text, reason=Reason.SOURCE_CHANGED, answered=True, wire=wire)
    if status == 429:
        return SourceError(
            text,
            reason=Reason.SOURCE_RATE_LIMITED,
            transient=True,
            retry_after_s=rate_limit_wait_s(get),
            answered=True,
            wire=wire,
        )
    if status >= 500:
        wait = retry_after_s(get("retry-after"))
        return SourceError(
            text,
            reason=Reason.SOURCE_UNAVAILABLE,
            transient=True,
            retry_after_s=wait,
            answered=True,
            wire=wire,
        )
    return SourceError(text, reason=Reason.SOURCE_REJECTED, answered=True, wire=wire)
