"""http(s):// sources: one file (MODEL_PATH), or a base URL + MODEL_FILES.

Also serves `https://huggingface.co/<org>/<repo>/resolve/<rev>/` base URLs as
plain HTTP with the HF bearer-token rule (spec §3.2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

from llmkube_stager.config import Config
from llmkube_stager.errors import SourceKind
from llmkube_stager.logs import display_url
from llmkube_stager.model import Manifest
from llmkube_stager.sources.base import build_manifest
from llmkube_stager.sources.wire.status import Origin, check_http_url, is_hf_auth_origin

if TYPE_CHECKING:
    from llmkube_stager.sources.wire.fetcher import HttpFetcher


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
        from llmkube_stager.sources.wire.fetcher import HttpFetcher

        return HttpFetcher(self._config)
