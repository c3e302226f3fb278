"""Content codings: encoded bytes are never the model (#22 item 1).

Every request asks for `Accept-Encoding: identity`. An origin, CDN or proxy
that answers with a `Content-Encoding` other than `identity` (gzip, br,
deflate, zstd, ...) sends other bytes than the file: published, they would
be a wrong file with the encoded length as its size record, and a resume
would splice ranges of the encoded bytes into it. A `Transfer-Encoding`
coding other than `chunked` is the same. So such an answer is refused
before a byte of it is written, with a reason that names the header and
the hop that sent it.

Transfer-Encoding is framing too (#29 item 3): `chunked` as the last and
only chunked coding, after nothing but `identity`s, is how the body ends,
and the data path makes the client decode it (`chunked_framing`) whatever
the spelling: http.client decodes only a value that is exactly `chunked`
(`chunked `, `identity, chunked` or two header lines left the chunk
framing in the file). `chunked` twice or not last leaves no way to tell
where the body ends (RFC 9112 §6.3): refused. (curl 7.88 decodes such a
body once, right only where the sender chunked it once.)

Why refuse rather than decode: the sizes the agent knows (the HEAD's
Content-Length, S3's ContentLength) are then the encoded length, ranges
(resume, parallel connections) are ranges of the encoded bytes, and the
coding is the symptom of a misconfigured origin or proxy that a person
should fix once; refusing is the one answer that is right in every case.
Pure functions; the data path (exchange.py) supplies what it knows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from llmkube_stager.errors import (
    REMEDY_ENCODED,
    REMEDY_STORED_ENCODING,
    Reason,
    SourceError,
)
from llmkube_stager.sources.wire.status import Origin, parse_content_range, parse_length

HeaderGet = Callable[[str], str | None]

_NOT_CODINGS = frozenset({"", "identity"})
_SHOWN_CHARS = 80


def _tokens(value: str | None) -> list[str]:
    """A header's comma-separated tokens (every line of it, joined as
    http.client's getheader joins them), stripped, lowercased."""
    return [part.strip().lower() for part in (value or "").split(",")]


def _codings(value: str | None) -> bool:
    return any(token not in _NOT_CODINGS for token in _tokens(value))


def transfer_codings(value: str | None) -> list[str]:
    """The Transfer-Encoding tokens that are not `identity` (nor empty)."""
    return [token for token in _tokens(value) if token not in _NOT_CODINGS]


def chunked_framing(value: str | None) -> bool:
    """Whether a Transfer-Encoding value (every line, joined) says the body
    comes in chunks: `chunked` its one coding, `identity`s aside. Only for
    a value `encoding_header` lets through (#29 item 3)."""
    return transfer_codings(value) == ["chunked"]


def _unframeable(value: str) -> bool:
    """A Transfer-Encoding the agent never reads a body under: any coding
    but `chunked`, `chunked` twice, or `chunked` not the last token."""
    tokens = [token for token in _tokens(value) if token]
    codings = transfer_codings(value)
    return bool(codings) and (codings != ["chunked"] or tokens[-1] != "chunked")


def encoding_header(get: HeaderGet) -> tuple[str, str] | None:
    """(header name, value) of an answer whose body is encoded or framed so
    that no client can tell where it ends, or None."""
    value = get("content-encoding")
    if value is not None and _codings(value):
        return "Content-Encoding", value
    value = get("transfer-encoding")
    if value is not None and _unframeable(value):
        return "Transfer-Encoding", value
    return None


def _shown(text: str) -> str:
    printable = "".join(c if c.isprintable() else "?" for c in text.strip())
    return printable[:_SHOWN_CHARS]


def _hostport(origin: Origin) -> str:
    host = f"[{origin.host}]" if ":" in origin.host else origin.host
    return f"{host}:{origin.port}"


def hop_words(asked_url: str, url: str, proxy: str | None, via: str | None) -> str:
    """Which hop sent the answer, as far as the client can tell: the origin
    asked or the redirect target (a CDN), the forward proxy a plain-http
    request went through (it may rewrite the body; through a CONNECT tunnel
    only a TLS-intercepting proxy could), and any `Via` a proxy added."""
    here, first = Origin.of(url), Origin.of(asked_url)
    if first.scheme not in ("http", "https"):
        # An s3:// object: its presigned GET went to the S3 endpoint, no
        # redirect, and the bucket is no host (#29 item 11).
        who = f"the {first.scheme.upper()} endpoint {_hostport(here)}"
    elif here == first:
        who = f"the origin {_hostport(here)}"
    else:
        who = f"the redirect target {_hostport(here)} (redirected from {_hostport(first)})"
    if proxy is not None and here.scheme == "http":
        who += f" or the proxy {proxy} the request went through"
    elif proxy is not None:
        who += f", through the proxy {proxy}'s tunnel (only a TLS-intercepting proxy changes it)"
    if via:
        who += f"; a proxy on the way says Via: {_shown(via)}"
    return who


class EncodedAnswer(SourceError):
    """The refusal of an answer whose body may have been transformed;
    `header`: the (name, value) that says so."""

    def __init__(self, detail: str, *, header: tuple[str, str], **fields: Any) -> None:
        super().__init__(detail, **fields)
        self.header = header


def encoded_error(where: str, header: tuple[str, str], who: str) -> EncodedAnswer:
    """The refusal of an encoded answer: ModelSourceRejected, exit 4 (the
    same hop answers the same way until someone changes its setup)."""
    name, value = header
    error = EncodedAnswer(
        f"{where} answered with {name}: {_shown(value)}, sent by {who}; the agent asked for "
        "identity and never writes encoded bytes as the model",
        reason=Reason.SOURCE_REJECTED,
        answered=True,
        remedy=REMEDY_ENCODED,
        header=header,
    )
    return error


# #29 item 11: Content-Encoding that no hop applied. The codings that
# transform a body: the IANA HTTP Content Coding registry, the `x-` aliases
# and the unregistered compressions clients still decode. Any other token
# names no transformation (`utf-8`, `binary`; S3's `aws-chunked`, the
# framing of an upload that the store removed, never applied to an
# answer): curl, boto3 and KServe's initializer save such a body as it
# comes, and so does the agent.
_TRANSFORMING = frozenset(
    {
        "gzip", "x-gzip", "deflate", "x-deflate", "br", "compress", "x-compress", "zstd",
        "aes128gcm", "dcb", "dcz", "exi", "pack200-gzip", "sdch", "bzip2", "x-bzip2", "xz",
        "lzma", "lz4", "snappy",
    }
)  # fmt: skip


@dataclass(frozen=True)
class CodingProof:
    """What shows that an answer's Content-Encoding changed nothing of the
    bytes (#29 item 11)."""

    # A sha256 pin checks every byte before anything is published: bytes
    # that match it are the file, whatever the header says.
    pinned: bool = False
    # The object's own Content-Encoding as its store keeps it (S3 HEAD):
    # returned with its stored bytes, metadata rather than a hop's coding.
    stored: str | None = None
    # The object's size as its store says it: the stored coding vouches
    # only for an answer of the stored length (a hop that compresses the
    # GET and labels the HEAD too changes the length).
    stored_bytes: int | None = None


NO_PROOF = CodingProof()


def _coding_tokens(value: str) -> list[str]:
    return [token for part in value.split(",") if (token := part.strip().lower())]


def transforms(value: str, proof: CodingProof) -> bool:
    """Whether a Content-Encoding value may mean a hop transformed the body
    and nothing proves the bytes."""
    if proof.pinned:
        return False
    if proof.stored is not None and _coding_tokens(value) == _coding_tokens(proof.stored):
        return False
    return any(token in _TRANSFORMING for token in _coding_tokens(value))


def stored_transform(stored: str | None) -> bool:
    """Whether an object's stored Content-Encoding is a coding that
    transforms its bytes (gzip, br, ...), not a label such as `utf-8`."""
    return stored is not None and any(t in _TRANSFORMING for t in _coding_tokens(stored))


def accepted_for(stored: str | None) -> str:
    """The Accept-Encoding that gets an object's stored bytes: `identity`,
    or `gzip` for one stored gzip-encoded, which GCS would otherwise
    decompress on the fly (decompressive transcoding: the whole object
    whatever Range asked, other bytes than its md5Hash covers; #41 item 6)."""
    tokens = _coding_tokens(stored or "")
    return "gzip" if tokens and set(tokens) <= {"gzip", "x-gzip"} else "identity"


def stored_coding_refused(where: str, stored: str) -> SourceError:
    """KServe mode's refusal of an object stored with a transforming coding
    (#41 item 6): KServe's google-cloud-storage and azure-storage-blob
    leave it decompressed; the agent does not decompress, and leaves no
    other bytes than KServe would under the initializer's name."""
    return SourceError(
        f"{where} is stored with Content-Encoding: {_shown(stored)}; in KServe mode the "
        "agent does not save an object's compressed stored bytes where KServe leaves the "
        "decompressed file",
        reason=Reason.SOURCE_REJECTED,
        answered=True,
        remedy=REMEDY_STORED_ENCODING,
    )


def unproven(get: HeaderGet, proof: CodingProof) -> HeaderGet:
    """`get` without a Content-Encoding that cannot have changed the body
    (`transforms`), for `encoding_header`: every other header, and
    Transfer-Encoding above all, is judged as before."""

    def filtered(name: str) -> str | None:
        value = get(name)
        if name.lower() == "content-encoding" and value is not None:
            stored_length = _stored_length(get, proof.stored_bytes)
            proven = proof if stored_length else replace(proof, stored=None)
            return value if transforms(value, proven) else None
        return value

    return filtered


def _stored_length(get: HeaderGet, stored_bytes: int | None) -> bool:
    """The answer carries the stored object's length: all of it (200), or
    a range of it whose body is the range's length (206)."""
    if stored_bytes is None:
        return False
    # Read as the framing check reads it (exchange._check_length): the same
    # value on two lines, joined `N, N`, is one length (#31 C1).
    length = parse_length(get("content-length"))
    span = get("content-range")
    if span is None:
        return length == stored_bytes
    parsed = parse_content_range(span)
    if parsed is None:
        return False
    start, end, total = parsed
    return total == stored_bytes and length == end - start + 1
