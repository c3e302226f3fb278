"""`HttpFetcher`: the ranged reads every scheme's bytes travel by.

The plain http(s) source, the Hugging Face `/resolve/` URLs and S3's
presigned GETs all go out here: HEAD and GET through the http.client
connection pool (connection.py, exchange.py), the TLS trust of tls.py,
credentials only by `AuthPolicy` (status.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmkube_stager.config import Config
from llmkube_stager.logs import Log
from llmkube_stager.model import RemoteFile
from llmkube_stager.sources.base import Body, RemoteMeta
from llmkube_stager.sources.wire.coding import CodingProof
from llmkube_stager.sources.wire.status import (
    USER_AGENT,
    AuthPolicy,
    Origin,
    sendable,
    split_userinfo,
)

if TYPE_CHECKING:
    import ssl

    import httpx

    from llmkube_stager.sources.wire.connection import ConnectionPool


class HttpFetcher:
    """HEAD and GET on the same http.client connections (the HEAD too since
    #16; httpx is left to callers that hold an httpx client, probe.py)."""

    parallel_ranges = True

    def __init__(self, config: Config) -> None:
        # Imported here: a warm start builds the manifest but never a fetcher.
        from llmkube_stager.sources.wire.connection import ConnectionPool

        self._config = config
        _, basic = split_userinfo(config.source)
        self._auth = AuthPolicy(config.secrets.hf_token, config.hf_endpoint, basic)
        self._ssl: ssl.SSLContext | None = None
        self._client: httpx.Client | None = None
        timeouts = config.timeouts
        self._pool: ConnectionPool = ConnectionPool(
            timeouts.connect_s, timeouts.stall_s, self.ssl_context, config.proxy
        )

    def ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            from llmkube_stager.sources.wire.tls import make_ssl_context

            self._ssl = make_ssl_context(self._config.ca_dir)
        return self._ssl

    def probe(self, file: RemoteFile) -> RemoteMeta:
        """A HEAD on the data path's keep-alive connections (http.client:
        a fifth of httpx's CPU per request, which a model of 2,000 files
        pays 2,000 times, #16)."""
        from llmkube_stager.sources.wire.exchange import head
        from llmkube_stager.sources.wire.probe import meta_from

        url, _ = split_userinfo(file.url)  # the credentials go in AuthPolicy's header
        url = sendable(url)
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        proof = CodingProof(pinned=file.sha256 is not None)
        final, status, answer = head(self._pool, url, headers, self._auth, proof)
        return meta_from(status, answer, final)

    def open(self, file: RemoteFile, meta: RemoteMeta, offset: int, end: int | None = None) -> Body:
        from llmkube_stager.sources.wire.exchange import open_get

        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if offset > 0 or end is not None:
            headers["Range"] = f"bytes={offset}-{'' if end is None else end}"
            if meta.if_range:
                # The origin answers 200 (whole new body) instead of splicing
                # when the object changed since the partial was written (scenario 80).
                headers["If-Range"] = meta.if_range
        if meta.if_match:
            headers["If-Match"] = meta.if_match
        # The probe already followed redirects; when the request goes there
        # directly, auth is judged against where this request starts.
        auth = self._auth_from(file.url, meta.url)
        url, _ = split_userinfo(meta.url)  # a GET without a probe starts at file.url
        url = sendable(url)
        asked, _ = split_userinfo(file.url)
        # A pin checks every byte; an S3 object's stored coding is metadata (#29 item 11).
        proof = CodingProof(file.sha256 is not None, meta.stored_encoding, meta.size_bytes)
        return open_get(self._pool, url, headers, auth, offset, end, asked_url=asked, proof=proof)

    def _auth_from(self, first_url: str, url: str) -> AuthPolicy:
        if Origin.of(first_url) != Origin.of(url):
            return AuthPolicy("", self._auth.hf_endpoint)
        return self._auth

    def bind_log(self, log: Log) -> None:
        """Each exchange at the debug level (trace.py)."""
        self._pool.log = log

    def close(self) -> None:
        self._pool.close()
        if self._client is not None:
            self._client.close()
