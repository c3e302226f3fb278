"""http(s):// sources: one file (MODEL_PATH), or a base URL + MODEL_FILES.

Also serves `https://huggingface.co/<org>/<repo>/resolve/<rev>/` base URLs as
plain HTTP with the HF bearer-token rule (spec §3.2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from llmkube_stager.config import Config
from llmkube_stager.errors import ConfigError, SourceKind
from llmkube_stager.logs import Log, display_url
from llmkube_stager.model import Manifest, RemoteFile
from llmkube_stager.sources.base import Body, RemoteMeta, build_manifest
from llmkube_stager.sources.http_status import (
    USER_AGENT,
    AuthPolicy,
    Origin,
    is_hf_auth_origin,
    split_userinfo,
)

if TYPE_CHECKING:
    import ssl

    import httpx

    from llmkube_stager.sources.http_wire import ConnectionPool


def check_http_url(url: str, name: str = "MODEL_SOURCE") -> None:
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name} must be an http(s) URL with a host, got {display_url(url)!r}")
    try:
        _ = parts.port
    except ValueError:
        raise ConfigError(f"{name} has an invalid port: {display_url(url)!r}") from None


def file_url(base: str, rel: str) -> str:
    """`${SOURCE%/}/$rel` with each path part percent-encoded (the shell sent
    raw spaces, an invalid request line)."""
    return base.rstrip("/") + "/" + quote(rel, safe="/")


def http_manifest(config: Config, kind: SourceKind) -> Manifest:
    check_http_url(config.source)
    return build_manifest(
        config,
        kind,
        display_url(config.source),
        lambda rel: file_url(config.source, rel) if config.multi_file else config.source,
    )


class HttpFetcher:
    """HEAD through httpx (control path), GET through http.client (data path)."""

    parallel_ranges = True

    def __init__(self, config: Config) -> None:
        # Imported here: a warm start builds the manifest but never a fetcher.
        from llmkube_stager.sources.http_wire import ConnectionPool

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
            from llmkube_stager.sources.tls import make_ssl_context

            self._ssl = make_ssl_context(self._config.ca_dir)
        return self._ssl

    def probe(self, file: RemoteFile) -> RemoteMeta:
        """A HEAD on the data path's keep-alive connections (http.client:
        a fifth of httpx's CPU per request, which a model of 2,000 files
        pays 2,000 times, #16)."""
        from llmkube_stager.sources.http_probe import meta_from
        from llmkube_stager.sources.http_wire import head

        url, _ = split_userinfo(file.url)  # the credentials go in AuthPolicy's header
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        final, status, answer = head(self._pool, url, headers, self._auth)
        return meta_from(status, answer, final)

    def open(self, file: RemoteFile, meta: RemoteMeta, offset: int, end: int | None = None) -> Body:
        from llmkube_stager.sources.http_wire import open_get

        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if offset > 0 or end is not None:
            headers["Range"] = f"bytes={offset}-{'' if end is None else end}"
            if meta.if_range:
                # The origin answers 200 (whole new body) instead of splicing
                # when the object changed since the partial was written (#80).
                headers["If-Range"] = meta.if_range
        if meta.if_match:
            headers["If-Match"] = meta.if_match
        # The probe already followed redirects; when the request goes there
        # directly, auth is judged against where this request starts.
        auth = self._auth_from(file.url, meta.url)
        url, _ = split_userinfo(meta.url)  # a GET without a probe starts at file.url
        asked, _ = split_userinfo(file.url)
        return open_get(self._pool, url, headers, auth, offset, end, asked_url=asked)

    def _auth_from(self, first_url: str, url: str) -> AuthPolicy:
        if Origin.of(first_url) != Origin.of(url):
            return AuthPolicy("", self._auth.hf_endpoint)
        return self._auth

    def bind_log(self, log: Log) -> None:
        """Nothing of its own to report."""

    def close(self) -> None:
        self._pool.close()
        if self._client is not None:
            self._client.close()


class HttpSource:
    # A plain URL can be fetched even when its HEAD failed (spec §8.1).
    get_without_probe = True
    revision: str | None = None

    def __init__(self, config: Config) -> None:
        check_http_url(config.source)
        self._config = config
        hf = is_hf_auth_origin(Origin.of(config.source), config.hf_endpoint)
        self.kind: SourceKind = "hf" if hf else "http"

    def preflight(self) -> None:
        """Nothing to read before the cache is touched."""

    def manifest(self) -> Manifest:
        return http_manifest(self._config, self.kind)

    def fetcher(self) -> HttpFetcher:
        return HttpFetcher(self._config)
