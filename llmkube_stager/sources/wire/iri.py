"""URLs as a request line carries them (#29 item 9).

http.client encodes the request line (and an absolute-form target through
a proxy) in ASCII: a MODEL_SOURCE whose path is not ASCII, a redirect
`Location` of raw UTF-8 or an internationalized host name ended in a
UnicodeEncodeError, exit 3, where curl downloads the file. Here each is
encoded once, before any client sees it, as curl and browsers do (RFC 3987
§3.1, the IRI-to-URI mapping):

- the host name in IDNA A-labels (UTS #46 then IDNA 2008, as curl with
  libidn2: `bücher.example` -> `xn--bcher-kva.example`), for the
  connection, the Host header, a proxy's CONNECT and absolute-form target,
  TLS's SNI and the certificate check alike;
- every byte of the path, query and userinfo above 0x7f (the UTF-8 of the
  text; the raw bytes of an environment that was not UTF-8) and every
  space percent-encoded (`%C3%A8`, `%20`). curl 7.88 does the same to the
  bytes above 0x7f of a URL and of a Location (in lowercase hex, which
  servers read alike; RFC 3986 §2.1 prefers uppercase), and to a
  Location's spaces; a space in the URL it refuses, browsers encode it;
  every other character stays as written, so an ASCII URL goes out byte for
  byte (a signed URL's query is part of its signature);
- a control character, or a host name IDNA cannot encode, cannot be sent:
  `Unsendable`, whose words hold no part of the URL (it may carry
  credentials).

Pure; `idna` (httpx's dependency) is imported only for a host beyond ASCII.
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit, urlunsplit

_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# Every printable ASCII character but the space: left as written.
_KEPT = "".join(chr(code) for code in range(0x21, 0x7F))


class Unsendable(ValueError):
    """A URL no request can carry; the words say why, never the URL."""


def ascii_host(host: str) -> str:
    """`host` in IDNA A-labels; an ASCII host unchanged."""
    if host.isascii():
        return host
    import idna

    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError, ValueError):
        raise Unsendable(
            "its host name is not an internationalized domain name IDNA can encode"
        ) from None


def _escaped(text: str) -> str:
    return quote(text, safe=_KEPT, encoding="utf-8", errors="surrogateescape")


def wire_url(url: str) -> str:
    """`url` as a request carries it (see the module's words); an ASCII URL
    without a space is returned as it is."""
    if _CONTROL_RE.search(url):
        raise Unsendable("it holds a control character")
    if url.isascii() and " " not in url:
        return url
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not hostport.isascii():
        host = ascii_host(parts.hostname or "")
        host = f"[{host}]" if ":" in host else host
        try:
            port = parts.port
        except ValueError:  # a Location's port that is no number (review of #29 item 9)
            raise Unsendable("its port is not a number") from None
        hostport = host if port is None else f"{host}:{port}"
    netloc = _escaped(userinfo) + at + hostport
    return urlunsplit(
        (
            parts.scheme,
            netloc,
            _escaped(parts.path),
            _escaped(parts.query),
            _escaped(parts.fragment),
        )
    )


def location_url(value: str) -> str:
    """A Location header as http.client hands it over (its bytes decoded as
    latin-1) turned back into its text: raw UTF-8 bytes become the
    characters they spell, other bytes stay themselves (surrogate-escaped),
    so that `wire_url` percent-encodes exactly the bytes the origin sent."""
    if value.isascii():
        return value
    try:
        raw = value.encode("latin-1")
    except UnicodeEncodeError:
        return value  # not from http.client's parser: already text
    return raw.decode("utf-8", "surrogateescape")
