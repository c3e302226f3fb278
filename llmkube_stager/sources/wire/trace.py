"""Each HTTP exchange as a debug line (LLMKUBE_LOG_LEVEL=debug, #46 item 5):
what `curl -v` shows a person who debugs a source, one line a request:

    > GET https://host/m/model.gguf?X-Amz-Signature=*** | Range: bytes=100000- |
    If-Range: "v46" | auth: Bearer < 206 | ETag: "v46" | Last-Modified: ...

(one line).

Never a secret, whatever the redaction layer knows: the URL has no userinfo
and every query value is `***` (a presigned URL's signature, a SAS `sig`,
a token, and any parameter this module has never heard of); of the
request's headers only the range, the validators the agent chose to resume
by (If-Range, If-Match) and the scheme of the credentials sent, never their
value; of the answer its status, its validators and its framing. A
redirect's Location is shown as the URL is.
"""

from __future__ import annotations

import http.client
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from llmkube_stager.logs import Log

# (header, JSON field) of the request and of the answer.
_ASKED = (("Range", "range"), ("If-Range", "if_range"), ("If-Match", "if_match"))
_ANSWERED = (
    ("ETag", "etag"),
    ("Last-Modified", "last_modified"),
    ("Content-Length", "content_length"),
    ("Content-Range", "content_range"),
    ("Accept-Ranges", "accept_ranges"),
)


# Authorization schemes shown by name (RFC 9110 §11; AWS SigV4; Azure SharedKey).
_SCHEMES = frozenset({"basic", "bearer", "digest", "aws4-hmac-sha256", "sharedkey", "token"})


def traced_url(url: str) -> str:
    """`url` without userinfo or fragment, each query value `***`."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    query = "&".join(
        f"{pair.partition('=')[0]}=***" if "=" in pair else pair
        for pair in parts.query.split("&")
        if pair
    )
    return urlunsplit((parts.scheme, host, parts.path, query, ""))


def trace_exchange(
    log: Log,
    method: str,
    url: str,
    headers: Mapping[str, str],
    resp: http.client.HTTPResponse,
) -> None:
    """One debug line for a request and its answer's status and headers."""
    shown = traced_url(url)
    lowered = {k.lower(): v for k, v in headers.items()}
    asked = [(name, field, lowered.get(name.lower())) for name, field in _ASKED]
    scheme = auth_scheme(lowered.get("authorization"))
    answered = [(name, field, resp.getheader(name)) for name, field in _ANSWERED]
    location = resp.getheader("Location")
    shown_location = None if location is None else traced_url(location)
    request_text = " | ".join(
        [f"> {method} {shown}", *(f"{n}: {v}" for n, _, v in asked if v)]
        + ([f"auth: {scheme}"] if scheme else [])
    )
    answer_text = " | ".join(
        [f"< {resp.status}", *(f"{n}: {v}" for n, _, v in answered if v)]
        + ([f"Location: {shown_location}"] if shown_location else [])
    )
    fields: dict[str, object] = {f: v for _, f, v in (*asked, *answered) if v}
    log.debug(
        "http_request",
        f"{request_text} {answer_text}",
        method=method,
        url=shown,
        status=resp.status,
        auth=scheme,
        location=shown_location,
        **fields,
    )


def auth_scheme(value: str | None) -> str | None:
    """`Basic`, `Bearer`, ...: the scheme's word, never the credentials; a
    value that starts with no known scheme may be a bare token: `other`."""
    if value is None:
        return None
    word = value.split(" ", 1)[0]
    return word if word.lower() in _SCHEMES else "other"
