"""s3:// sources (AWS S3 and S3-compatible servers such as MinIO).

boto3 does the control path: HEAD for size and ETag (SigV4, path-style
addressing for custom endpoints, session tokens) and presigning. The bytes
travel through the agent's own data path as a presigned GET (a local
computation, no request), pinned to the object with `If-Match: <ETag>`, so a
changed object answers 412 (ModelSourceChanged) instead of splicing, and
ranged resume works like HTTP. That path moves bytes several times faster
than botocore's StreamingBody (docs/performance.md).

botocore exceptions are translated here, by error code and HTTP status.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from llmkube_stager.config import Config
from llmkube_stager.errors import ConfigError, Reason, SourceError, SourceKind
from llmkube_stager.model import Manifest, RemoteFile
from llmkube_stager.sources.base import Body, RemoteMeta, build_manifest

if TYPE_CHECKING:
    from llmkube_stager.sources.http import HttpFetcher

# Presigned URLs must outlive a slow transfer with its retries.
PRESIGN_EXPIRY_S = 12 * 3600
_NOT_FOUND = frozenset({"NoSuchKey", "NoSuchBucket", "NotFound", "404"})
_UNAUTHORIZED = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "AllAccessDisabled",
        "401",
        "403",
    }
)
_THROTTLED = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "429"}
)


# Permissive on purpose (legacy buckets and MinIO allow uppercase and '_').
_BUCKET_RE = re.compile(r"[A-Za-z0-9._-]{1,255}")


@dataclass(frozen=True)
class S3Ref:
    bucket: str
    key: str  # single-file key, or the multi-file prefix ("" allowed)


def parse_s3_ref(config: Config) -> S3Ref:
    """S3_BUCKET/S3_KEY/S3_PREFIX win; else derived from s3://bucket/key."""
    parts = urlsplit(config.source)
    bucket = config.s3_bucket or parts.netloc
    derived = unquote(parts.path.lstrip("/"))
    key = (config.s3_prefix if config.multi_file else config.s3_key) or derived
    if not bucket:
        raise ConfigError("MODEL_SOURCE s3:// must name a bucket (or set S3_BUCKET)")
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


class S3Source:
    kind: SourceKind = "s3"
    # The signed HEAD is also where the presigned GET comes from.
    get_without_probe = False

    def __init__(self, config: Config) -> None:
        self._config = config
        self.ref = parse_s3_ref(config)

    def manifest(self) -> Manifest:
        config, ref = self._config, self.ref
        return build_manifest(
            config,
            "s3",
            f"s3://{ref.bucket}/{ref.key}",
            lambda rel: f"s3://{ref.bucket}/{object_key(ref, rel, config.multi_file)}",
        )

    def fetcher(self) -> S3Fetcher:
        return S3Fetcher(self._config, self.ref)


class S3Fetcher:
    parallel_ranges = True

    def __init__(self, config: Config, ref: S3Ref) -> None:
        from llmkube_stager.sources.http import HttpFetcher

        self._config = config
        self._ref = ref
        self._http: HttpFetcher = HttpFetcher(config)
        self._scratch = tempfile.TemporaryDirectory(prefix="llmkube-s3-")
        self._client: Any = None

    def _s3(self) -> Any:
        if self._client is None:
            self._client = make_client(self._config, self._scratch.name)
        return self._client

    def probe(self, file: RemoteFile) -> RemoteMeta:
        key = object_key(self._ref, file.rel, self._config.multi_file)
        where = f"s3://{self._ref.bucket}/{key}"
        try:
            head = self._s3().head_object(Bucket=self._ref.bucket, Key=key)
            url = self._s3().generate_presigned_url(
                "get_object",
                Params={"Bucket": self._ref.bucket, "Key": key},
                ExpiresIn=PRESIGN_EXPIRY_S,
            )
        except Exception as exc:
            raise translate_s3_error(exc, where) from exc
        etag = head.get("ETag")
        size = head.get("ContentLength")
        return RemoteMeta(
            url=url,
            size_bytes=size if isinstance(size, int) else None,
            etag=etag,
            accept_ranges=True,
            if_match=etag,
        )

    def open(self, file: RemoteFile, meta: RemoteMeta, offset: int, end: int | None = None) -> Body:
        return self._http.open(file, meta, offset, end)

    def close(self) -> None:
        self._http.close()
        self._scratch.cleanup()


def _proxy_options(config: Config, endpoint: str | None) -> dict[str, Any]:
    """The same proxy decision as the data path (proxy.py) for boto3's own
    calls; without a proxy for this endpoint boto3 is left to its defaults."""
    from llmkube_stager.sources.http_status import Origin

    region = config.aws_region or "us-east-1"
    origin = Origin.of(endpoint or f"https://s3.{region}.amazonaws.com")
    proxy = config.proxy.for_url(origin.scheme, origin.host, origin.port)
    return {"proxies": {origin.scheme: proxy.url()}} if proxy is not None else {}


def make_client(config: Config, scratch_dir: str) -> Any:
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config as BotoConfig

    from llmkube_stager.sources.tls import ca_bundle_file

    secrets = config.secrets
    endpoint = config.aws_endpoint_url or None
    options: dict[str, Any] = {
        **_proxy_options(config, endpoint),
        "connect_timeout": config.timeouts.connect_s,
        "read_timeout": config.timeouts.stall_s,
        # The agent retries itself (bounded, Retry-After aware).
        "retries": {"max_attempts": 1, "mode": "standard"},
        "s3": {"addressing_style": "path"} if endpoint else {},
        "signature_version": "s3v4" if secrets.aws_access_key_id else UNSIGNED,
    }
    session = boto3.session.Session(
        aws_access_key_id=secrets.aws_access_key_id or None,
        aws_secret_access_key=secrets.aws_secret_access_key or None,
        aws_session_token=secrets.aws_session_token or None,
        region_name=config.aws_region or "us-east-1",
    )
    return session.client(
        "s3",
        endpoint_url=endpoint,
        config=BotoConfig(**options),
        verify=ca_bundle_file(config.ca_dir, scratch_dir),
    )


def translate_s3_error(exc: Exception, where: str) -> SourceError:
    from botocore import exceptions as bex

    if isinstance(exc, bex.ClientError):
        return _client_error(exc.response, where)
    if isinstance(exc, bex.SSLError):
        return SourceError(
            f"TLS certificate verify failed for {where}", reason=Reason.SOURCE_UNTRUSTED
        )
    if isinstance(
        exc, bex.ConnectTimeoutError | bex.EndpointConnectionError | bex.ReadTimeoutError
    ):
        return SourceError(
            f"cannot reach the S3 endpoint for {where}: {type(exc).__name__}",
            reason=Reason.SOURCE_UNREACHABLE,
            transient=True,
        )
    if isinstance(exc, bex.ParamValidationError):
        # botocore refused before sending: retrying cannot help.
        raise ConfigError(f"invalid S3 request for {where}: check the bucket and key names")
    if isinstance(exc, bex.NoCredentialsError | bex.PartialCredentialsError):
        return SourceError(
            f"incomplete S3 credentials for {where}", reason=Reason.SOURCE_UNAUTHORIZED
        )
    if isinstance(exc, bex.BotoCoreError):
        return SourceError(
            f"S3 request failed for {where}: {type(exc).__name__}",
            reason=Reason.SOURCE_UNREACHABLE,
            transient=True,
        )
    raise exc


def _client_error(response: Any, where: str) -> SourceError:
    error = response.get("Error", {}) if isinstance(response, dict) else {}
    code = str(error.get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    text = f"{where}: {code or 'HTTP ' + str(status)}"
    if code in _NOT_FOUND or status == 404:
        return SourceError(text, reason=Reason.SOURCE_NOT_FOUND, answered=True)
    if code in _UNAUTHORIZED or status in (401, 403):
        return SourceError(text, reason=Reason.SOURCE_UNAUTHORIZED, answered=True)
    if code in _THROTTLED or status == 429:
        return SourceError(text, reason=Reason.SOURCE_RATE_LIMITED, transient=True, answered=True)
    if status == 412:
        return SourceError(text, reason=Reason.SOURCE_CHANGED, answered=True)
    if status >= 500:
        return SourceError(text, reason=Reason.SOURCE_UNAVAILABLE, transient=True, answered=True)
    return SourceError(text, reason=Reason.SOURCE_REJECTED, answered=True)
