"""Environment and flags -> one frozen `Config` (CONTRACT §3).

This module is the only reader of the process environment, through the
mapping the commands hand to it (boundary.py). Every variable also has a
flag; a flag that was given wins over the environment, and its default is
written once, in `VARS`. A bad value raises `ConfigError` naming the
variable (never echoing a secret's value) before any I/O, so the cache is
left untouched.

Values the old scripts tolerated keep their old meaning instead (#14:
the operator may send them, also through `envFrom` of the source Secret): a
blank line inside MODEL_FILES, a PROGRESS_INTERVAL that is not a positive
number, an unknown LLMKUBE_REFRESH_POLICY, any LLMKUBE_PREFETCH_STAGER other
than exactly `true`. They are not errors but `Config.warnings`, which the
boundary logs once its logger exists.
"""

from __future__ import annotations

import math
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from llmkube_stager.errors import ConfigError
from llmkube_stager.layout import (
    PATH_MAX_BYTES,
    blank_entries,
    check_name_room,
    check_path_room,
    is_reserved_name,
    parse_file_list,
)
from llmkube_stager.pins import file_pins, single_pin
from llmkube_stager.proxy import ProxyConfigError, ProxySettings, parse_no_proxy, parse_proxy

RefreshPolicy = Literal["IfNotPresent", "OnChange"]
_POLICIES: dict[str, RefreshPolicy] = {"ifnotpresent": "IfNotPresent", "onchange": "OnChange"}
MAX_CONNECTIONS = 32
MAX_FILES_IN_FLIGHT = 64
MAX_SHARDS = 10_000
LogFormat = Literal["text", "json"]
_LOG_FORMATS: dict[str, LogFormat] = {"text": "text", "json": "json"}
DirectIoMode = Literal["auto", "on", "off"]
_DIRECT_IO_MODES: dict[str, DirectIoMode] = {"auto": "auto", "on": "on", "off": "off"}


@dataclass(frozen=True)
class Var:
    """One environment variable of the contract, its flag, and its default
    as it would be written in the environment ("": none)."""

    env: str
    help: str
    secret: bool = False
    default: str = ""

    @property
    def flag(self) -> str:
        return "--" + self.env.lower().replace("_", "-")


VARS: tuple[Var, ...] = (
    Var("MODEL_SOURCE", "model source URL (http(s)://, hf://, s3://, file://, /path, pvc://)"),
    Var("CACHE_DIR", "the model's directory in the cache"),
    Var("MODEL_PATH", "single-file: the destination file"),
    Var("MODEL_FILES", "multi-file: newline-separated repo-relative paths, primary first"),
    Var("S3_BUCKET", "S3 bucket (derived from MODEL_SOURCE when absent)"),
    Var("S3_KEY", "S3 key of a single-file model"),
    Var("S3_PREFIX", "S3 prefix of a multi-file model"),
    Var("MODEL_SHA256", "single-file sha256 pin (64 hex)"),
    Var("MODEL_FILE_SHA256", "multi-file pins, lines '<digest> <rel>'"),
    Var("LLMKUBE_REFRESH_POLICY", "IfNotPresent or OnChange", default="IfNotPresent"),
    Var("LLMKUBE_PREFETCH_STAGER", "true in prefetch Jobs (may stage on FUSE)", default="false"),
    Var("HF_TOKEN", "Hugging Face token", secret=True),
    Var("HF_ENDPOINT", "Hugging Face mirror endpoint"),
    Var("AWS_ACCESS_KEY_ID", "S3 access key id", secret=True),
    Var("AWS_SECRET_ACCESS_KEY", "S3 secret key", secret=True),
    Var("AWS_SESSION_TOKEN", "S3 session token", secret=True),
    Var("AWS_REGION", "S3 region"),
    Var("AWS_ENDPOINT_URL", "S3 endpoint URL"),
    # The rest of the AWS credential chain and endpoint settings (docs/sources.md);
    # handed to botocore as an explicit mapping, never through os.environ.
    Var("AWS_ENDPOINT_URL_S3", "S3 endpoint URL (wins over AWS_ENDPOINT_URL)"),
    Var("AWS_ENDPOINT_URL_STS", "STS endpoint for web identity and role credentials"),
    Var("AWS_DEFAULT_REGION", "S3 region when AWS_REGION is not set"),
    Var("AWS_S3_ADDRESSING_STYLE", "auto (default), virtual or path"),
    Var("AWS_PROFILE", "profile of the shared credentials/config files"),
    Var("AWS_SHARED_CREDENTIALS_FILE", "shared credentials file (default ~/.aws/credentials)"),
    Var("AWS_CONFIG_FILE", "shared config file (default ~/.aws/config)"),
    Var("AWS_ROLE_ARN", "role to assume with the web identity token (IRSA)"),
    Var("AWS_WEB_IDENTITY_TOKEN_FILE", "web identity token file (IRSA)"),
    Var("AWS_ROLE_SESSION_NAME", "session name of the assumed role"),
    Var("AWS_CONTAINER_CREDENTIALS_FULL_URI", "container credentials endpoint (EKS Pod Identity)"),
    Var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "container credentials path (ECS)"),
    Var("AWS_CONTAINER_AUTHORIZATION_TOKEN", "container credentials token", secret=True),
    Var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "file holding the container credentials token"),
    Var("AWS_EC2_METADATA_DISABLED", "true: never ask the instance metadata service"),
    Var("AWS_EC2_METADATA_SERVICE_ENDPOINT", "instance metadata service endpoint"),
    Var(
        "LLMKUBE_CA_DIR",
        "extra CA certificates, added to the system roots",
        default="/custom-certs",
    ),
    Var(
        "LLMKUBE_HOST_MODEL",
        "host-path model file for local sources",
        default="/host-model/model.gguf",
    ),
    Var(
        "LLMKUBE_ALLOWED_HOST_ROOTS",
        "colon-separated roots a local source must lie in (unset: no restriction)",
    ),
    Var("LLMKUBE_TERMINATION_LOG", "termination message path", default="/dev/termination-log"),
    Var("PROGRESS_INTERVAL", "seconds between progress lines", default="10"),
    Var("LLMKUBE_LOG_FORMAT", "text or json", default="text"),
    Var("LLMKUBE_CONNECT_TIMEOUT", "seconds to establish a connection", default="10"),
    Var(
        "LLMKUBE_STALL_TIMEOUT",
        "seconds without a received byte before an attempt is retried",
        default="60",
    ),
    Var(
        "LLMKUBE_RETRIES",
        "attempts per request after the first, for transient failures",
        default="5",
    ),
    Var(
        "LLMKUBE_MAX_RETRY_WAIT",
        "longest single wait between attempts, Retry-After included",
        default="60",
    ),
    Var("LLMKUBE_LOCK_TIMEOUT", "seconds a writer waits for the cache lock", default="3600"),
    Var(
        "LLMKUBE_CONNECTIONS",
        "parallel ranged connections per large file (1 disables)",
        default="8",
    ),
    Var(
        "LLMKUBE_FILES_IN_FLIGHT",
        "files of a multi-file model transferred at once (1: in turn)",
        default="8",
    ),
    Var(
        "LLMKUBE_SHARDS",
        "prefetch Jobs: split the model's files into this many shares (#16)",
        default="1",
    ),
    Var("JOB_COMPLETION_INDEX", "the share this pod stages (set by an Indexed Job)"),
    Var(
        "LLMKUBE_JOB_ID",
        "the prefetch Job this pod belongs to (its batch.kubernetes.io/controller-uid "
        "label, through the downward API): a sharded Job's commit claim is its own",
    ),
    Var(
        "LLMKUBE_DIRECT_IO",
        "auto (the page cache while the model fits memory, then O_DIRECT on "
        "ext4/xfs/btrfs), on (O_DIRECT there always) or off (always the page cache)",
        default="auto",
    ),
    # KServe mode (#24 item 2): bounds of an unpacked archive (kserve/archive.py).
    Var(
        "LLMKUBE_ARCHIVE_MAX_BYTES",
        "bytes an archive may unpack to (KServe mode)",
        default=str(1 << 40),  # 1 TiB
    ),
    Var("LLMKUBE_ARCHIVE_MAX_FILES", "members an archive may hold (KServe mode)", default="100000"),
    # Credentials in a proxy URL are secrets (proxy.py); the lowercase
    # spellings are read too and win, as in curl.
    Var("HTTPS_PROXY", "http:// proxy for https origins (also https_proxy)", secret=True),
    Var("HTTP_PROXY", "http:// proxy for http origins (also http_proxy)", secret=True),
    Var("NO_PROXY", "hosts, domains, IPs or CIDRs that go direct (also no_proxy)"),
)

SECRET_VARS: tuple[str, ...] = tuple(v.env for v in VARS if v.secret)
# Written once, in VARS: the reader, `--help` and the defaults of Config and
# Timeouts below all take them from here (#23 item 4).
DEFAULTS: Mapping[str, str] = {v.env: v.default for v in VARS if v.default}

# botocore settings honoured without a flag of their own (docs/sources.md).
AWS_PASSTHROUGH_VARS: tuple[str, ...] = (
    "AWS_STS_REGIONAL_ENDPOINTS",
    "AWS_USE_FIPS_ENDPOINT",
    "AWS_USE_DUALSTACK_ENDPOINT",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE",
    "AWS_EC2_METADATA_V1_DISABLED",
    "AWS_METADATA_SERVICE_TIMEOUT",
    "AWS_METADATA_SERVICE_NUM_ATTEMPTS",
)
# Every variable the S3 source hands to botocore, HOME for its "~/.aws" defaults.
AWS_ENV_VARS: tuple[str, ...] = (
    *(v.env for v in VARS if v.env.startswith("AWS_")),
    *AWS_PASSTHROUGH_VARS,
    "HOME",
)


@dataclass(frozen=True)
class Timeouts:
    connect_s: float = float(DEFAULTS["LLMKUBE_CONNECT_TIMEOUT"])
    stall_s: float = float(DEFAULTS["LLMKUBE_STALL_TIMEOUT"])
    retries: int = int(DEFAULTS["LLMKUBE_RETRIES"])
    max_retry_wait_s: float = float(DEFAULTS["LLMKUBE_MAX_RETRY_WAIT"])
    lock_s: float = float(DEFAULTS["LLMKUBE_LOCK_TIMEOUT"])


@dataclass(frozen=True)
class Secrets:
    """Credential values. `repr` never shows them."""

    hf_token: str = field(default="", repr=False)
    aws_access_key_id: str = field(default="", repr=False)
    aws_secret_access_key: str = field(default="", repr=False)
    aws_session_token: str = field(default="", repr=False)
    aws_container_authorization_token: str = field(default="", repr=False)

    def values(self) -> tuple[str, ...]:
        return tuple(
            v
            for v in (
                self.hf_token,
                self.aws_access_key_id,
                self.aws_secret_access_key,
                self.aws_session_token,
                self.aws_container_authorization_token,
            )
            if v
        )


@dataclass(frozen=True)
class Config:
    source: str
    cache_dir: str
    model_path: str
    model_files: tuple[str, ...]
    refresh_policy: RefreshPolicy = _POLICIES[DEFAULTS["LLMKUBE_REFRESH_POLICY"].lower()]
    prefetch_stager: bool = DEFAULTS["LLMKUBE_PREFETCH_STAGER"] == "true"
    # sha256 pins by relative path (single-file: the basename of MODEL_PATH).
    pins: Mapping[str, str] = field(default_factory=dict)
    s3_bucket: str = ""
    s3_key: str = ""
    s3_prefix: str = ""
    hf_endpoint: str = ""
    aws_region: str = ""
    aws_endpoint_url: str = ""
    # The AWS_* settings that were given (flag or environment) and HOME: the
    # only environment botocore sees (sources/s3_session.py).
    aws_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    ca_dir: str = DEFAULTS["LLMKUBE_CA_DIR"]
    host_model: str = DEFAULTS["LLMKUBE_HOST_MODEL"]
    allowed_host_roots: tuple[str, ...] = ()
    termination_log: str = DEFAULTS["LLMKUBE_TERMINATION_LOG"]
    progress_interval_s: float = float(DEFAULTS["PROGRESS_INTERVAL"])
    connections: int = int(DEFAULTS["LLMKUBE_CONNECTIONS"])
    files_in_flight: int = int(DEFAULTS["LLMKUBE_FILES_IN_FLIGHT"])
    # Sharded prefetch (#16 item 4): this pod stages share `shard_index` of
    # `shards` (1: the whole model).
    shards: int = int(DEFAULTS["LLMKUBE_SHARDS"])
    shard_index: int = 0
    # LLMKUBE_JOB_ID (#29 item 6): the Job whose pods share a commit claim
    # (cache/jobclaim.py); "" when the pod was not told.
    job_id: str = ""
    # LLMKUBE_DIRECT_IO: "auto" keeps files that fit memory in the page cache
    # (transfer/writemode.py); "auto" and "on" write the rest with O_DIRECT,
    # still only where FsInfo.direct_io_ok; "off" never.
    direct_io_mode: DirectIoMode = _DIRECT_IO_MODES[DEFAULTS["LLMKUBE_DIRECT_IO"]]
    proxy: ProxySettings = field(default_factory=ProxySettings)
    # KServe's STORAGE_ALLOW_PATTERNS / STORAGE_IGNORE_PATTERNS: fnmatch
    # filters of a listed source's relative paths (#24 item 3, staging/listed.py).
    allow_patterns: tuple[str, ...] = ()
    ignore_patterns: tuple[str, ...] = ()
    archive_max_bytes: int = int(DEFAULTS["LLMKUBE_ARCHIVE_MAX_BYTES"])
    archive_max_files: int = int(DEFAULTS["LLMKUBE_ARCHIVE_MAX_FILES"])
    log_format: LogFormat = _LOG_FORMATS[DEFAULTS["LLMKUBE_LOG_FORMAT"]]
    timeouts: Timeouts = Timeouts()
    secrets: Secrets = Secrets()
    # Tolerated values, each with what was made of it (see the module docstring).
    warnings: tuple[str, ...] = ()

    # No MODEL_FILES nor MODEL_PATH, a CACHE_DIR and a source that can list
    # its files (an s3:// prefix): the files are the listing's (#24 item 5).
    listed: bool = False

    @property
    def multi_file(self) -> bool:
        return bool(self.model_files) or self.listed

    @property
    def direct_io(self) -> bool:
        """O_DIRECT allowed at all (where the filesystem takes it)."""
        return self.direct_io_mode != "off"


# URLs longer than this are refused by most servers and by httpx (64 KiB):
# a configuration mistake, not a transfer to attempt.
URL_MAX_BYTES = 8192
_URL_VARS = ("MODEL_SOURCE", "HF_ENDPOINT", "AWS_ENDPOINT_URL", "HTTPS_PROXY", "HTTP_PROXY")


# What KServe's credential builder and webhook give a storage initializer
# (#24 item 3: kserve_storage.py, s3_secret.go), mapped onto the agent's own
# variables; a variable of the agent that is set always wins.
KSERVE_VARS: tuple[str, ...] = (
    "S3_ENDPOINT",
    "S3_USE_HTTPS",
    "S3_VERIFY_SSL",
    "S3_USER_VIRTUAL_BUCKET",
    "awsAnonymousCredential",
    "AWS_CA_BUNDLE",
    "CA_BUNDLE_CONFIGMAP_NAME",
    "CA_BUNDLE_VOLUME_MOUNT_POINT",
    "STORAGE_CONFIG",
    "STORAGE_OVERRIDE_CONFIG",
)
# KServe's storage spec (the `storage-config` Secret: one JSON object per
# key, STORAGE_OVERRIDE_CONFIG on top): its s3 fields and the variables they
# set, which win over the environment as in KServe's _update_with_storage_spec.
_STORAGE_SPEC_VARS = ("STORAGE_CONFIG", "STORAGE_OVERRIDE_CONFIG")
_STORAGE_SPEC_S3 = (
    ("endpoint_url", "AWS_ENDPOINT_URL"),
    ("access_key_id", "AWS_ACCESS_KEY_ID"),
    ("secret_access_key", "AWS_SECRET_ACCESS_KEY"),
    ("region", "AWS_DEFAULT_REGION"),
    ("ca_bundle", "AWS_CA_BUNDLE"),
    ("verify_ssl", "S3_VERIFY_SSL"),
    ("anonymous", "awsAnonymousCredential"),
)


def _storage_spec_docs(environ: Mapping[str, str]) -> tuple[dict[str, object], str | None]:
    """The merged storage spec, and the name of a variable that is not a
    JSON object (never its value: it holds keys)."""
    if not any(environ.get(name, "").strip() for name in _STORAGE_SPEC_VARS):
        return {}, None
    import json

    merged: dict[str, object] = {}
    for name in _STORAGE_SPEC_VARS:
        text = environ.get(name, "").strip()
        if not text:
            continue
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            return {}, name
        if not isinstance(doc, dict):
            return {}, name
        merged.update(doc)
    return merged, None


def _storage_spec(environ: Mapping[str, str]) -> dict[str, str]:
    if not any(environ.get(name, "").strip() for name in _STORAGE_SPEC_VARS):
        return {}
    spec, _ = _storage_spec_docs(environ)
    if spec.get("type") != "s3":
        return {}
    found: dict[str, str] = {}
    for key, name in _STORAGE_SPEC_S3:
        value = spec.get(key)
        if isinstance(value, bool):
            found[name] = "true" if value else "false"
        elif isinstance(value, str | int):
            found[name] = str(value)
    return found


# awsAnonymousCredential=true: what would sign a request is not handed on
# (KServe: botocore UNSIGNED whatever else the Secret holds).
_SIGNING_VARS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
)
KSERVE_CA_MOUNT_DEFAULT = "/etc/ssl/custom-certs"


def with_kserve(environ: Mapping[str, str]) -> Mapping[str, str]:
    """The environment with KServe's variables mapped onto the agent's."""
    if not any(name in environ for name in KSERVE_VARS):
        return environ
    environ = {**environ, **_storage_spec(environ)}
    merged = dict(environ)

    def given(name: str) -> str:
        return environ.get(name, "").strip()

    endpoint = given("S3_ENDPOINT")
    if endpoint and not given("AWS_ENDPOINT_URL"):
        if "://" not in endpoint:  # KServe's form: host[:port], the scheme by S3_USE_HTTPS
            https = given("S3_USE_HTTPS").lower() not in ("0", "false")
            endpoint = ("https://" if https else "http://") + endpoint
        merged["AWS_ENDPOINT_URL"] = endpoint
    if given("S3_USER_VIRTUAL_BUCKET").lower() == "true" and not given("AWS_S3_ADDRESSING_STYLE"):
        merged["AWS_S3_ADDRESSING_STYLE"] = "virtual"
    if not given("LLMKUBE_CA_DIR"):
        # Added to the system roots like LLMKUBE_CA_DIR (sources/tls.py).
        if given("AWS_CA_BUNDLE"):
            merged["LLMKUBE_CA_DIR"] = posixpath.dirname(given("AWS_CA_BUNDLE")) or "/"
        elif given("CA_BUNDLE_CONFIGMAP_NAME"):
            merged["LLMKUBE_CA_DIR"] = (
                given("CA_BUNDLE_VOLUME_MOUNT_POINT") or KSERVE_CA_MOUNT_DEFAULT
            )
    if given("awsAnonymousCredential").lower() == "true":
        for name in _SIGNING_VARS:
            merged.pop(name, None)
        # Nothing else in the chain may find a key (files under HOME, IMDS).
        merged.update(
            AWS_SHARED_CREDENTIALS_FILE="/dev/null",
            AWS_CONFIG_FILE="/dev/null",
            AWS_EC2_METADATA_DISABLED="true",
        )
    return merged


class _Reader:
    """Looks a variable up: flag first, then environment, then default."""

    def __init__(
        self, environ: Mapping[str, str], flags: Mapping[str, str | None], *, kserve: bool = True
    ) -> None:
        self._environ = with_kserve(environ) if kserve else environ
        self._flags = flags
        self.warnings: list[str] = []

    def tolerated(self, name: str, value: str, meaning: str) -> None:
        """A value the scripts accepted: keep their meaning, say so."""
        self.warnings.append(f"{name}={_shown(value)} is not valid; {meaning}, as the scripts did")

    def optional(self, name: str) -> str | None:
        """The value, or None when neither flag nor variable is set at all
        (a pin variable set to "" must fail closed, not read as absent)."""
        flagged = self._flags.get(name)
        return flagged if flagged is not None else self._environ.get(name)

    def curl_style(self, name: str) -> str:
        """A flag, else the lowercase variable, else the uppercase one (curl)."""
        flagged = self._flags.get(name)
        if flagged is not None:
            return flagged
        lower = self._environ.get(name.lower())
        return lower if lower is not None else self._environ.get(name, "")

    def raw(self, name: str) -> str:
        """As given, else the default when neither flag nor variable is set
        (a variable set to "" stays "")."""
        flagged = self._flags.get(name)
        if flagged is not None:
            return flagged
        return self._environ.get(name, DEFAULTS.get(name, ""))

    def text(self, name: str) -> str:
        """Stripped; the default when unset or blank."""
        return self.raw(name).strip() or DEFAULTS.get(name, "")

    def number(self, name: str, *, minimum: float = 0.0) -> float:
        text = self.text(name)
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{name} must be a number of seconds, got {_shown(text)}") from None
        if not math.isfinite(value) or value <= minimum:
            raise ConfigError(
                f"{name} must be a finite number above {minimum:g}, got {_shown(text)}"
            )
        return value

    def count(self, name: str) -> int:
        text = self.text(name)
        if not (text.isascii() and text.isdigit()):
            raise ConfigError(f"{name} must be a whole number >= 0, got {_shown(text)}")
        return int(text)

    def choice(self, name: str, choices: tuple[str, ...]) -> str:
        text = self.text(name)
        for choice in choices:
            if text.lower() == choice.lower():
                return choice
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {_shown(text)}")

    def interval(self, name: str) -> float:
        """Seconds where the scripts fell back to their default on anything
        that is not a positive number (`${PROGRESS_INTERVAL:-10}`)."""
        try:
            return self.number(name)
        except ConfigError:
            default = float(DEFAULTS[name])
            self.tolerated(name, self.raw(name), f"using the default {default:g} s")
            return default


def load_timeouts(read: _Reader) -> Timeouts:
    return Timeouts(
        connect_s=read.number("LLMKUBE_CONNECT_TIMEOUT"),
        stall_s=read.number("LLMKUBE_STALL_TIMEOUT"),
        retries=read.count("LLMKUBE_RETRIES"),
        max_retry_wait_s=read.number("LLMKUBE_MAX_RETRY_WAIT"),
        lock_s=read.number("LLMKUBE_LOCK_TIMEOUT"),
    )


def load_secrets(read: _Reader) -> Secrets:
    return Secrets(
        hf_token=read.raw("HF_TOKEN").strip(),
        aws_access_key_id=read.raw("AWS_ACCESS_KEY_ID").strip(),
        aws_secret_access_key=read.raw("AWS_SECRET_ACCESS_KEY").strip(),
        aws_session_token=read.raw("AWS_SESSION_TOKEN").strip(),
        aws_container_authorization_token=read.raw("AWS_CONTAINER_AUTHORIZATION_TOKEN").strip(),
    )


def load_aws_env(read: _Reader) -> Mapping[str, str]:
    """The AWS settings that were given, flags winning, blank ones dropped."""
    given = {name: read.raw(name).strip() for name in AWS_ENV_VARS}
    return {name: value for name, value in given.items() if value}


def load_proxy(read: _Reader) -> ProxySettings:
    try:
        return ProxySettings(
            https=parse_proxy(read.curl_style("HTTPS_PROXY"), "HTTPS_PROXY"),
            http=parse_proxy(read.curl_style("HTTP_PROXY"), "HTTP_PROXY"),
            no_proxy=parse_no_proxy(read.curl_style("NO_PROXY")),
        )
    except ProxyConfigError as exc:
        raise ConfigError(str(exc)) from None


def secret_values(environ: Mapping[str, str], flags: Mapping[str, str | None]) -> tuple[str, ...]:
    """Secret values, readable even when the rest of the config is invalid,
    so that the redactor exists before any error can be printed. A proxy
    variable counts whole (it may be unparseable) and by its credentials.
    Read as given: a key that awsAnonymousCredential drops is still a secret."""
    read = _Reader(environ, flags, kserve=False)
    values = list(load_secrets(read).values())
    # KServe's storage spec: whole (it may be unparseable) and by its keys.
    values += [environ.get(name, "").strip() for name in _STORAGE_SPEC_VARS]
    spec = _storage_spec(environ)
    values += [spec.get("AWS_ACCESS_KEY_ID", ""), spec.get("AWS_SECRET_ACCESS_KEY", "")]
    for name in ("HTTPS_PROXY", "HTTP_PROXY"):
        text = read.curl_style(name).strip()
        values.append(text)
        try:
            proxy = parse_proxy(text, name)
        except ProxyConfigError:
            continue
        if proxy is not None:
            values.extend(proxy.secrets())
    return tuple(v for v in values if v)


def _pins(read: _Reader, model_path: str, files: tuple[str, ...]) -> Mapping[str, str]:
    single = single_pin(read.optional("MODEL_SHA256"), bool(files))
    pins = file_pins(read.optional("MODEL_FILE_SHA256"), files)
    if single is not None:
        return {posixpath.basename(model_path): single}
    return pins


def _local_path(name: str, path: str, cwd: str | None) -> str:
    """An absolute path as given; a relative one (a person's local run) taken
    from the working directory, as a shell would. Checked as written first:
    a '..' part or a control character is refused before it is resolved."""
    _check_plain_text(name, path)
    if not path or path.startswith("/"):
        return path
    if path.startswith("~"):
        raise ConfigError(f"{name} starts with '~', which no shell expanded: write the path out")
    if cwd is None:
        try:
            cwd = os.getcwd()
        except OSError:
            raise ConfigError(f"{name} is relative, and the working directory is gone") from None
    return posixpath.normpath(posixpath.join(cwd, path))


def _prefetch_stager(read: _Reader) -> bool:
    """A stager only for exactly `true` (the scripts' `= true` test): a
    serving pod taken for a stager would write on FUSE, which spec §9.3
    forbids, so `True`, `1` or `yes` mean a serving pod, with a warning."""
    value = read.raw("LLMKUBE_PREFETCH_STAGER")
    if value not in ("", "true", "false"):
        meaning = "this pod is a serving pod (a stager needs exactly 'true')"
        read.tolerated("LLMKUBE_PREFETCH_STAGER", value, meaning)
    return value == "true"


def _model_files(read: _Reader) -> tuple[str, ...]:
    text = read.raw("MODEL_FILES")
    blank = blank_entries(text)
    if blank:
        read.warnings.append(
            f"MODEL_FILES has {blank} blank line(s) between entries; skipped, as the scripts did"
        )
    return parse_file_list(text)


def _shown(value: str) -> str:
    """A value for a message: quoted, or only its length when long. Never a
    prefix: a cut secret would escape the redactor, which knows whole values
    (and a Secret's keys reach the pod through envFrom)."""
    text = repr(value)
    return text if len(text) <= 80 else f"<{len(value)} characters>"


def _layout_paths(read: _Reader, source: str, cwd: str | None) -> tuple[str, str, tuple[str, ...]]:
    """CACHE_DIR, MODEL_PATH and the validated file list, with the mode rules."""
    cache_dir = _local_path("CACHE_DIR", read.raw("CACHE_DIR").strip(), cwd)
    model_path = _local_path("MODEL_PATH", read.raw("MODEL_PATH").strip(), cwd)
    if not model_path and source.lower().startswith("pvc://"):
        # pvc:// is verified where the claim is mounted (spec §3.5).
        claim_path = source.split("/", 3)[3] if source.count("/") >= 3 else ""
        model_path = posixpath.join("/model-source", claim_path) if claim_path else ""
    files = _model_files(read)
    if files and model_path:
        raise ConfigError("set MODEL_FILES (multi-file) or MODEL_PATH (single-file), not both")
    if files and not cache_dir:
        raise ConfigError("CACHE_DIR is required with MODEL_FILES")
    if not files and not model_path and not (cache_dir and _listable(read, source)):
        raise ConfigError("MODEL_PATH (single-file) or MODEL_FILES (multi-file) is required")
    for name, path in (("CACHE_DIR", cache_dir), ("MODEL_PATH", model_path)):
        if path:
            _check_abs_path(name, path)
    if model_path and (model_path.endswith("/") or not posixpath.basename(model_path)):
        raise ConfigError(f"MODEL_PATH must name a file, got {repr(model_path)[:200]}")
    if model_path and is_reserved_name(posixpath.basename(model_path)):
        raise ConfigError(
            f"MODEL_PATH {repr(model_path)[:200]} uses a name reserved for cache records"
        )
    return cache_dir, model_path, files


# Sources whose files are listed when MODEL_FILES is not given (#24 items 2, 5).
_LISTABLE_SCHEMES = ("s3://", "hf://")


def _listable(read: _Reader, source: str) -> bool:
    return source.lower().startswith(_LISTABLE_SCHEMES) or (
        not source and bool(read.raw("S3_BUCKET").strip())
    )


def _check_plain_text(name: str, path: str) -> None:
    """No control character, and no '..' part that climbs out of a named
    directory (the model directory must be where it says), in the path as
    the user wrote it. A relative path may start by climbing (`../models`,
    a person's local run): those parts are resolved against the working
    directory, never against a directory of the cache."""
    shown = repr(path)[:200]
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        raise ConfigError(f"{name} contains a control character: {shown}")
    parts = path.split("/")
    if not path.startswith("/"):
        while parts and parts[0] in ("..", "."):
            parts = parts[1:]
    if any(part == ".." for part in parts):
        raise ConfigError(f"{name} must not contain '..' parts, got {shown}")


def _check_abs_path(name: str, path: str) -> None:
    """An absolute, plain path (relative ones are resolved by then), within
    PATH_MAX."""
    shown = repr(path)[:200]
    if not path.startswith("/"):
        raise ConfigError(f"{name} must be an absolute path, got {shown}")
    if any(part in (".", "..") for part in path.split("/")):
        raise ConfigError(f"{name} must not contain '.' or '..' parts, got {shown}")
    if len(path.encode()) >= PATH_MAX_BYTES:
        raise ConfigError(f"{name} is longer than PATH_MAX ({PATH_MAX_BYTES} bytes)")


def _check_room(
    cache_dir: str, model_path: str, files: tuple[str, ...], pins: Mapping[str, str]
) -> None:
    """Names and paths that cannot hold the agent's suffixes fail here, before
    any I/O, not after the probe with ENAMETOOLONG (#11 item 10)."""
    if model_path:
        name = posixpath.basename(model_path)
        check_name_room(name, pinned=bool(pins), what="MODEL_PATH")
        check_path_room(posixpath.dirname(model_path), (name,), pinned=frozenset(pins))
        return
    for rel in pins:
        check_name_room(
            posixpath.basename(rel), pinned=True, what=f"MODEL_FILES entry {_shown(rel)}"
        )
    check_path_room(cache_dir, files, pinned=frozenset(pins))


def load_config(
    environ: Mapping[str, str],
    flags: Mapping[str, str | None],
    *,
    require_source: bool = True,
    cwd: str | None = None,
) -> Config:
    """Parse everything once. Raises ConfigError / InvalidFileSet. Relative
    CACHE_DIR / MODEL_PATH are taken from `cwd` (default: the process's)."""
    read = _Reader(environ, flags)
    _, bad_spec = _storage_spec_docs(environ)
    if bad_spec is not None:
        raise ConfigError(f"{bad_spec} (KServe's storage spec) is not a JSON object")
    _check_url_lengths(read)
    source = read.raw("MODEL_SOURCE").strip()
    if not source and require_source:
        raise ConfigError("MODEL_SOURCE is required")
    _check_source_text(source)
    _check_header_secrets(read)
    cache_dir, model_path, files = _layout_paths(read, source, cwd)
    listed = not files and not model_path
    pins = {} if listed else _pins(read, model_path, files)
    for pin_var in ("MODEL_SHA256", "MODEL_FILE_SHA256"):
        if listed and read.optional(pin_var) is not None:
            # Fail closed: a pin that cannot be matched to a file is never dropped.
            raise ConfigError(f"{pin_var} needs MODEL_FILES (or MODEL_PATH) naming the files")
    _check_room(cache_dir, model_path, files, pins)
    if read.raw("S3_VERIFY_SSL").strip().lower() in ("0", "false"):
        read.warnings.append(
            "S3_VERIFY_SSL is off, but TLS is verified here all the same: give the endpoint's "
            "CA with AWS_CA_BUNDLE or LLMKUBE_CA_DIR"
        )
    return Config(
        source=source,
        cache_dir=cache_dir,
        model_path=model_path,
        model_files=files,
        listed=listed,
        refresh_policy=_policy(read),
        prefetch_stager=_prefetch_stager(read),
        pins=pins,
        s3_bucket=read.raw("S3_BUCKET").strip(),
        s3_key=read.raw("S3_KEY").strip(),
        s3_prefix=read.raw("S3_PREFIX").strip(),
        # Trimmed like the controller's hfEndpointFromSecret (scenario 90).
        hf_endpoint=read.raw("HF_ENDPOINT").strip(),
        aws_region=read.raw("AWS_REGION").strip(),
        aws_endpoint_url=read.raw("AWS_ENDPOINT_URL").strip(),
        aws_env=load_aws_env(read),
        ca_dir=read.raw("LLMKUBE_CA_DIR").strip(),
        host_model=_abs_path(read, "LLMKUBE_HOST_MODEL"),
        allowed_host_roots=_allowed_roots(read),
        termination_log=_abs_path(read, "LLMKUBE_TERMINATION_LOG"),
        progress_interval_s=read.interval("PROGRESS_INTERVAL"),
        connections=_connections(read),
        files_in_flight=_files_in_flight(read),
        **_shards(read),
        job_id=_job_id(read),
        direct_io_mode=_direct_io_mode(read),
        proxy=load_proxy(read),
        allow_patterns=_patterns(read, "STORAGE_ALLOW_PATTERNS"),
        ignore_patterns=_patterns(read, "STORAGE_IGNORE_PATTERNS"),
        archive_max_bytes=_positive(read, "LLMKUBE_ARCHIVE_MAX_BYTES"),
        archive_max_files=_positive(read, "LLMKUBE_ARCHIVE_MAX_FILES"),
        log_format=_log_format(read),
        timeouts=load_timeouts(read),
        secrets=load_secrets(read),
        warnings=tuple(read.warnings),
    )


def _abs_path(read: _Reader, name: str) -> str:
    path = read.raw(name).strip()
    if path:
        _check_abs_path(name, path)
    return path


def _allowed_roots(read: _Reader) -> tuple[str, ...]:
    """A relative root would be judged against the working directory."""
    roots = tuple(r for r in read.raw("LLMKUBE_ALLOWED_HOST_ROOTS").split(":") if r.strip())
    for root in roots:
        _check_abs_path("LLMKUBE_ALLOWED_HOST_ROOTS", root)
    return roots


def _check_source_text(source: str) -> None:
    """Whatever its scheme, MODEL_SOURCE must be one line that parses as a
    URL (a port too): the sources then never meet a ValueError."""
    from urllib.parse import urlsplit

    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in source):
        raise ConfigError(f"MODEL_SOURCE contains a control character: {_shown(source)}")
    try:
        _ = urlsplit(source).port
    except ValueError:
        raise ConfigError(
            f"MODEL_SOURCE is not a well-formed URL or path: {_shown(source)}"
        ) from None


# Secrets the agent sends as an HTTP header value (Authorization: Bearer).
_HEADER_SECRETS = ("HF_TOKEN",)


def _check_header_secrets(read: _Reader) -> None:
    """#29 item 9: a header value is one line of printable ASCII. A token
    with a line break, a control character or a character beyond ASCII
    cannot be sent (http.client raised a ValueError holding the header,
    token and all): refused before any request, named, never shown. Its
    surrounding whitespace (a Secret written with `echo`) is already gone."""
    for name in _HEADER_SECRETS:
        bad = next((ch for ch in read.raw(name).strip() if not " " <= ch <= "~"), None)
        if bad is None:
            continue
        if bad in "\r\n":
            what = "a line break"
        elif bad.isascii():
            what = "a control character"
        else:
            what = "a character beyond ASCII"
        raise ConfigError(
            f"{name} holds {what}, which no HTTP header can carry (it is sent as one); set it "
            "to the token alone (the value is not shown)"
        )


def _check_url_lengths(read: _Reader) -> None:
    """Named, never shown: a proxy URL may carry a password."""
    for name in _URL_VARS:
        size = max(len(read.raw(name).encode()), len(read.curl_style(name).encode()))
        if size > URL_MAX_BYTES:
            raise ConfigError(
                f"{name} is {size} bytes long: a URL may have at most {URL_MAX_BYTES}"
            )


def _patterns(read: _Reader, name: str) -> tuple[str, ...]:
    """KServe's forms: a JSON list (or one JSON value), else commas."""
    text = read.raw(name).strip()
    if not text:
        return ()
    import json

    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return tuple(p.strip() for p in text.split(",") if p.strip())
    items = parsed if isinstance(parsed, list) else [parsed]
    return tuple(str(p).strip() for p in items if str(p).strip())


def _positive(read: _Reader, name: str) -> int:
    value = read.count(name)
    if value < 1:
        raise ConfigError(f"{name} must be at least 1")
    return value


def _connections(read: _Reader) -> int:
    value = read.count("LLMKUBE_CONNECTIONS")
    if not 1 <= value <= MAX_CONNECTIONS:
        raise ConfigError(f"LLMKUBE_CONNECTIONS must be between 1 and {MAX_CONNECTIONS}")
    return value


def _files_in_flight(read: _Reader) -> int:
    value = read.count("LLMKUBE_FILES_IN_FLIGHT")
    if not 1 <= value <= MAX_FILES_IN_FLIGHT:
        raise ConfigError(f"LLMKUBE_FILES_IN_FLIGHT must be between 1 and {MAX_FILES_IN_FLIGHT}")
    return value


def _shards(read: _Reader) -> dict[str, int]:
    """LLMKUBE_SHARDS and the Indexed Job's JOB_COMPLETION_INDEX. Without
    LLMKUBE_SHARDS the index is ignored (an Indexed Job that does not shard).
    Only a prefetch stager shards: a serving pod that staged a share would
    start its server on part of a model."""
    shards = read.count("LLMKUBE_SHARDS")
    if not 1 <= shards <= MAX_SHARDS:
        raise ConfigError(f"LLMKUBE_SHARDS must be between 1 and {MAX_SHARDS}")
    if shards == 1:
        return {"shards": 1, "shard_index": 0}
    if not read.raw("JOB_COMPLETION_INDEX").strip():
        raise ConfigError(
            "LLMKUBE_SHARDS needs JOB_COMPLETION_INDEX (set by a Job with completionMode: Indexed)"
        )
    index = read.count("JOB_COMPLETION_INDEX")
    if index >= shards:
        raise ConfigError(
            f"JOB_COMPLETION_INDEX {index} is not a share of LLMKUBE_SHARDS={shards} "
            "(completions must equal LLMKUBE_SHARDS)"
        )
    if read.raw("LLMKUBE_PREFETCH_STAGER") != "true":  # as _prefetch_stager reads it
        raise ConfigError(
            "LLMKUBE_SHARDS is for prefetch Jobs (LLMKUBE_PREFETCH_STAGER=true): a serving "
            "pod must stage the whole model"
        )
    return {"shards": shards, "shard_index": index}


_JOB_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", re.ASCII)


def _job_id(read: _Reader) -> str:
    """LLMKUBE_JOB_ID: a Job's uid or name as its labels carry them (a
    label value: letters, digits, `-`, `_`, `.`); it is written into the
    commit claim and logged, so nothing else is taken (#29 item 6)."""
    text = read.raw("LLMKUBE_JOB_ID").strip()
    if text and not _JOB_ID_RE.fullmatch(text):
        raise ConfigError(
            "LLMKUBE_JOB_ID must be the Job's batch.kubernetes.io/controller-uid (or job-name) "
            f"label: letters, digits, '-', '_' and '.', at most 253, got {_shown(text)}"
        )
    return text


def _policy(read: _Reader) -> RefreshPolicy:
    """The default (IfNotPresent, the CRD's: spec §5.2) for anything but
    OnChange."""
    text = read.text("LLMKUBE_REFRESH_POLICY")
    policy = _POLICIES.get(text.lower())
    if policy is None:
        default = DEFAULTS["LLMKUBE_REFRESH_POLICY"]
        read.tolerated("LLMKUBE_REFRESH_POLICY", text, f"using {default} (the CRD default)")
        return _POLICIES[default.lower()]
    return policy


def _direct_io_mode(read: _Reader) -> DirectIoMode:
    return _DIRECT_IO_MODES[read.choice("LLMKUBE_DIRECT_IO", tuple(_DIRECT_IO_MODES))]


def _log_format(read: _Reader) -> LogFormat:
    return _LOG_FORMATS[read.choice("LLMKUBE_LOG_FORMAT", tuple(_LOG_FORMATS))]


def early_settings(
    environ: Mapping[str, str], flags: Mapping[str, str | None]
) -> tuple[LogFormat, str]:
    """Log format and termination path, read leniently so that even an invalid
    configuration is reported in the right format at the right place."""
    read = _Reader(environ, flags)
    default = _LOG_FORMATS[DEFAULTS["LLMKUBE_LOG_FORMAT"]]
    fmt = _LOG_FORMATS.get(read.text("LLMKUBE_LOG_FORMAT").lower(), default)
    path = read.raw("LLMKUBE_TERMINATION_LOG").strip()
    # A relative path would land in the working directory: none is written
    # (load_config refuses it; the log still says why).
    return fmt, path if path.startswith("/") else ""


def inspect_target(environ: Mapping[str, str], given: str | None) -> str:
    """The directory `inspect` reports: its argument, else CACHE_DIR as set
    (nothing else of the configuration needs to be valid for it)."""
    return given or _Reader(environ, {}, kserve=False).raw("CACHE_DIR")
