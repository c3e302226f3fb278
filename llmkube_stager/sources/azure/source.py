"""Azure Blob sources (#33 item 2): the listing and the bytes both travel
the agent's own wire (client.py), the bytes through its engine: ranged,
resumed and parallel, each GET pinned to the blob's ETag with `If-Match`,
so that a blob replaced mid-transfer answers 412 (ModelSourceChanged)
instead of being spliced, and one listing serves the whole run.

Nothing here imports azure-identity until a token credential is chosen,
and the credential is chosen only when the origin is asked (preflight,
list_files, fetcher), never on an IfNotPresent warm start, which builds
its manifest from the recorded listing with zero requests.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from llmkube_stager.config import Config
from llmkube_stager.errors import SourceKind
from llmkube_stager.listing import Listing
from llmkube_stager.model import RemoteFile
from llmkube_stager.sources.azure.ref import AzureRef, parse_azure_ref, parse_connection_string
from llmkube_stager.sources.base import Body, RemoteMeta, StreamedDigest
from llmkube_stager.sources.prefix import BucketSource, listed_key

if TYPE_CHECKING:
    from llmkube_stager.logs import Log
    from llmkube_stager.sources.azure.client import AzureClient
    from llmkube_stager.sources.azure.credentials import IdentitySettings


class AzureSource(BucketSource):
    kind: SourceKind = "azure"

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        connection = config.azure_env.get("AZURE_STORAGE_CONNECTION_STRING", "")
        self._connection = parse_connection_string(connection)
        self.ref = parse_azure_ref(config.source, self._connection)
        self._client: AzureClient | None = None
        # Where the listed names start (the URI's path; a listing moves it).
        self._base = self.ref.path

    # -- listing -------------------------------------------------------------------------

    @property
    def listing_source(self) -> str:
        return self.ref.display()

    def list_files(self, retry: Callable[[Callable[[], Any]], Any]) -> Listing:
        from llmkube_stager.sources.azure.listing import list_blobs, page_query

        client = self._open_client()
        ref = self.ref
        where = ref.display()

        def page(prefix: str, marker: str) -> bytes:
            query = page_query(prefix, marker)
            return bytes(retry(lambda: client.get_bytes(ref.container_url(), query, where)))

        return list_blobs(self.listing_source, where, ref.path, page)

    def use_listing(self, listing: Listing) -> None:
        self.listing = listing
        self._base = listing.base

    def preflight(self) -> None:
        self._open_client()

    def _open_client(self) -> AzureClient:
        from llmkube_stager.sources.azure.client import AzureClient
        from llmkube_stager.sources.azure.credentials import choose

        if self._client is None:
            credential = choose(
                self.ref, self._config.azure_env, self._connection, self._identity_settings
            )
            self._client = AzureClient(self._config, self.ref.endpoint, credential)
        return self._client

    def _identity_settings(self) -> IdentitySettings:
        from llmkube_stager.sources.azure.credentials import IdentitySettings
        from llmkube_stager.sources.wire.tls import write_ca_bundle

        proxies = self._config.proxy

        def proxy_for(url: str) -> str | None:
            proxy = proxies.for_full_url(url)
            return proxy.url() if proxy is not None else None

        timeouts = self._config.timeouts
        bundle = write_ca_bundle(self._config.ca_dir)
        return IdentitySettings(bundle, proxy_for, timeouts.connect_s, timeouts.stall_s)

    # -- the manifest and the bytes ------------------------------------------------------

    def _display(self) -> str:
        return self.ref.display()

    def _url_of(self, name: str, multi_file: bool) -> str:
        if self.listing is None:
            return self.ref.display(self._blob_of(name, None))
        base = self.listing.base.strip("/")
        return self.ref.display(posixpath.join(base, name) if base else name)

    def _blob_of(self, rel: str, key: str | None) -> str:
        if self.listing is not None or self._config.multi_file:
            base = self._base.strip("/")
            name = key or rel
            return f"{base}/{name}" if base else name
        return self.ref.path

    def fetcher(self) -> AzureFetcher:
        client, self._client = self._open_client(), None  # the fetcher closes it
        fetcher = AzureFetcher(client, self.ref, self._blob_of, self.listing)
        fetcher.kserve_mode = self._config.kserve_mode
        return fetcher


class AzureFetcher:
    parallel_ranges = True

    def __init__(
        self,
        client: AzureClient,
        ref: AzureRef,
        blob_of: Callable[[str, str | None], str],
        listing: Listing | None,
    ) -> None:
        self._client = client
        self._ref = ref
        self._blob_of = blob_of
        self._listed = listing.by_rel if listing is not None else {}
        # Stored Content-Encodings of listed blobs, asked once (#29 item 11).
        self._stored: dict[str, str] = {}
        # KServe mode refuses a blob stored compressed (#41 item 6).
        self.kserve_mode = False

    def bind_log(self, log: Log) -> None:
        from llmkube_stager.sources.azure.credentials import Anonymous

        self._client.bind_log(log)
        if isinstance(self._client.credential, Anonymous):
            log.info(
                "azure_anonymous",
                "no Azure credentials were given (AZURE_STORAGE_ACCESS_KEY, a SAS, "
                "AZURE_CLIENT_ID, AZURE_STORAGE_CONNECTION_STRING): asking anonymously "
                "(a public container); no managed identity is asked for without AZURE_CLIENT_ID "
                "or LLMKUBE_AZURE_MANAGED_IDENTITY=true; Azure Arc, Service Fabric "
                "and Cloud Shell identities and AZURE_USERNAME/AZURE_PASSWORD are not supported",
            )

    def _url(self, file: RemoteFile) -> str:
        return self._ref.blob_url(self._blob_of(listed_key(self._listed, file.rel), None))

    def probe(self, file: RemoteFile) -> RemoteMeta:
        from llmkube_stager.sources.azure.listing import content_md5, split_validator

        listed = self._listed.get(file.rel)
        if listed is not None:
            # The listing said it: no HEAD per blob; If-Match pins the bytes,
            # its Content-MD5 is checked before they are published.
            pin, md5 = split_validator(listed.validator)
            etag = pin or None
            return RemoteMeta(
                file.url,
                listed.size_bytes,
                etag,
                True,
                if_match=etag,
                md5_b64=md5,
                streamed_digest=StreamedDigest(),
            )
        from llmkube_stager.sources.wire.status import parse_length

        # The blob's properties, its stored coding among them: judged on the GET.
        answer = self._client.head(self._url(file), file.url, metadata=True)
        etag = answer.get("etag")
        self._refuse_in_kserve_mode(file, answer.get("content-encoding"))
        return RemoteMeta(
            url=file.url,
            size_bytes=parse_length(answer.get("content-length")),
            etag=etag,
            accept_ranges=True,
            if_match=etag,
            stored_encoding=(answer.get("content-encoding") or "").strip() or None,
            md5_b64=content_md5(answer.get("content-md5")),
            streamed_digest=StreamedDigest(),
        )

    def open(self, file: RemoteFile, meta: RemoteMeta, offset: int, end: int | None = None) -> Body:
        from llmkube_stager.sources.wire.coding import EncodedAnswer

        if meta.stored_encoding is None and file.rel in self._stored:
            meta = replace(meta, stored_encoding=self._stored[file.rel])
        try:
            return self._get(file, meta, offset, end)
        except EncodedAnswer:
            if file.rel not in self._listed or meta.stored_encoding is not None:
                raise
            answer = self._client.head(self._url(file), file.url, metadata=True)
            stored = (answer.get("content-encoding") or "").strip()
            if not stored:
                raise
            # A listed blob answered with the coding it is stored with:
            # its metadata, not a hop's (as S3's, #29 item 11); List Blobs
            # says it, but the recorded listing does not keep it.
            self._refuse_in_kserve_mode(file, stored)
            self._stored[file.rel] = stored
            return self._get(file, replace(meta, stored_encoding=stored), offset, end)

    def _refuse_in_kserve_mode(self, file: RemoteFile, stored: str | None) -> None:
        """azure-storage-blob, KServe's client, leaves a gzip-encoded blob
        decompressed; the agent does not decompress (#41 item 6)."""
        from llmkube_stager.sources.wire.coding import stored_coding_refused, stored_transform

        if self.kserve_mode and stored and stored_transform(stored.strip()):
            raise stored_coding_refused(file.url, stored.strip())

    def _get(self, file: RemoteFile, meta: RemoteMeta, offset: int, end: int | None) -> Body:
        from llmkube_stager.sources.wire.coding import CodingProof
        from llmkube_stager.sources.wire.status import USER_AGENT

        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if offset > 0 or end is not None:
            headers["Range"] = f"bytes={offset}-{'' if end is None else end}"
        if meta.if_match:
            headers["If-Match"] = meta.if_match
        from llmkube_stager.sources.wire.digest import digest_while_received

        proof = CodingProof(file.sha256 is not None, meta.stored_encoding, meta.size_bytes)
        body = self._client.get(self._url(file), headers, offset, end, proof, file.url)
        return digest_while_received(body, meta, offset, end)

    def close(self) -> None:
        self._client.close()
