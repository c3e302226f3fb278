"""Hugging Face sources: the hub API through `huggingface_hub`, the bytes
through the agent's own resumable transfer.

Once per run, and only when something must be fetched or revalidated (a warm
IfNotPresent start makes no API call), `model_info(files_metadata=True)`
resolves the revision to a commit and lists every file's size and, for LFS
files, its sha256. Every file of the manifest is then fetched from
`/resolve/<commit>/<path>`, so one manifest never mixes two revisions
(spec §8.5), and LFS bytes are verified without the user pinning anything.
The hub redirects `resolve` to a CDN host; the token is sent to the hub
origin only (AuthPolicy), never to the CDN.

huggingface_hub errors are translated here, by type and HTTP status.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from llmkube_stager.config import Config
from llmkube_stager.errors import ConfigError, Reason, SourceError, SourceKind
from llmkube_stager.logs import display_url
from llmkube_stager.model import Manifest, RemoteFile
from llmkube_stager.sources.base import Body, RemoteMeta, build_manifest
from llmkube_stager.sources.hfref import HfRef, parse_hf_source
from llmkube_stager.sources.http_status import rate_limit_wait_s, status_error

if TYPE_CHECKING:
    import ssl

    from llmkube_stager.sources.http import HttpFetcher


@dataclass(frozen=True)
class HubFile:
    size_bytes: int | None
    sha256: str | None  # LFS files only
    blob_id: str | None


@dataclass(frozen=True)
class Resolution:
    commit: str
    files: dict[str, HubFile]


def _rel_in_repo(ref: HfRef, rel: str, multi: bool) -> str:
    if not multi:
        return ref.path
    return f"{ref.path.strip('/')}/{rel}" if ref.path.strip("/") else rel


class HfSource:
    kind: SourceKind = "hf"
    # The API call resolves where the bytes are: no GET without it.
    get_without_probe = False

    def __init__(self, config: Config) -> None:
        self._config = config
        self.ref = parse_hf_source(config.source, config.hf_endpoint)
        if not config.multi_file and not self.ref.path:
            raise ConfigError(
                "MODEL_SOURCE names a Hugging Face repo but no file; set MODEL_FILES for a "
                "multi-file model or name the file (hf://org/repo@rev/file.gguf)"
            )

    def manifest(self) -> Manifest:
        config, ref = self._config, self.ref
        return build_manifest(
            config,
            "hf",
            display_url(config.source),
            lambda rel: ref.resolve_url(ref.revision, _rel_in_repo(ref, rel, config.multi_file)),
        )

    def fetcher(self) -> HfFetcher:
        return HfFetcher(self._config, self.ref)


class HfFetcher:
    parallel_ranges = True

    def __init__(self, config: Config, ref: HfRef) -> None:
        from llmkube_stager.sources.http import HttpFetcher

        self._config = config
        self._ref = ref
        self._http: HttpFetcher = HttpFetcher(config)
        self._resolution: Resolution | None = None
        self.revision = ref.revision
        self._at: str | None = None

    def resolve_at(self, commit: str) -> None:
        """Fetch from this commit rather than what the revision points to
        now: an interrupted run is finished from its own commit (#10)."""
        self._at = commit

    def resolved_commit(self) -> str | None:
        return self._resolution.commit if self._resolution is not None else None

    def _resolve(self) -> Resolution:
        if self._resolution is None:
            ref = self._ref if self._at is None else replace(self._ref, revision=self._at)
            self._resolution = resolve_revision(self._config, ref, self._http)
        return self._resolution

    def probe(self, file: RemoteFile) -> RemoteMeta:
        resolution = self._resolve()
        path = _rel_in_repo(self._ref, file.rel, self._config.multi_file)
        hub = resolution.files.get(path)
        if hub is None:
            raise SourceError(
                f"{path} is not in {self._ref.repo} at {resolution.commit[:12]} "
                f"(revision {self._ref.revision})",
                reason=Reason.SOURCE_NOT_FOUND,
                answered=True,
            )
        return RemoteMeta(
            url=self._ref.resolve_url(resolution.commit, path),
            size_bytes=hub.size_bytes or None,
            # Content at a commit is immutable: no If-Range (the CDN's ETag
            # is not the hub's), the sha256 check catches anything else.
            etag=f'"{hub.sha256 or hub.blob_id or resolution.commit}"',
            accept_ranges=True,
            sha256=hub.sha256,
            immutable=True,
        )

    def open(self, file: RemoteFile, meta: RemoteMeta, offset: int, end: int | None = None) -> Body:
        return self._http.open(file, meta, offset, end)

    def close(self) -> None:
        self._http.close()
        if self._resolution is not None:
            from huggingface_hub import close_session

            close_session()


def resolve_revision(config: Config, ref: HfRef, http: HttpFetcher) -> Resolution:
    """model_info(revision, files_metadata=True) through huggingface_hub,
    with our CA bundle and timeouts; its errors become SourceErrors."""
    import huggingface_hub
    from huggingface_hub import constants

    # No telemetry: its agent detection GETs <endpoint>/api/agent-harnesses
    # without our timeouts and writes under $HOME (found by the fake hub).
    constants.HF_HUB_DISABLE_TELEMETRY = True
    context = http.ssl_context() if ref.endpoint.lower().startswith("https") else None
    huggingface_hub.set_client_factory(lambda: _hub_client(config, context))
    api = huggingface_hub.HfApi(endpoint=ref.endpoint, token=config.secrets.hf_token or False)
    try:
        info = api.model_info(ref.repo, revision=ref.revision, files_metadata=True)
    except Exception as exc:
        raise translate_hub_error(exc, ref) from exc
    return Resolution(commit=info.sha or ref.revision, files=_hub_files(info.siblings or []))


def _hub_client(config: Config, context: ssl.SSLContext | None) -> Any:
    """The hub's HTTP client with our trust store and timeouts. huggingface_hub
    2.x speaks httpx2 (same API as httpx), older releases httpx."""
    try:
        hx: Any = importlib.import_module("httpx2")
    except ImportError:
        hx = importlib.import_module("httpx")
    from llmkube_stager.sources.hx_proxy import routing_transport

    timeouts = config.timeouts
    verify = context if context is not None else True
    return hx.Client(
        verify=verify,
        transport=routing_transport(hx, config.proxy, verify),
        timeout=hx.Timeout(timeouts.stall_s, connect=timeouts.connect_s),
        follow_redirects=True,
        trust_env=False,
    )


def _hub_files(siblings: list[Any]) -> dict[str, HubFile]:
    files = {}
    for sibling in siblings:
        lfs = getattr(sibling, "lfs", None)
        sha = getattr(lfs, "sha256", None) if lfs is not None else None
        size = getattr(sibling, "size", None)
        files[sibling.rfilename] = HubFile(
            size_bytes=size if isinstance(size, int) else None,
            sha256=sha.lower() if isinstance(sha, str) else None,
            blob_id=getattr(sibling, "blob_id", None),
        )
    return files


def translate_hub_error(exc: Exception, ref: HfRef) -> SourceError:
    """By type first (huggingface_hub's own classes), then by HTTP status."""
    from huggingface_hub import errors

    where = f"{ref.repo}@{ref.revision} on {display_url(ref.endpoint)}"
    if isinstance(exc, errors.GatedRepoError):
        return SourceError(f"{where} is gated", reason=Reason.SOURCE_UNAUTHORIZED, answered=True)
    if isinstance(exc, errors.RevisionNotFoundError | errors.RepositoryNotFoundError):
        return _status_based(exc, where, default=Reason.SOURCE_NOT_FOUND)
    if isinstance(exc, errors.HfHubHTTPError):
        return _status_based(exc, where, default=Reason.SOURCE_REJECTED)
    return _transport_error(exc, where)


def _status_based(exc: Exception, where: str, default: Reason) -> SourceError:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if not isinstance(status, int):
        return SourceError(f"{where}: {type(exc).__name__}", reason=default, answered=True)
    headers = getattr(response, "headers", {})
    if status == 404 or (status == 401 and default is Reason.SOURCE_NOT_FOUND):
        # The hub answers 401 for a missing repo to anonymous callers.
        return SourceError(
            f"{where} returned HTTP {status}", reason=Reason.SOURCE_NOT_FOUND, answered=True
        )
    error = status_error(status, headers.get, where)
    if status == 429 and error.retry_after_s is None:
        error.retry_after_s = rate_limit_wait_s(headers.get)
    return error


def _transport_error(exc: BaseException, where: str) -> SourceError:
    from llmkube_stager.sources.http_probe import root_cause
    from llmkube_stager.sources.http_wire import translate_network_error

    return translate_network_error(root_cause(exc), where, "hub API request")
