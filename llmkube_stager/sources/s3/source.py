"""s3:// sources (AWS S3 and S3-compatible servers such as MinIO).

boto3 does the control path: HEAD for size and ETag, and presigning. The
bytes travel through the agent's own data path as a presigned GET pinned to
the object with `If-Match: <ETag>`, so a changed object answers 412
(ModelSourceChanged) instead of splicing, and ranged resume works like HTTP.
That path moves bytes several times faster than botocore's StreamingBody
(docs/performance.md).

Credentials come from boto3's default chain (session.py); only when it
finds none are requests sent unsigned (public buckets), and the log says so.
A URL is presigned for each request, just before it is sent: presigning is
a local computation, and a long transfer outlives both a presign's lifetime
and the temporary credentials it was signed with (IRSA: one hour). A GET
refused with 403 is presigned again once, at once, outside the retry
budget: an expired signature is not the origin failing (#12 item 2).

The settings are checked before any I/O (`S3Source`, settings.py): a bad
endpoint, region or addressing style, half a key pair, or a missing profile
is InvalidConfiguration (#11 item 12). docs/sources.md tells what is sent where.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from llmkube_stager.config import Config
from llmkube_stager.errors import Reason, SourceError, SourceKind
from llmkube_stager.listing import Listing
from llmkube_stager.model import RemoteFile
from llmkube_stager.sources.base import Body, RemoteMeta, StreamedDigest
from llmkube_stager.sources.prefix import BucketSource, listed_key, retried
from llmkube_stager.sources.s3.settings import (
    S3Ref,
    S3Settings,
    object_key,
    parse_s3_ref,
    s3_settings,
)

if TYPE_CHECKING:
    from llmkube_stager.logs import Log
    from llmkube_stager.sources.s3.clients import S3Clients
    from llmkube_stager.sources.wire.fetcher import HttpFetcher

# Each URL is presigned just before its request: minutes are plenty, and a
# leaked URL (it is never logged) is useless soon.
PRESIGN_EXPIRY_S = 900


class S3Source(BucketSource):
    kind: SourceKind = "s3"

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.ref = parse_s3_ref(config)
        self.settings = s3_settings(config)
        self._clients: S3Clients | None = None

    def list_files(self, retry: Callable[[Callable[[], Any]], Any]) -> Listing:
        """ListObjectsV2 of the prefix, each page asked through `retry`."""
        from llmkube_stager.sources.s3.listing import list_objects

        where = self.listing_source
        page = retried(retry, self._open_clients().list_page, where)
        return list_objects(where, self.ref.bucket, self._listed_key(), page)

    @property
    def listing_source(self) -> str:
        return f"s3://{self.ref.bucket}/{self._listed_key()}"

    def _listed_key(self) -> str:
        source = self._config.source
        key = source[5:].partition("/")[2] if source[:5].lower() == "s3://" else ""
        return self._config.s3_prefix or key

    def use_listing(self, listing: Listing) -> None:
        self.listing = listing
        self.ref = S3Ref(self.ref.bucket, listing.base)

    def preflight(self) -> None:
        """What needs a file read (the profile, token files, the CA bundle),
        checked before the model directory exists; stage calls it only when
        the origin will be asked, never on a warm start."""
        self._open_clients()

    def _open_clients(self) -> S3Clients:
        from llmkube_stager.sources.s3.clients import S3Clients

        if self._clients is None:
            self._clients = S3Clients(self._config, self.settings, self.ref.bucket)
        return self._clients

    def _display(self) -> str:
        return f"s3://{self.ref.bucket}/{self.ref.key}"

    def _url_of(self, name: str, multi_file: bool) -> str:
        return f"s3://{self.ref.bucket}/{object_key(self.ref, name, multi_file)}"

    def fetcher(self) -> S3Fetcher:
        clients, self._clients = self._open_clients(), None  # the fetcher closes them
        return S3Fetcher(
            self._config, self.ref, self.settings, clients=clients, listing=self.listing
        )


class S3Fetcher:
    parallel_ranges = True

    def __init__(
        self,
        config: Config,
        ref: S3Ref,
        settings: S3Settings,
        *,
        presign_expiry_s: int = PRESIGN_EXPIRY_S,
        clients: S3Clients | None = None,
        listing: Listing | None = None,
    ) -> None:
        from llmkube_stager.sources.s3.clients import S3Clients
        from llmkube_stager.sources.wire.fetcher import HttpFetcher

        self._config = config
        self._ref = ref
        self._expiry_s = presign_expiry_s
        self._log: Log | None = None
        self._clients = clients or S3Clients(config, settings, ref.bucket)
        self._http: HttpFetcher = HttpFetcher(config)
        self._listed = listing.by_rel if listing is not None else {}
        # Stored Content-Encodings of listed objects, asked once (#29 item 11).
        self._stored: dict[str, str] = {}

    def bind_log(self, log: Log) -> None:
        self._log = log
        self._clients.log = log
        self._http.bind_log(log)

    def _where(self, file: RemoteFile) -> tuple[str, str]:
        rel = listed_key(self._listed, file.rel)  # #31 item 4
        key = object_key(self._ref, rel, self._config.multi_file)
        return key, f"s3://{self._ref.bucket}/{key}"

    def probe(self, file: RemoteFile) -> RemoteMeta:
        listed = self._listed.get(file.rel)
        if listed is not None:
            # The listing said it (#24 item 5): no HEAD per object; the GET's
            # If-Match pins the bytes to the listed ETag.
            etag = listed.validator or None
            return RemoteMeta(file.url, listed.size_bytes, etag, True, if_match=etag)
        key, where = self._where(file)
        head = self._clients.head(key, where)
        etag = head.get("ETag")
        size = head.get("ContentLength")
        return RemoteMeta(
            url=file.url,  # never a presigned URL: those are made per request
            size_bytes=size if isinstance(size, int) else None,
            etag=etag,
            accept_ranges=True,
            if_match=etag,
            stored_encoding=_stored_encoding(head),
            # Checked before publishing, as gs:// and Azure check theirs (#41 item 7).
            md5_b64=etag_md5(head),
            streamed_digest=StreamedDigest(),
        )

    def open(self, file: RemoteFile, meta: RemoteMeta, offset: int, end: int | None = None) -> Body:
        key, where = self._where(file)
        if meta.stored_encoding is None and file.rel in self._stored:
            meta = replace(meta, stored_encoding=self._stored[file.rel])
        try:
            return self._open_as_stored(file, meta, key, where, offset, end)
        except SourceError as err:
            # Every request of the open, the one asked again with the stored
            # coding too (#31 C2): S3 throttles with 503 SlowDown: back off,
            # as from a 429.
            if _status_of(err) == 503:
                raise err.amended(reason=Reason.SOURCE_RATE_LIMITED) from err.__cause__
            raise

    def _open_as_stored(
        self, file: RemoteFile, meta: RemoteMeta, key: str, where: str, offset: int, end: int | None
    ) -> Body:
        from llmkube_stager.sources.wire.coding import EncodedAnswer

        try:
            return self._get(file, meta, key, where, offset, end)
        except EncodedAnswer:
            stored = self._stored_encoding(file, meta, key, where)
            if stored is None:
                raise
        # A listed object answered with the coding its store keeps for it:
        # metadata, not a hop's (#29 item 11). Asked again with it; its
        # other ranges are asked with it at once.
        self._stored[file.rel] = stored
        return self._get(file, replace(meta, stored_encoding=stored), key, where, offset, end)

    def _stored_encoding(
        self, file: RemoteFile, meta: RemoteMeta, key: str, where: str
    ) -> str | None:
        """A listed object's stored Content-Encoding (ListObjectsV2 does not
        say it): one HEAD, only once an answer carried a coding. None when
        the probe's HEAD already said it, or the object has none."""
        if file.rel not in self._listed or meta.stored_encoding is not None:
            return None
        return _stored_encoding(self._clients.head(key, where))

    def _get(
        self, file: RemoteFile, meta: RemoteMeta, key: str, where: str, offset: int, end: int | None
    ) -> Body:
        signed = replace(meta, url=self._clients.presign(key, where, self._expiry_s))
        try:
            return self._http.open(file, signed, offset, end)
        except SourceError as err:
            if _status_of(err) != 403:
                raise
        # The signature or its temporary credentials expired on the way:
        # signing again is local, so it spends no retry budget.
        if self._log is not None:
            self._log.info(
                "presign_again",
                f"the presigned GET of {where} was refused (HTTP 403); signing it again",
                file=file.rel,
            )
        signed = replace(meta, url=self._clients.presign(key, where, self._expiry_s))
        return self._http.open(file, signed, offset, end)

    def close(self) -> None:
        self._http.close()
        self._clients.close()


# SSE-KMS (`aws:kms`, `aws:kms:dsse`) and SSE-C objects have ETags that
# are not the MD5 of their bytes; SSE-S3 (`AES256`) and unencrypted
# single-part objects have (S3 API reference, Object.ETag).
_MD5_ETAG_SSE = frozenset(("", "AES256"))


def etag_md5(head: Mapping[str, Any]) -> str | None:
    """A HEAD's ETag as the base64 MD5 of the object's bytes, where S3
    makes it one: a single-part object (32 hex digits; a multipart ETag is
    `<md5 of the parts' md5s>-<N>`) neither SSE-KMS nor SSE-C encrypted
    (#41 item 7). None: nothing declared, the bytes stay unchecked (a
    listed object too: ListObjectsV2 does not say how it is encrypted)."""
    etag = head.get("ETag")
    sse = head.get("ServerSideEncryption") or ""
    if not isinstance(etag, str) or head.get("SSECustomerAlgorithm") or sse not in _MD5_ETAG_SSE:
        return None
    hex_digest = etag.strip().strip('"')
    if len(hex_digest) != 32 or any(c not in "0123456789abcdefABCDEF" for c in hex_digest):
        return None
    import base64

    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


def _stored_encoding(head: dict[str, Any]) -> str | None:
    value = head.get("ContentEncoding")
    return value if isinstance(value, str) and value.strip() else None


def _status_of(err: SourceError) -> int | None:
    """The HTTP status the data path got, if the origin answered."""
    return None if err.wire is None else err.wire.http_status
