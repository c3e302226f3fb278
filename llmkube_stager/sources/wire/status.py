"""HTTP status, header and URL math shared by the probe (httpx), the data
path (http.client) and every scheme: origins, who gets which credentials,
redirects, ranges, status codes -> reasons. Pure functions: classify by
status code, never by message text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from llmkube_stager.errors import (
    REMEDY_GATED,
    REMEDY_REDIRECT_SCHEME,
    ConfigError,
    Reason,
    SourceError,
    Wire,
    proxy_unauthorized,
    rejected,
)
from llmkube_stager.logs import display_url
from llmkube_stager.sources.wire.bounded import AbsurdNumber, wire_int
from llmkube_stager.sources.wire.iri import Unsendable, ascii_host, location_url, wire_url
from llmkube_stager.sources.wire.ratelimit import rate_limit_wait_s, retry_after_s

USER_AGENT = "llmkube-stager/0.1"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 10
# The only schemes a redirect is followed to (#22 item 8): http.client would
# speak cleartext HTTP to an ftp://, gopher:// or ftps:// host and port.
_FOLLOWED_SCHEMES = frozenset({"http", "https"})
_CONTENT_RANGE_RE = re.compile(r"bytes\s+([0-9]+)-([0-9]+)/([0-9]+|\*)", re.ASCII)
_UNSATISFIED_RANGE_RE = re.compile(r"bytes\s+\*/([0-9]+)", re.ASCII)

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
        return cls(scheme, _host_of(parts.hostname or ""), port)


def _host_of(hostname: str) -> str:
    """The origin's host as requests name it: IDNA A-labels (#29 item 9), so
    that a URL and its encoded form are one origin for credentials and
    proxies; one IDNA cannot encode is never sent (wire_url refuses it)."""
    try:
        return ascii_host(hostname.lower())
    except Unsendable:
        return hostname.lower()


def check_http_url(url: str, name: str = "MODEL_SOURCE") -> None:
    """An http(s) URL with a host and a valid port (MODEL_SOURCE, an S3 or
    STS endpoint), else ConfigError naming the variable."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name} must be an http(s) URL with a host, got {display_url(url)!r}")
    try:
        _ = parts.port
    except ValueError:
        raise ConfigError(f"{name} has an invalid port: {display_url(url)!r}") from None
    try:
        wire_url(url)
    except Unsendable as exc:
        # #29 item 9: named, never shown (a URL may carry credentials).
        raise ConfigError(f"{name} cannot be sent in a request: {exc}") from None


def sendable(url: str) -> str:
    """`url` as a request carries it (iri.wire_url, #29 item 9). MODEL_SOURCE
    was checked with its name (check_http_url); what else cannot be sent (a
    file name a listing gave) is a bad answer, the URL never shown."""
    try:
        return wire_url(url)
    except Unsendable as exc:
        raise rejected(f"a URL of the source cannot be sent in a request: {exc}") from None


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
        # gets no token); an hf source refuses it (hf/ref.py check_endpoint).
        return False


@dataclass(frozen=True)
class BasicCredentials:
    """`user:pass@` of the source URL, bound to that URL's origin (#11 item 13)."""

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


class Authorizer(Protocol):
    """What a request's Authorization is decided by, hop by hop: the
    plain origin's AuthPolicy, an OCI registry's token (sources/oci)."""

    def headers_for(self, url: str, first_url: str) -> dict[str, str]: ...


@dataclass(frozen=True)
class AuthPolicy:
    """Bearer token only for the HF host / HF_ENDPOINT origin the request was
    first sent to; never across a redirect to another host (spec §3.2).
    Credentials from the source URL's userinfo go with every request to that
    origin (probe, GET, each hop that stays there) and to no other (#11 item 13);
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


def next_hop(url: str, location: str) -> str:
    """Where a redirect from `url` to `location` leads, without userinfo
    (credentials come from AuthPolicy only, #11 item 13), as a request
    carries it (#29 item 9). Only http and https are followed; anything else
    (ftp, ftps, gopher, file, data, ...) is refused before any connection
    (#22 item 8)."""
    target = urljoin(url, location_url(location).strip())
    parts = urlsplit(target)
    scheme = parts.scheme.lower()
    if scheme not in _FOLLOWED_SCHEMES:
        # Scheme and host only: a foreign URL's path, query or payload
        # (file:///var/run/secrets/..., data:...) may be anything.
        host = parts.netloc.rpartition("@")[2]
        shown = f"{scheme}://{host}/..." if host else f"{scheme}:..."
        raise SourceError(
            f"{display_url(url)} redirected to {shown[:120]}: only http and https redirects are "
            "followed, nothing was fetched from it",
            reason=Reason.SOURCE_REJECTED,
            answered=True,
            remedy=REMEDY_REDIRECT_SCHEME,
        )
    bare, _ = split_userinfo(target)
    try:
        return wire_url(bare)  # #29 item 9: raw UTF-8 percent-encoded, as curl does
    except Unsendable as exc:
        raise SourceError(
            f"{display_url(url)} redirected to a Location no request can carry ({exc}); "
            "nothing was fetched from it",
            reason=Reason.SOURCE_REJECTED,
            answered=True,
        ) from None


def parse_digits(value: str | None, header: str = "Content-Length") -> int | None:
    """A decimal header value; anything else (ASCII digits only: a latin-1
    '²' passes str.isdigit) is None; AbsurdNumber past the bound (#29 item 8)."""
    return wire_int(value, header)


def parse_length(value: str | None) -> int | None:
    """A Content-Length: one decimal, or repeated lines of the same one
    joined (RFC 9110 §8.6); different values are no length."""
    values = {part.strip() for part in (value or "").split(",")}
    return parse_digits(values.pop()) if len(values) == 1 else None


def content_length(get: HeaderGet) -> int | None:
    """Content-Length, with absent or 0 meaning "unknown" (spec §8.1 CL0)."""
    return parse_length(get("content-length")) or None


def parse_content_range(value: str | None) -> tuple[int, int, int | None] | None:
    """`bytes start-end/total` -> (start, end, total|None)."""
    match = _CONTENT_RANGE_RE.fullmatch((value or "").strip())
    if not match:
        return None
    total = None if match.group(3) == "*" else _range_int(match.group(3))
    return _range_int(match.group(1)), _range_int(match.group(2)), total


def parse_unsatisfied_range(value: str | None) -> int | None:
    """`bytes */total` of a 416 -> total."""
    match = _UNSATISFIED_RANGE_RE.fullmatch((value or "").strip())
    return _range_int(match.group(1)) if match else None


def _range_int(digits: str) -> int:
    """The pattern's ASCII digits, read with the bound."""
    return wire_int(digits, "Content-Range") or 0


def status_error(status: int, get: HeaderGet, where: str) -> SourceError:
    """Map an HTTP error status to a contract reason; 429/5xx are transient.
    The status rides along as a fact (`Wire`), for the operator's matcher.
    A wait of no sane length makes it a bad answer (#29 item 8)."""
    try:
        return _status_error(status, get, where)
    except AbsurdNumber as err:
        return err.at(f"{where} returned HTTP {status},")


def _status_error(status: int, get: HeaderGet, where: str) -> SourceError:
    text = f"{where} returned HTTP {status}"
    wire = Wire(http_status=status)
    if status in (401, 403) and (get("x-error-code") or "").strip() == "GatedRepo":
        # #22 item 7: the Hub's /resolve/ of a gated repo; a token is not
        # the fix, the account's access is.
        return SourceError(
            f"{text} (GatedRepo): the repository is gated and the token's account has not "
            "been granted access",
            reason=Reason.SOURCE_UNAUTHORIZED,
            answered=True,
            wire=wire,
            remedy=REMEDY_GATED,
        )
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
