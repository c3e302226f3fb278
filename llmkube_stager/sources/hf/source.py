"""Hugging Face sources: the hub API through `huggingface_hub` (api.py),
the bytes through the agent's own resumable transfer.

Once per run, and only when something must be fetched or revalidated (a warm
IfNotPresent start makes no API call), `model_info(files_metadata=True)`
resolves the revision to a commit and lists every file's size and, for LFS
files, its sha256. Every file of the manifest is then fetched from
`/resolve/<commit>/<path>`, so one manifest never mixes two revisions
(spec §8.5), and LFS bytes are verified without the user pinning anything.
The hub redirects `resolve` to a CDN host; the token is sent to the hub
origin only (AuthPolicy), never to the CDN.

The API's answer, success or failure, is the run's answer: a failing hub
costs one request's retries, not one per file (#12 item 4). A mirror under
HF_ENDPOINT that has no API at all (a static mirror, a caching proxy of
`/resolve/` only) is fetched the scripts' way, plain `/resolve/<rev>/` GETs,
without commit pinning or LFS digests, and the log says so (#14 item 3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from llmkube_stager.config import Config
from llmkube_stager.errors import ConfigError, Reason, SourceError, SourceKind
from llmkube_stager.layout import listed_dest
from llmkube_stager.listing import ListedFile, Listing
from llmkube_stager.logs import Log, display_url
from llmkube_stager.model import Manifest, RemoteFile
from llmkube_stager.sources.base import Body, RemoteMeta, build_manifest
from llmkube_stager.sources.hf.ref import HF_DEFAULT_ENDPOINT, HfRef, parse_hf_source

if TYPE_CHECKING:
    from llmkube_stager.sources.hf.api import Resolution
    from llmkube_stager.sources.wire.fetcher import HttpFetcher


def _rel_in_repo(ref: HfRef, rel: str, multi: bool) -> str:
    if not multi:
        return ref.path
    return f"{ref.path.strip('/')}/{rel}" if ref.path.strip("/") else rel


class HfSource:
    kind: SourceKind = "hf"
    # The API call resolves where the bytes are: no GET without it.
    get_without_probe = False

    def __init__(self, config: Config, log: Log | None = None) -> None:
        self._config = config
        self._log = log
        self.ref = parse_hf_source(config.source, config.hf_endpoint)
        # A repo without MODEL_FILES (#24 item 2): every file at one commit.
        self.lists = config.listed
        self.listing: Listing | None = None
        self._listing_fetcher: HfFetcher | None = None
        if not config.multi_file and not self.ref.path:
            raise ConfigError(
                "MODEL_SOURCE names a Hugging Face repo but no file; set MODEL_FILES for a "
                "multi-file model or name the file (hf://org/repo@rev/file.gguf)"
            )

    @property
    def revision(self) -> str | None:
        return self.ref.revision

    def preflight(self) -> None:
        """Nothing to read before the cache is touched."""

    @property
    def listing_source(self) -> str:
        return self.ref.display

    def list_files(self, retry: Callable[[Callable[[], Any]], Any]) -> Listing:
        """The repo's files at the commit the revision names now (one
        model-info call, the one the transfers use too)."""
        fetcher = self._listing_fetcher = HfFetcher(self._config, self.ref, self._log)
        resolution = retry(fetcher.listed_resolution)
        folder = self.ref.path.strip("/")
        hub = resolution.files
        if folder in hub:
            raise ConfigError(
                f"MODEL_SOURCE names the file {folder[:100]!r} of {self.ref.repo}: set MODEL_PATH "
                "for a single-file model (a listed source is a repo or a folder)"
            )
        start = f"{folder}/" if folder else ""
        paths = {p[len(start) :]: f for p, f in sorted(hub.items()) if p.startswith(start)}
        if not paths:
            raise SourceError(
                f"{self.ref.repo} has no file under {folder or '/'} at {resolution.commit[:12]}",
                reason=Reason.SOURCE_NOT_FOUND,
                answered=True,
            )
        files = tuple(
            ListedFile(rel, f.size_bytes or 0, f.sha256 or f.blob_id or "")
            for rel, f in paths.items()
        )
        # Checked (check_listed) once STORAGE_*_PATTERNS have filtered them
        # (staging/listed.py, #31 item 4).
        return Listing(self.listing_source, resolution.commit, files)

    def use_listing(self, listing: Listing) -> None:
        """Files come from the listing's commit (an interrupted run's own)."""
        self.listing = listing

    def manifest(self) -> Manifest:
        config, ref = self._config, self.ref
        if self.listing is not None:
            return self._listed_manifest(self.listing)
        return build_manifest(
            config,
            "hf",
            ref.display,
            lambda rel: ref.resolve_url(ref.revision, _rel_in_repo(ref, rel, config.multi_file)),
        )

    def _listed_manifest(self, listing: Listing) -> Manifest:
        ref, root = self.ref, self._config.cache_dir
        files = tuple(
            RemoteFile(
                rel=f.rel,
                url=ref.resolve_url(listing.base, _rel_in_repo(ref, f.rel, True)),
                dest=listed_dest(root, f.rel, self._config.kserve_mode),
                size_bytes=f.size_bytes or None,
            )
            for f in listing.files
        )
        return Manifest("hf", root, files, True, ref.display)

    def fetcher(self) -> HfFetcher:
        fetcher, self._listing_fetcher = self._listing_fetcher, None
        if fetcher is None:
            fetcher = HfFetcher(self._config, self.ref, self._log)
        if self.listing is not None:
            fetcher.resolve_at(self.listing.base)
        return fetcher


class RunMemo:
    """The run's one answer to a question asked of the origin (#12 item 4).

    A transient failure may be asked again, within one request's budget
    (1 + LLMKUBE_RETRIES attempts in all, the engine's RetryBudget does the
    waiting); after that, or after any other failure, every later question
    gets the same failure at once, as a fresh, non-transient error that does
    not call the origin. Today's figure (bench/hf_storm.py): an 8-file
    OnChange start against an API answering 503 went from 96 API calls and
    191 s to 6 calls and 14 s."""

    def __init__(self, attempts: int, ask: Callable[[], Resolution]) -> None:
        self._attempts = max(1, attempts)
        self._ask = ask
        self._failures = 0
        self._answer: Resolution | None = None
        self._final: SourceError | None = None

    def get(self) -> Resolution:
        if self._answer is not None:
            return self._answer
        if self._final is not None:
            raise _again(self._final)
        try:
            self._answer = self._ask()
        except SourceError as err:
            self._failures += 1
            if not err.transient or self._failures >= self._attempts:
                self._final = _again(err)
            raise
        return self._answer


def _again(err: SourceError) -> SourceError:
    """A copy that is not retried and that later edits (the executor adds the
    file and a prefix) do not touch."""
    # A gated repo's remedy stays the gated one (#22 item 7), and the status
    # as a fact the operator's matcher reads (#30 item 3); the file is the
    # one each replay names.
    return type(err)(
        err.detail,
        reason=err.reason,
        answered=err.answered,
        retry_after_s=err.retry_after_s,
        remedy=err._remedy,
        wire=err.wire,
    )


class HfFetcher:
    parallel_ranges = True

    def __init__(self, config: Config, ref: HfRef, log: Log | None = None) -> None:
        from llmkube_stager.sources.wire.fetcher import HttpFetcher

        self._config = config
        self._ref = ref
        self._log = log
        self._http: HttpFetcher = HttpFetcher(config)
        self._memo = RunMemo(1 + config.timeouts.retries, self._ask_hub)
        self._asked = False
        self._plain = False  # a mirror without the API: the scripts' GETs
        self._resolution: Resolution | None = None
        self.revision = ref.revision
        self._at: str | None = None

    def resolve_at(self, commit: str) -> None:
        """Fetch from this commit rather than what the revision points to
        now: an interrupted run is finished from its own commit (#10)."""
        self._at = commit

    def listed_resolution(self) -> Resolution:
        """The commit and every file of the repo (a listed source, #24 item 2)."""
        resolution = self._resolve()
        if resolution is None:
            raise ConfigError(
                f"the Hugging Face mirror {display_url(self._ref.endpoint)} has no hub API to "
                "list the repo's files: set MODEL_FILES"
            )
        return resolution

    def resolved_commit(self) -> str | None:
        return self._resolution.commit if self._resolution is not None else None

    def _ask_hub(self) -> Resolution:
        from llmkube_stager.sources.hf.api import resolve_revision

        self._asked = True
        ref = self._ref if self._at is None else replace(self._ref, revision=self._at)
        return resolve_revision(self._config, ref, self._http.ssl_context)

    def _resolve(self) -> Resolution | None:
        """The commit and listing, or None on a mirror that has no API."""
        from llmkube_stager.sources.hf.api import HubApiAbsent

        if self._plain:
            return None
        try:
            resolution = self._memo.get()
        except HubApiAbsent as err:
            if not _is_mirror(self._ref.endpoint):
                raise
            self._plain = True
            self._warn_plain(err)
            return None
        if self._resolution is None and self._log is not None:
            # What a person compares with the hub's page (#46 item 6);
            # `inspect` shows it from the run record.
            self._log.info(
                "hf_resolved",
                f"{self._ref.repo} at {self._ref.revision} is commit {resolution.commit}",
                commit=resolution.commit,
            )
        self._resolution = resolution
        return resolution

    def _warn_plain(self, err: SourceError) -> None:
        if self._log is None:
            return
        self._log.warning(
            "hf_mirror_without_api",
            f"the Hugging Face mirror {display_url(self._ref.endpoint)} has no hub API "
            f"({err.detail}); fetching {self._ref.repo}/resolve/{self._ref.revision}/ files "
            "directly, as the scripts did: commit pinning and LFS sha256 checks are not "
            "available for this run",
            endpoint=display_url(self._ref.endpoint),
        )

    def probe(self, file: RemoteFile) -> RemoteMeta:
        resolution = self._resolve()
        if resolution is None:
            # file.url is /resolve/<revision>/<path> on the mirror (manifest).
            return self._http.probe(file)
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

    def bind_log(self, log: Log) -> None:
        """The hub client logs through the run's Log already (RunMemo);
        the file downloads' exchanges at the debug level."""
        self._http.bind_log(log)

    def close(self) -> None:
        self._http.close()
        if self._asked:
            from llmkube_stager.sources.hf.api import close_hub_session

            close_hub_session()


def _is_mirror(endpoint: str) -> bool:
    return endpoint.lower() not in (HF_DEFAULT_ENDPOINT, "https://www.huggingface.co")
