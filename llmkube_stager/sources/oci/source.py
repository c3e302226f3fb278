"""oci:// sources (#43): a model artifact's layers staged as its files.

The artifact is a listed source (staging/listed.py): the manifest the
reference names now (an index resolved to LLMKUBE_OCI_PLATFORM) becomes a
listing whose base is the manifest's digest and whose files are its
layers, each with its size and its digest. The listing is recorded before
the first publish, so an IfNotPresent warm start makes no request, an
interrupted run finishes the manifest it started (a tag moved since does
not mix two artifacts: every blob is asked by digest), and OnChange asks
the manifest again and fetches only the layers whose digest changed.

Each layer is fetched by the engine like any file (ranged, parallel,
resumable into its partial), its sha256 being the layer's digest: the
file's pin, checked while it is received and before it is published.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llmkube_stager.config import Config
from llmkube_stager.errors import ConfigError, Reason, SourceError, SourceKind
from llmkube_stager.layout import listed_dest
from llmkube_stager.listing import ListedFile, Listing
from llmkube_stager.logs import Log
from llmkube_stager.model import Manifest, RemoteFile
from llmkube_stager.sources.base import Body, RemoteMeta
from llmkube_stager.sources.oci.manifest import check_platform_setting
from llmkube_stager.sources.oci.ref import OciRef, parse_oci_source

if TYPE_CHECKING:
    from llmkube_stager.sources.oci.registry import RegistryClient
    from llmkube_stager.sources.wire.connection import ConnectionPool


class OciSource:
    kind: SourceKind = "oci"
    # The manifest says where each layer is and what it is.
    get_without_probe = False
    revision: str | None = None

    def __init__(self, config: Config, log: Log | None = None) -> None:
        self._config = config
        self.ref: OciRef = parse_oci_source(config.source)
        check_platform_setting(config.oci_platform)
        if not config.listed:
            raise ConfigError(
                "MODEL_SOURCE is an oci:// artifact, whose layers name its files: unset "
                "MODEL_FILES and MODEL_PATH (the model is staged under CACHE_DIR)"
            )
        self.lists = True
        self.listing: Listing | None = None
        self._client: RegistryClient | None = None
        self._pool: ConnectionPool | None = None

    @property
    def listing_source(self) -> str:
        return self.ref.display

    def preflight(self) -> None:
        """The docker config is read (and refused when unreadable) before
        the cache is touched."""
        from llmkube_stager.sources.oci.auth import load_credentials

        load_credentials(self._config.oci_docker_config, self.ref)

    def _registry(self) -> RegistryClient:
        if self._client is None:
            from llmkube_stager.sources.oci.auth import load_credentials
            from llmkube_stager.sources.oci.registry import RegistryClient
            from llmkube_stager.sources.wire.connection import ConnectionPool
            from llmkube_stager.sources.wire.tls import make_ssl_context

            config = self._config
            timeouts = config.timeouts
            self._pool = ConnectionPool(
                timeouts.connect_s,
                timeouts.stall_s,
                lambda: make_ssl_context(config.ca_dir),
                config.proxy,
            )
            creds = load_credentials(config.oci_docker_config, self.ref)
            self._client = RegistryClient(self.ref, self._pool, creds)
        return self._client

    def list_files(self, retry: Callable[[Callable[[], Any]], Any]) -> Listing:
        from llmkube_stager.sources.oci.manifest import check_archives, layer_files

        client = self._registry()
        digest, parsed = retry(lambda: _resolve(client, self._config.oci_platform))
        where = f"{self.ref.display} ({digest[:19]})"
        check_archives(parsed, where, digest)
        files = tuple(
            ListedFile(rel, layer.size_bytes, layer.digest)
            for rel, layer in layer_files(parsed, where)
        )
        return Listing(self.listing_source, digest, files)

    def listing_digest(self, retry: Callable[[Callable[[], Any]], Any]) -> str | None:
        """The digest the reference names now, by one HEAD (OnChange). For
        an index it is the index's, never a recorded platform manifest's:
        such a reference is asked again in full."""
        ref = self.ref
        if ref.digest is not None:
            return ref.digest
        client = self._registry()
        named: str | None = retry(lambda: client.head_digest(ref.reference))
        return named

    def use_listing(self, listing: Listing) -> None:
        self.listing = listing

    def manifest(self) -> Manifest:
        listing, root = self.listing, self._config.cache_dir
        if listing is None:  # the registry keeps no listing: staging/listed.py always gives one
            raise SourceError("no listing of the artifact", reason=Reason.INTERNAL)
        files = tuple(
            RemoteFile(
                rel=f.rel,
                url=self.ref.blob_url(f.validator),
                dest=listed_dest(root, f.rel, self._config.kserve_mode),
                sha256=f.validator.partition(":")[2] or None,
                size_bytes=f.size_bytes,
            )
            for f in listing.files
        )
        return Manifest("oci", root, files, True, self.ref.display)

    def fetcher(self) -> OciFetcher:
        return OciFetcher(self._registry(), self._pool_of())

    def _pool_of(self) -> ConnectionPool:
        self._registry()
        assert self._pool is not None
        return self._pool


def _resolve(client: RegistryClient, platform: str) -> tuple[str, Any]:
    """The digest and parsed image manifest the reference names now."""
    from llmkube_stager.sources.oci.manifest import choose_platform, parse_manifest

    ref = client.ref
    raw, media, digest = client.manifest(ref.reference, ref.digest)
    parsed = parse_manifest(raw, media, ref.display)
    if parsed.is_index:
        entry = choose_platform(parsed, platform, ref.display)
        raw, media, digest = client.manifest(entry.digest, entry.digest)
        parsed = parse_manifest(raw, media, f"{ref.display} ({entry.digest[:19]})")
        if parsed.is_index:
            raise SourceError(
                f"{ref.display} is an index of indexes: the agent resolves one level",
                reason=Reason.SOURCE_REJECTED,
                answered=True,
            )
    return digest, parsed


class OciFetcher:
    parallel_ranges = True

    def __init__(self, client: RegistryClient, pool: ConnectionPool) -> None:
        self._client = client
        self._pool = pool

    def probe(self, file: RemoteFile) -> RemoteMeta:
        """No request: the manifest said the size and the digest, and a
        blob's bytes never change (it is asked by its digest)."""
        digest = file.url.rsplit("/", 1)[1]
        return RemoteMeta(
            url=file.url,
            size_bytes=file.size_bytes,
            etag=f'"{digest}"',
            accept_ranges=True,
            sha256=digest.partition(":")[2],
            immutable=True,
        )

    def open(self, file: RemoteFile, meta: RemoteMeta, offset: int, end: int | None = None) -> Body:
        try:
            return self._open(file, meta, offset, end)
        except SourceError as err:
            status = err.wire.http_status if err.wire is not None else None
            # 401: a token that expired during a long pull (Docker Hub's
            # last 300 s), or none asked for yet (a run resumed from its
            # record): asked for again once, and the transfer goes on.
            # 403: where a blob is redirected to storage, a signed URL that
            # expired; every open starts at the registry, which signs a new
            # one. Once each: a refusal that stays is the registry's answer.
            if status == 401 and self._client.reauthorize():
                pass
            elif status != 403:
                raise
        return self._open(file, meta, offset, end)

    def _open(self, file: RemoteFile, meta: RemoteMeta, offset: int, end: int | None) -> Body:
        from llmkube_stager.sources.wire.coding import CodingProof
        from llmkube_stager.sources.wire.exchange import open_get
        from llmkube_stager.sources.wire.status import USER_AGENT

        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if offset > 0 or end is not None:
            headers["Range"] = f"bytes={offset}-{'' if end is None else end}"
        proof = CodingProof(True, None, meta.size_bytes)
        return open_get(
            self._pool, file.url, headers, self._client.auth, offset, end, file.url, proof
        )

    def bind_log(self, log: Log) -> None:
        """Nothing of its own to report."""

    def close(self) -> None:
        self._pool.close()
