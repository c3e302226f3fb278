"""s3:// sources (AWS S3 and S3-compatible servers such as MinIO).

boto3 does the control path: HEAD for size and ETag, and presigning. The
bytes travel through the agent's own data path as a presigned GET pinned to
the object with `If-Match: <ETag>`, so a changed object answers 412
(ModelSourceChanged) instead of splicing, and ranged resume works like HTTP.
That path moves bytes several times faster than botocore's StreamingBody
(docs/performance.md).

Credentials come from boto3's default chain (s3_session.py); only when it
finds none are requests sent unsigned (public buckets), and the log says so.
A URL is presigned for each request, just before it is sent: presigning is
a local computation, and a long transfer outlives both a presign's lifetime
and the temporary credentials it was signed with (IRSA: one hour). A GET
refused with 403 is presigned again once, at once, outside the retry
budget: an expired signature is not the origin failing (#12.2).

The settings are checked before any I/O (`S3Source`): a bad endpoint,
region or addressing style, half a key pair, or a missing profile is
InvalidConfiguration (#11.12). docs/sources.md tells what is sent where.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from llmkube_stager.config import Config
from llmkube_stager.errors import ConfigError, Reason, SourceError, SourceKind
from llmkube_stager.layout import dest_path
from llmkube_stager.listing import Listing
from llmkube_stager.model import Manifest, RemoteFile
from llmkube_stager.sources.base import Body, RemoteMeta, build_manifest

if TYPE_CHECKING:
    from llmkube_stager.logs import Log
    from llmkube_stager.sources.http import HttpFetcher
    from llmkube_stager.sources.s3_client import S3Clients

# Each URL is presigned just before its request: minutes are plenty, and a
# leaked URL (it is never logged) is useless soon.
PRESIGN_EXPIRY_S = 900
DEFAULT_REGION = "us-east-1"
AddressingStyle = Literal["auto", "virtual", "path"]
_STYLES: tuple[AddressingStyle, ...] = ("auto", "virtual", "path")

# Permissive on purpose (legacy buckets and MinIO allow uppercase and '_').
_BUCKET_RE = re.compile(r"[A-Za-z0-9._-]{1,255}")
# botocore's own rule for a region name (utils.validate_region_name).
_REGION_RE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?")
_PERCENT_ESCAPE_RE = re.compile(r"%[0-9A-Fa-f]{2}")
# A DNS label under a wildcard certificate: no dots (RFC 6125 wildcards).
_VIRTUAL_HOSTABLE_RE = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")
_AWS_DOMAINS = ("amazonaws.com", "amazonaws.com.cn")
# Hosts botocore accepts for an http:// container credentials endpoint.
_CONTAINER_HTTP_HOSTS = frozenset(
    {"127.0.0.1", "localhost", "::1", "169.254.170.2", "169.254.170.23", "fd00:ec2::23"}
)


@dataclass(frozen=True)
class S3Ref:
    bucket: str
    key: str  # single-file key, or the multi-file prefix ("" allowed)


def parse_s3_ref(config: Config) -> S3Ref:
    """S3_BUCKET/S3_KEY/S3_PREFIX win (taken literally); else the source,
    read as `s3://<bucket>/<key>` like the AWS CLI does: '#', '?' and spaces
    are part of the key, never a URL fragment or query (#11.11)."""
    source = config.source
    path = source[5:] if source[:5].lower() == "s3://" else ""
    source_bucket, _, source_key = path.partition("/")
    bucket = config.s3_bucket or source_bucket
    given = config.s3_prefix if config.multi_file else config.s3_key
    if not given and _PERCENT_ESCAPE_RE.search(source_key):
        # The same text names two keys (literal, or decoded): refuse to guess.
        raise ConfigError(
            f"MODEL_SOURCE s3:// key {source_key[:100]!r} holds a percent-escape; S3 keys are "
            "taken literally here, so set the exact key in "
            f"{'S3_PREFIX' if config.multi_file else 'S3_KEY'} instead"
        )
    key = given or source_key
    if not bucket:
        raise ConfigError("MODEL_SOURCE s3:// must name a bucket (or set S3_BUCKET)")
    if "@" in bucket:
        # `s3://user:password@bucket/...`: never echoed (a secret), and S3
        # takes its credentials from the environment, not the URL.
        raise ConfigError(
            "an s3:// URL has no user info: set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY "
            "(or a role) instead of credentials before the bucket name"
        )
    if not _BUCKET_RE.fullmatch(bucket):
        raise ConfigError(f"S3 bucket name {bucket[:70]!r} has characters S3 does not allow")
    if not config.multi_file and not key:
        raise ConfigError("MODEL_SOURCE s3:// must name an object key (or set S3_KEY)")
    return S3Ref(bucket, key.strip("/") if config.multi_file else key)


def object_key(ref: S3Ref, rel: str, multi: bool) -> str:
    """`${S3_PREFIX:+${S3_PREFIX}/}$rel` (spec §3.3)."""
    if not multi:
        return ref.key
    return f"{ref.key}/{rel}" if ref.key else rel


@dataclass(frozen=True)
class S3Settings:
    """The S3 settings, validated without any I/O."""

    endpoint_url: str | None
    region: str | None  # None: the profile's, else us-east-1
    addressing: AddressingStyle | None  # None: the profile's, else by endpoint
    sts_endpoint_url: str | None


def s3_settings(config: Config) -> S3Settings:
    env = config.aws_env
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or config.aws_endpoint_url or None
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_STS"):
        if env.get(name):
            _check_endpoint(name, env[name])
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if env.get(name) and not is_region_name(env[name]):
            raise ConfigError(f"{name} {env[name][:70]!r} is not a region name")
    _check_pairs(env)
    if env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        _check_container_uri(env["AWS_CONTAINER_CREDENTIALS_FULL_URI"])
    return S3Settings(
        endpoint_url=endpoint,
        region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
        addressing=parse_style(env.get("AWS_S3_ADDRESSING_STYLE", ""), "AWS_S3_ADDRESSING_STYLE"),
        sts_endpoint_url=env.get("AWS_ENDPOINT_URL_STS") or None,
    )


def is_region_name(text: str) -> bool:
    return _REGION_RE.fullmatch(text) is not None


def _check_endpoint(name: str, url: str) -> None:
    from llmkube_stager.sources.http import check_http_url

    check_http_url(url, name)
    parts = urlsplit(url)
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(f"{name} must be scheme://host[:port][/path], without credentials")
    if parts.port == 0:
        raise ConfigError(f"{name} has an invalid port: 0")


def _check_pairs(env: Mapping[str, str]) -> None:
    for first, second in (
        ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
        ("AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"),
    ):
        if bool(env.get(first)) != bool(env.get(second)):
            given, missing = (first, second) if env.get(first) else (second, first)
            raise ConfigError(f"{given} is set but {missing} is not: set both or neither")


def _check_container_uri(url: str) -> None:
    name = "AWS_CONTAINER_CREDENTIALS_FULL_URI"
    _check_endpoint(name, url)
    parts = urlsplit(url)
    if parts.scheme == "http" and (parts.hostname or "") not in _CONTAINER_HTTP_HOSTS:
        raise ConfigError(f"{name} over http must be a loopback or EKS/ECS agent address")


def parse_style(text: str, name: str) -> AddressingStyle | None:
    if not text.strip():
        return None
    for style in _STYLES:
        if text.strip().lower() == style:
            return style
    raise ConfigError(f"{name} must be auto, virtual or path, got {text[:40]!r}")


def addressing_style(
    chosen: AddressingStyle | None, endpoint: str | None, bucket: str
) -> AddressingStyle:
    """Virtual-host style where the endpoint needs it, path style where it
    must (#12.6). `chosen`: AWS_S3_ADDRESSING_STYLE, else the profile's."""
    if chosen is not None:
        return chosen
    host = (urlsplit(endpoint).hostname or "").lower() if endpoint else "s3.amazonaws.com"
    if any(host == s or host.endswith("." + s) for s in _AWS_DOMAINS):
        # AWS names the bucket in the (regional) host; a dotted name breaks
        # the wildcard certificate, and AWS still serves those by path.
        # Never botocore's "auto": it presigns for the global endpoint.
        hostable = _VIRTUAL_HOSTABLE_RE.fullmatch(bucket) is not None
        return "virtual" if hostable else "path"
    # MinIO, Ceph, SeaweedFS... rarely have wildcard DNS for bucket hosts
    # (the scripts were path style): AWS_S3_ADDRESSING_STYLE=virtual otherwise.
    return "path"


class S3Source:
    kind: SourceKind = "s3"
    revision: str | None = None
    # The signed HEAD is also where the presigned GET comes from.
    get_without_probe = False

    def __init__(self, config: Config) -> None:
        self._config = config
        self.ref = parse_s3_ref(config)
        self.settings = s3_settings(config)
        self._clients: S3Clients | None = None
        # A prefix without MODEL_FILES (#24 item 5): the files are listed.
        self.lists = config.listed
        self.listing: Listing | None = None

    def list_files(self, retry: Callable[[Callable[[], Any]], Any]) -> Listing:
        """ListObjectsV2 of the prefix, each page asked through `retry`."""
        from llmkube_stager.sources.s3_listing import list_objects

        clients = self._open_clients()
        key = self._listed_key()
        where = self.listing_source
        return list_objects(
            where,
            self.ref.bucket,
            key,
            lambda prefix, token: retry(lambda: clients.list_page(prefix, token, where)),
        )

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
        from llmkube_stager.sources.s3_client import S3Clients

        if self._clients is None:
            self._clients = S3Clients(self._config, self.settings, self.ref.bucket)
        return self._clients

    def manifest(self) -> Manifest:
        config, ref = self._config, self.ref
        if self.listing is not None:
            return _listed_manifest(config, ref, self.listing)
        return build_manifest(
            config,
            "s3",
            f"s3://{ref.bucket}/{ref.key}",
            lambda rel: f"s3://{ref.bucket}/{object_key(ref, rel, config.multi_file)}",
        )

    def fetcher(self) -> S3Fetcher:
        clients, self._clients = self._open_clients(), None  # the fetcher closes them
        return S3Fetcher(
            self._config, self.ref, self.settings, clients=clients, listing=self.listing
        )


def _listed_manifest(config: Config, ref: S3Ref, listing: Listing) -> Manifest:
    root = config.cache_dir
    files = tuple(
        RemoteFile(
            rel=f.rel,
            url=f"s3://{ref.bucket}/{object_key(ref, f.rel, True)}",
            dest=dest_path(root, f.rel),
            size_bytes=f.size_bytes,
        )
        for f in listing.files
    )
    return Manifest("s3", root, files, True, listing.source)


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
        from llmkube_stager.sources.http import HttpFetcher
        from llmkube_stager.sources.s3_client import S3Clients

        self._config = config
        self._ref = ref
        self._expiry_s = presign_expiry_s
        self._log: Log | None = None
        self._clients = clients or S3Clients(config, settings, ref.bucket)
        self._http: HttpFetcher = HttpFetcher(config)
        self._listed = listing.by_rel if listing is not None else {}

    def bind_log(self, log: Log) -> None:
        self._log = log
        self._clients.log = log

    def _where(self, file: RemoteFile) -> tuple[str, str]:
        key = object_key(self._ref, file.rel, self._config.multi_file)
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
        )

    def open(self, file: RemoteFile, meta: RemoteMeta, offset: int, end: int | None = None) -> Body:
        key, where = self._where(file)
        try:
            return self._get(file, meta, key, where, offset, end)
        except SourceError as err:
            if _status_of(err) == 503:
                # S3 throttles with 503 SlowDown: back off, as from a 429.
                err.reason = Reason.SOURCE_RATE_LIMITED
            raise

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


def _status_of(err: SourceError) -> int | None:
    """The HTTP status the data path got, if the origin answered."""
    return None if err.wire is None else err.wire.http_status
