"""Azure Blob requests on the agent's own wire (#33 item 2): the listing,
a HEAD, and the GETs the engine asks for, each authorised by the run's
credential (a SAS in the query, or a bearer token header) and sent through
the http.client pool of every other source (proxies, CA, timeouts, the
connect bound, redirects judged per hop).

A 401/403 is answered once more at once with a fresh SAS or token when
the credential can make one (a token revoked or expired on the way, a
clock that moved): renewing is not the origin failing, so it spends no
retry budget, as S3's presign-again does (s3/source.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from llmkube_stager.errors import SourceError
from llmkube_stager.logs import Log
from llmkube_stager.sources.azure.credentials import Credential
from llmkube_stager.sources.azure.errors import azure_error, status_of
from llmkube_stager.sources.wire.status import USER_AGENT, AuthPolicy, Origin, sendable

if TYPE_CHECKING:
    from llmkube_stager.config import Config
    from llmkube_stager.sources.base import Body
    from llmkube_stager.sources.wire.coding import CodingProof
    from llmkube_stager.sources.wire.connection import ConnectionPool

# A listing page is XML of at most 5,000 blobs (~2 MB); more is not a page.
MAX_PAGE_BYTES = 64 << 20
_T = TypeVar("_T")


@dataclass(frozen=True)
class _AzureAuth(AuthPolicy):
    """The credential's headers, for the endpoint's origin only (never to
    another host a redirect names)."""

    origin: Origin | None = None
    credential: Any = field(default=None, repr=False)

    def headers_for(self, url: str, first_url: str) -> dict[str, str]:
        if self.credential is None or Origin.of(url) != self.origin:
            return {}
        headers: dict[str, str] = self.credential.headers()
        return headers


class AzureClient:
    def __init__(self, config: Config, endpoint: str, credential: Credential) -> None:
        from llmkube_stager.sources.wire.connection import ConnectionPool

        self._config = config
        self.credential = credential
        self._auth = _AzureAuth("", "", None, Origin.of(endpoint), credential)
        self._ssl: Any = None
        timeouts = config.timeouts
        self._pool: ConnectionPool = ConnectionPool(
            timeouts.connect_s, timeouts.stall_s, self.ssl_context, config.proxy
        )
        self.log: Log | None = None

    def bind_log(self, log: Log) -> None:
        """Its own reports, and each exchange at the debug level."""
        self.log = self._pool.log = log

    def ssl_context(self) -> Any:
        if self._ssl is None:
            from llmkube_stager.sources.wire.tls import make_ssl_context

            self._ssl = make_ssl_context(self._config.ca_dir)
        return self._ssl

    def signed(self, url: str, query: str = "") -> str:
        """`url` with `query` and the credential's SAS, as a request carries it."""
        sas = self.credential.query()
        joined = "&".join(q for q in (query, sas) if q)
        return sendable(f"{url}?{joined}" if joined else url)

    def get_bytes(self, url: str, query: str, where: str) -> bytes:
        """A whole small answer (a listing page)."""
        from llmkube_stager.sources.wire.exchange import open_get

        def once() -> bytes:
            headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
            body = open_get(self._pool, self.signed(url, query), headers, self._auth, 0)
            try:
                return _read_all(body)
            finally:
                body.close()

        return self._renewing(once, where)

    def head(self, url: str, where: str, *, metadata: bool = False) -> dict[str, str]:
        """A blob's properties. `metadata`: only its stored Content-Encoding
        is read, no body will follow from this answer, so an encoded one is
        not refused here (the GET's proof is judged on the GET)."""
        from llmkube_stager.sources.wire.coding import NO_PROOF, CodingProof
        from llmkube_stager.sources.wire.exchange import head
        from llmkube_stager.sources.wire.status import status_error

        proof = CodingProof(pinned=True) if metadata else NO_PROOF

        def once() -> dict[str, str]:
            headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
            _, status, answer = head(self._pool, self.signed(url), headers, self._auth, proof)
            if not 200 <= status < 300:
                raise status_error(status, answer.get, where)
            return answer

        return self._renewing(once, where)

    def get(
        self,
        url: str,
        headers: dict[str, str],
        offset: int,
        end: int | None,
        proof: CodingProof,
        where: str,
    ) -> Body:
        from llmkube_stager.sources.wire.exchange import open_get

        def once() -> Body:
            signed = self.signed(url)
            return open_get(self._pool, signed, headers, self._auth, offset, end, url, proof)

        return self._renewing(once, where)

    def _renewing(self, once: Callable[[], _T], where: str) -> _T:
        credential = self.credential
        try:
            try:
                return once()
            except SourceError as err:
                if status_of(err) not in (401, 403) or not credential.renewable:
                    raise
            if self.log is not None:
                self.log.info(
                    "azure_renew",
                    f"Azure Storage refused the request for {where} (HTTP 401/403); asking it "
                    "again with a fresh token or SAS",
                )
            credential.renew()
            return once()
        except SourceError as err:
            raise azure_error(err, where, credential.name) from err.__cause__

    def close(self) -> None:
        self._pool.close()
        close = getattr(self.credential, "close", None)
        if close is not None:
            close()


def _read_all(body: Body) -> bytes:
    chunks = bytearray()
    buffer = bytearray(1 << 16)
    view = memoryview(buffer)
    while True:
        n = body.readinto(view)
        if n <= 0:
            return bytes(chunks)
        chunks += view[:n]
        if len(chunks) > MAX_PAGE_BYTES:
            from llmkube_stager.errors import Reason

            raise SourceError(
                "an Azure listing page was larger than any listing page is",
                reason=Reason.SOURCE_REJECTED,
                answered=True,
            )
