"""The small seam every source kind implements (fsspec-style scheme registry).

A `Source` turns the configuration into a `Manifest` (no network for plain
HTTP) and opens a `Fetcher` for ranged reads. A `Fetcher` translates its
library's exceptions into `SourceError` (the one boundary where third-party
exceptions are caught, ARCHITECTURE idea 3); the transfer engine above it
never sees httpx, http.client or botocore types.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from llmkube_stager.config import Config
from llmkube_stager.errors import InvalidFileSet, SourceKind, StagerError
from llmkube_stager.layout import destinations, listed_dest, parse_file_list
from llmkube_stager.listing import ListedFile, Listing
from llmkube_stager.logs import Log
from llmkube_stager.model import Manifest, RemoteFile


class StreamedDigest:
    """Whether the declared digest (md5 or crc32c, #33) was matched while
    the bytes were received: by a whole body from byte 0, or by a ranged
    transfer's follower.
    It belongs to ONE transfer (`for_one_transfer`): a match says nothing
    of the bytes of a later fetch of the same file."""

    def __init__(self) -> None:
        self.matched = False
        # The running digest of the last body from byte 0 and the bytes it
        # has hashed: a ranged transfer that carries on from that stream
        # (a widening) carries on from them too (transfer/declared.py).
        self.running: Any = None
        self.seen_bytes = 0


@dataclass(frozen=True)
class RemoteMeta:
    """What the origin says about a file before the body is fetched."""

    url: str  # where the bytes are (after redirects the probe followed)
    size_bytes: int | None  # None: unknown (no Content-Length, or 0: spec §8.1)
    etag: str | None  # part of the partial's name (spec §4.2)
    accept_ranges: bool
    # Sent with a resume so that a changed object answers 200, not a splice.
    if_range: str | None = None
    # Sent with every GET: the object must still be this one (S3 ETag).
    if_match: str | None = None
    # A digest the origin declares (HF LFS sha256): verified while receiving.
    sha256: str | None = None
    # The URL names one version forever (a commit-pinned HF resolve URL): a
    # partial may be resumed without a validator the origin checks.
    immutable: bool = False
    # The object's stored Content-Encoding (S3 HEAD): its metadata, which
    # the store returns with the stored bytes (#29 item 11).
    stored_encoding: str | None = None
    # Digests a store declares, base64 of the raw digest (GCS md5Hash and
    # crc32c, #33 item 1; Azure Content-MD5, item 2): checked over the whole
    # file before it is published.
    md5_b64: str | None = None
    crc32c_b64: str | None = None
    # The Last-Modified the origin sent (http(s)): the validator where no
    # strong ETag names the bytes (#46 item 1, `validator`).
    last_modified: str | None = None
    # Set by the fetcher when one body from byte 0 to its end hashed to the
    # declared digest while it was received (or by the engine's follower of
    # a ranged transfer): the check after the transfer is
    # then not repeated (a mutable cell shared by fetcher and engine, made
    # anew for each transfer: `for_one_transfer`).
    streamed_digest: StreamedDigest | None = field(default=None, compare=False, repr=False)

    @property
    def validator(self) -> str | None:
        """What names this version of the bytes: recorded when they are
        staged, compared by OnChange (#46 item 1). A strong ETag, else
        Last-Modified; a weak ETag never: it names "semantically
        equivalent" representations, not bytes (RFC 9110 §8.8.1), so the
        same weak tag may cover other bytes, and a replica or a compressing
        front may name the same bytes with another one (docs/reliability.md
        "What OnChange compares")."""
        if self.etag and not self.etag.startswith("W/"):
            return self.etag
        return self.last_modified or None

    def for_one_transfer(self) -> RemoteMeta:
        """This answer with a streamed-digest cell of its own: the session
        keeps a probe answer per file for the whole run and fetches with it
        again (a partial adopted or swept away is staged again), and a match
        of an earlier body must never vouch for the bytes of a later one
        (review of #33: a flipped byte published unchecked)."""
        if self.streamed_digest is None:
            return self
        return replace(self, streamed_digest=StreamedDigest())


class Body(Protocol):
    """One response body being received."""

    # Offset of the first body byte in the file: the requested offset for a
    # 206, 0 when the origin restarted with a 200 (pip's rule).
    start: int
    # Full size of the object, when the response says it.
    total_bytes: int | None
    # A 416 to `bytes=<size>-`: the partial is already complete (spec §5.2 5).
    complete: bool
    # The response's validators (a resumed 206 must carry the partial's).
    etag: str | None
    last_modified: str | None
    # Its end is provable: a Content-Length, chunked framing, a local file.
    # A close-delimited body cut short looks like a complete one.
    framed: bool

    def readinto(self, buffer: memoryview) -> int: ...

    @property
    def copy_into(self) -> Callable[[int, int], int] | None:
        """Capability: the kernel copies the next chunk into the descriptor
        at the offset and returns its length (a local file, nothing to
        hash); None where bytes must pass through user space."""
        ...

    def close(self) -> None: ...


class WrappedBody:
    """A body that passes another's through (a subclass adds what it does
    to the bytes in `readinto`): its facts are the wrapped one's, and no
    kernel copy bypasses it."""

    def __init__(self, body: Body) -> None:
        self._body = body
        self.start = body.start
        self.total_bytes = body.total_bytes
        self.complete = body.complete
        self.etag = body.etag
        self.last_modified = body.last_modified
        self.framed = body.framed

    def readinto(self, buffer: memoryview) -> int:
        return self._body.readinto(buffer)

    @property
    def copy_into(self) -> Callable[[int, int], int] | None:
        return None

    def close(self) -> None:
        self._body.close()


class Fetcher(Protocol):
    # Capability: several ranged requests into one file are worth it (not
    # for a local copy, which the kernel does).
    parallel_ranges: bool

    def probe(self, file: RemoteFile) -> RemoteMeta: ...

    def open(self, file: RemoteFile, meta: RemoteMeta, offset: int, end: int | None = None) -> Body:
        """Bytes from `offset` to `end` inclusive (None: to the end)."""
        ...

    def bind_log(self, log: Log) -> None:
        """Capability: a fetcher that reports on its own (S3: where its
        credentials came from, a re-signed URL) takes the run's log."""
        ...

    def close(self) -> None: ...


class Source(Protocol):
    kind: SourceKind
    # Capability: a file can be fetched even when its probe failed (a plain
    # URL: spec §8.1 "try GET"); a source whose probe resolves where the
    # bytes are (S3 presigning, the hub API) cannot.
    get_without_probe: bool
    # The revision the user asked for, where the source has revisions (a
    # Hugging Face branch, tag or commit); None elsewhere.
    revision: str | None

    def manifest(self) -> Manifest: ...

    def fetcher(self) -> Fetcher: ...

    def preflight(self) -> None:
        """What the source can only check by reading local files (an S3
        profile, a token file, a CA bundle): before the cache is touched,
        raising ConfigError (#11 item 12)."""
        ...


@runtime_checkable
class SecondCopy(Protocol):
    """Capability: a fetcher that can get a file's bytes from a second
    place when a transfer from the first failed (the mirror before the
    origin, mirror/reader.py)."""

    def instead(
        self, file: RemoteFile, meta: RemoteMeta, err: StagerError
    ) -> RemoteMeta | None: ...


def meta_instead(
    fetcher: Fetcher, file: RemoteFile, meta: RemoteMeta, err: StagerError
) -> RemoteMeta | None:
    """The answer to fetch `file` with after a transfer with `meta`
    failed with `err`; None: there is no second copy."""
    if isinstance(fetcher, SecondCopy):
        return fetcher.instead(file, meta, err)
    return None


@runtime_checkable
class ListingSource(Protocol):
    """Capability: a source whose files can be listed (an s3:// prefix
    without MODEL_FILES, #24 item 5: staging/listed.py)."""

    lists: bool  # this configuration lists (no MODEL_FILES)
    listing: Listing | None  # the listing in use, once chosen
    listing_source: str  # the source a recorded listing must answer

    def list_files(self, retry: Callable[[Callable[[], Any]], Any]) -> Listing: ...

    def use_listing(self, listing: Listing) -> None: ...

    def manifest(self) -> Manifest: ...


@runtime_checkable
class DigestListingSource(Protocol):
    """Capability: a listed source whose whole listing is named by one
    digest the origin can be asked for without the listing (an OCI tag's
    manifest digest, #43): OnChange asks that (one HEAD) and keeps the
    recorded listing while it is the same."""

    def listing_digest(self, retry: Callable[[Callable[[], Any]], Any]) -> str | None:
        """The digest the source names now; None when it cannot say."""
        ...


def check_listed(source: str, files: tuple[ListedFile, ...], *, stamps_beside: bool = True) -> None:
    """The relative paths of a listing (an S3 prefix, a hub repo), checked as
    MODEL_FILES entries are: a hostile listing writes nothing (#24).
    `stamps_beside=False` in KServe mode, where a `x.sha256` is a file like
    any other (layout.staged_rel, #31 item 4)."""
    rels = [f.rel for f in files]
    try:
        if any("\n" in rel for rel in rels):
            raise InvalidFileSet("a key holds a newline")
        parse_file_list("\n".join(rels), stamps_beside=stamps_beside)
    except InvalidFileSet as err:
        # The user set no MODEL_FILES: the message names the keys (#24 review).
        detail = (
            err.detail.replace("MODEL_FILES entry", "key")
            .replace("MODEL_FILES lists", "it lists the key")
            .replace("MODEL_FILES has", "it has")
        )
        raise InvalidFileSet(f"the listing of {source} cannot be staged: {detail}") from None


class RangeUnusable(Exception):
    """The origin answered a Range request inconsistently (wrong
    Content-Range): the transfer restarts from zero without ranges."""


def build_manifest(
    config: Config, kind: SourceKind, display: str, url_for: Callable[[str], str]
) -> Manifest:
    """The manifest every source shares: one RemoteFile per destination
    (multi-file under CACHE_DIR, single file at MODEL_PATH), pins attached;
    only where each file comes from differs (`url_for(rel)`)."""
    root, pairs = destinations(config.cache_dir, config.model_path, config.model_files)
    files = tuple(
        RemoteFile(rel=rel, url=url_for(rel), dest=dest, sha256=config.pins.get(rel))
        for rel, dest in pairs
    )
    return Manifest(kind, root, files, config.multi_file, display)


def listed_manifest(
    kind: SourceKind, config: Config, listing: Listing, url_of: Callable[[ListedFile], str]
) -> Manifest:
    """The manifest of a listed prefix (an S3, GCS or Azure Blob listing):
    each file where the mode stages it (`listed_dest`: in KServe mode a
    `x.sha256` object apart from the stamp of `x`, #31 item 4), named by
    the URL `url_of` gives its listed entry."""
    root = config.cache_dir
    files = tuple(
        RemoteFile(
            rel=f.rel,
            url=url_of(f),
            dest=listed_dest(root, f.rel, config.kserve_mode),
            size_bytes=f.size_bytes,
        )
        for f in listing.files
    )
    return Manifest(kind, root, files, True, listing.source)
