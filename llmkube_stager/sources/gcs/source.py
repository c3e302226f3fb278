"""gs:// sources (Google Cloud Storage, and emulators or private endpoints
under STORAGE_EMULATOR_HOST), #33 item 1.

The control path is the JSON API on the agent's connections (session.py):
one listing per run for a prefix (listing.py), or one metadata request per
named object, each giving size, generation, md5Hash and crc32c. The bytes
travel through the agent's own engine (ranged, resumable, parallel) as
`alt=media` GETs of the generation listed, with the run's bearer token
(auth.py): a generation is immutable, so a partial resumes without any
validator the origin must check, and an object replaced in flight answers
404 for the old generation (ModelSourceChanged), never its new bytes in
the middle of the old ones. The md5Hash (or crc32c) the service declares
is checked before a file is published (transfer/declared.py), as the hub's
sha256 is. google-auth alone is the library: google-cloud-storage
downloads through its own `requests` session (`Blob.download_to_filename`
-> google-resumable-media), where the engine could not move the bytes
(docs/design.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmkube_stager.config import Config
from llmkube_stager.errors import ConfigError, SourceError, SourceKind
from llmkube_stager.listing import Listing
from llmkube_stager.model import RemoteFile
from llmkube_stager.sources.base import Body, RemoteMeta, StreamedDigest
from llmkube_stager.sources.gcs.objects import GcsObject, from_validator
from llmkube_stager.sources.gcs.ref import (
    GcsRef,
    check_hostport,
    endpoint_of,
    media_url,
    object_name,
    parse_gs,
)
from llmkube_stager.sources.prefix import BucketSource, listed_key, retried
from llmkube_stager.sources.wire.status import AuthPolicy, Origin

if TYPE_CHECKING:
    from llmkube_stager.logs import Log
    from llmkube_stager.sources.gcs.auth import Tokens
    from llmkube_stager.sources.gcs.session import GcsSession
    from llmkube_stager.sources.wire.connection import ConnectionPool


class GcsSource(BucketSource):
    kind: SourceKind = "gcs"

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.ref = parse_gs(config.source)
        # Checked before any I/O (InvalidConfiguration naming the variable).
        endpoint_of(config.gcs_emulator_host, config.gcs_api_endpoint)
        check_hostport("GCE_METADATA_HOST", config.gcs_metadata_host)
        check_hostport("GCE_METADATA_IP", config.gcs_metadata_ip)
        if not config.multi_file and (not self.ref.path or self.ref.path.endswith("/")):
            raise ConfigError(
                "MODEL_SOURCE names a bucket or prefix but no object for MODEL_PATH; name the "
                "object (gs://bucket/path/model.gguf) or set CACHE_DIR without MODEL_PATH"
            )
        self._session: GcsSession | None = None

    @property
    def listing_source(self) -> str:
        return self._listed_ref.display

    @property
    def _listed_ref(self) -> GcsRef:
        return parse_gs(self._config.source)

    def list_files(self, retry: Callable[[Callable[[], Any]], Any]) -> Listing:
        from llmkube_stager.sources.gcs.listing import list_objects

        ref, where = self._listed_ref, self.listing_source
        page = retried(retry, self._open_session().list_page, where)
        return list_objects(where, ref.bucket, ref.path, page)

    def use_listing(self, listing: Listing) -> None:
        self.listing = listing
        self.ref = GcsRef(self.ref.bucket, listing.base)

    def preflight(self) -> None:
        self._open_session().preflight()

    def _open_session(self) -> GcsSession:
        from llmkube_stager.sources.gcs.session import GcsSession

        if self._session is None:
            self._session = GcsSession(self._config, self.ref.bucket)
        return self._session

    def _display(self) -> str:
        return self.ref.display

    def _url_of(self, name: str, multi_file: bool) -> str:
        return f"gs://{self.ref.bucket}/{object_name(self.ref, name, multi_file)}"

    def fetcher(self) -> GcsFetcher:
        session, self._session = self._open_session(), None  # the fetcher closes it
        return GcsFetcher(self._config, self.ref, session, self.listing)


@dataclass(frozen=True)
class BearerAuth(AuthPolicy):
    """The run's token, to the JSON API's origin only, never across a
    redirect to another host (the agent's AuthPolicy rule)."""

    origin: Origin | None = None
    tokens: Tokens | None = field(default=None, repr=False, compare=False)

    def headers_for(self, url: str, first_url: str) -> dict[str, str]:
        here = Origin.of(url)
        if self.tokens is None or here != self.origin or here != Origin.of(first_url):
            return {}
        return self.tokens.header()


class GcsFetcher:
    parallel_ranges = True

    def __init__(
        self, config: Config, ref: GcsRef, session: GcsSession, listing: Listing | None
    ) -> None:
        self._config = config
        self._ref = ref
        self._session = session
        self._listed = listing.by_rel if listing is not None else {}
        self._pool: ConnectionPool | None = None
        self._auth: BearerAuth | None = None
        self._log: Log | None = None
        self._crc32c_said = False
        self._crc32c_lock = threading.Lock()

    def _say_unchecked_crc32c(self) -> None:
        """A composite object declares crc32c alone, and transfer/declared.py
        checks it only with google-crc32c's C code (a Python CRC would cost
        minutes a GiB): without it the bytes are published on the generation
        pin alone, which is said, once a run (#33 review item 6)."""
        with self._crc32c_lock:  # files in flight probe at once: said once
            if self._crc32c_said or crc32c_c_code():
                return
            self._crc32c_said = True
        if self._log is not None:
            self._log.warning(
                "gcs_crc32c_unchecked",
                "a composite object declares only a crc32c and google-crc32c's C code is not "
                "installed: its bytes are not checked against it (only pinned to the listed "
                "generation); install google-crc32c from a wheel with its C extension",
            )

    def bind_log(self, log: Log) -> None:
        from llmkube_stager.sources.gcs.ref import is_emulator

        self._session.log = self._session.pool.log = log
        self._log = log
        if is_emulator(self._config.gcs_emulator_host):
            # Said here: the session chose before a log was bound (preflight).
            log.info(
                "gcs_emulator_anonymous",
                "STORAGE_EMULATOR_HOST is set: sending anonymous requests to the emulator, as "
                "google-cloud-storage does (API_ENDPOINT_OVERRIDE is the custom endpoint that "
                "is sent the credentials)",
            )

    def _object(self, file: RemoteFile) -> GcsObject:
        listed = self._listed.get(file.rel)
        name = object_name(self._ref, listed_key(self._listed, file.rel), self._config.multi_file)
        if listed is not None:
            obj = from_validator(name, listed.size_bytes, listed.validator)
            if obj is not None:
                return obj  # the listing said it: no request per object
        return self._session.object_meta(name)

    def probe(self, file: RemoteFile) -> RemoteMeta:
        from llmkube_stager.sources.wire.coding import stored_coding_refused, stored_transform

        obj = self._object(file)
        # KServe mode: refused before a byte is fetched (#41 item 6).
        if self._config.kserve_mode and stored_transform(obj.content_encoding):
            raise stored_coding_refused(file.url, obj.content_encoding or "")
        if obj.crc32c_b64 and not obj.md5_b64:
            self._say_unchecked_crc32c()
        return RemoteMeta(
            url=media_url(self._session.endpoint, self._session.bucket, obj.name, obj.generation),
            size_bytes=obj.size_bytes or None,
            etag=obj.validator,
            accept_ranges=True,
            # One generation's bytes never change: resumable without a
            # validator the origin checks; its digests are checked whole.
            immutable=True,
            md5_b64=obj.md5_b64,
            crc32c_b64=obj.crc32c_b64,
            streamed_digest=StreamedDigest(),
            stored_encoding=obj.content_encoding,
        )

    def open(self, file: RemoteFile, meta: RemoteMeta, offset: int, end: int | None = None) -> Body:
        from llmkube_stager.sources.gcs.errors import status_of, translated

        tokens = self._session.tokens()
        tokens.header()  # a token now: the one a 401 below refused
        used = tokens.current()
        try:
            return self._get(file, meta, offset, end)
        except SourceError as err:
            if not (status_of(err) == 401 and tokens.refresh_after_refusal(used)):
                raise translated(err) from err.__cause__
        # A token revoked or rotated mid-transfer: refreshing it is not the
        # origin failing, so it spends no retry budget (#33 item 1).
        try:
            return self._get(file, meta, offset, end)
        except SourceError as err:
            raise translated(err) from err.__cause__

    def _get(self, file: RemoteFile, meta: RemoteMeta, offset: int, end: int | None) -> Body:
        from llmkube_stager.sources.wire.coding import CodingProof, accepted_for
        from llmkube_stager.sources.wire.exchange import open_get
        from llmkube_stager.sources.wire.status import USER_AGENT, sendable

        # An object stored gzip-encoded is asked for as stored: GCS would
        # otherwise decompress it whole, Range ignored, into bytes its
        # md5Hash does not cover (#41 item 6).
        accept = accepted_for(meta.stored_encoding)
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": accept}
        if offset > 0 or end is not None:
            headers["Range"] = f"bytes={offset}-{'' if end is None else end}"
        proof = CodingProof(file.sha256 is not None, meta.stored_encoding, meta.size_bytes)
        url = sendable(meta.url)
        body: Body = open_get(
            self._session.pool,
            url,
            headers,
            self._bearer(),
            offset,
            end,
            asked_url=file.url,
            proof=proof,
        )
        from llmkube_stager.sources.wire.digest import digest_while_received

        return digest_while_received(body, meta, offset, end)

    def _bearer(self) -> BearerAuth:
        if self._auth is None:
            tokens = self._session.tokens()
            self._auth = BearerAuth("", "", None, self._session.origin, tokens)
        return self._auth

    def close(self) -> None:
        self._session.close()


def crc32c_c_code() -> bool:
    """Whether google-crc32c imports with its C code (sources/wire/digest.py
    decides with the same answer which digest is checked)."""
    from llmkube_stager.sources.wire.digest import crc32c_c_module

    return crc32c_c_module() is not None
