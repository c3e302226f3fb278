"""The S3 settings of one source, parsed and checked without any I/O: the
object reference (bucket, key or prefix: `S3_BUCKET`/`S3_KEY`/`S3_PREFIX`, or
`s3://bucket/key` read as the AWS CLI reads it), the endpoints, the region,
the addressing style and the credential variables that must come in pairs.

A bad value is InvalidConfiguration before the cache is touched (#11 item 12).
Pure: both the source (source.py) and its boto3 clients (clients.py) use
these, and neither imports the other's module to get them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from llmkube_stager.config import Config
from llmkube_stager.errors import ConfigError

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
    are part of the key, never a URL fragment or query (#11 item 11)."""
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
    from llmkube_stager.sources.wire.status import check_http_url

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
    must (#12 item 6). `chosen`: AWS_S3_ADDRESSING_STYLE, else the profile's."""
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
