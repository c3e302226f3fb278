"""Environment and flags -> one frozen `Config` (CONTRACT §3).

This module is the only reader of the process environment, and it reads it
once, through the mapping the CLI passes in. Every variable also has a flag;
a flag that was given wins over the environment. A bad value raises
`ConfigError` naming the variable (never echoing a secret's value) before any
I/O, so the cache is left untouched.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from llmkube_stager.errors import ConfigError
from llmkube_stager.layout import parse_file_list
from llmkube_stager.pins import file_pins, single_pin
from llmkube_stager.proxy import ProxyConfigError, ProxySettings, parse_no_proxy, parse_proxy

RefreshPolicy = Literal["IfNotPresent", "OnChange"]
DEFAULT_CONNECTIONS = 8
MAX_CONNECTIONS = 32
LogFormat = Literal["text", "json"]


@dataclass(frozen=True)
class Var:
    """One environment variable of the contract and its flag."""

    env: str
    help: str
    secret: bool = False

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
    Var("LLMKUBE_REFRESH_POLICY", "IfNotPresent (default) or OnChange"),
    Var("LLMKUBE_PREFETCH_STAGER", "true in prefetch Jobs (may stage on FUSE)"),
    Var("HF_TOKEN", "Hugging Face token", secret=True),
    Var("HF_ENDPOINT", "Hugging Face mirror endpoint"),
    Var("AWS_ACCESS_KEY_ID", "S3 access key id", secret=True),
    Var("AWS_SECRET_ACCESS_KEY", "S3 secret key", secret=True),
    Var("AWS_SESSION_TOKEN", "S3 session token", secret=True),
    Var("AWS_REGION", "S3 region"),
    Var("AWS_ENDPOINT_URL", "S3 endpoint URL"),
    Var("LLMKUBE_CA_DIR", "extra CA certificates, added to the system roots"),
    Var("LLMKUBE_HOST_MODEL", "host-path model file for local sources"),
    Var(
        "LLMKUBE_ALLOWED_HOST_ROOTS",
        "colon-separated roots a local source must lie in (unset: no restriction)",
    ),
    Var("LLMKUBE_TERMINATION_LOG", "termination message path"),
    Var("PROGRESS_INTERVAL", "seconds between progress lines"),
    Var("LLMKUBE_LOG_FORMAT", "text (default) or json"),
    Var("LLMKUBE_CONNECT_TIMEOUT", "seconds to establish a connection"),
    Var("LLMKUBE_STALL_TIMEOUT", "seconds without a received byte before an attempt is retried"),
    Var("LLMKUBE_RETRIES", "attempts per request after the first, for transient failures"),
    Var("LLMKUBE_MAX_RETRY_WAIT", "longest single wait between attempts, Retry-After included"),
    Var("LLMKUBE_LOCK_TIMEOUT", "seconds a writer waits for the cache lock"),
    Var("LLMKUBE_CONNECTIONS", "parallel ranged connections per large file (1 disables)"),
    Var(
        "LLMKUBE_DIRECT_IO",
        "auto (default: the page cache while the model fits memory, then O_DIRECT on "
        "ext4/xfs/btrfs), on (O_DIRECT there always) or off (always the page cache)",
    ),
    # Credentials in a proxy URL are secrets (proxy.py); the lowercase
    # spellings are read too and win, as in curl.
    Var("HTTPS_PROXY", "http:// proxy for https origins (also https_proxy)", secret=True),
    Var("HTTP_PROXY", "http:// proxy for http origins (also http_proxy)", secret=True),
    Var("NO_PROXY", "hosts, domains, IPs or CIDRs that go direct (also no_proxy)"),
)

SECRET_VARS: tuple[str, ...] = tuple(v.env for v in VARS if v.secret)


@dataclass(frozen=True)
class Timeouts:
    connect_s: float = 10.0
    stall_s: float = 60.0
    retries: int = 5
    max_retry_wait_s: float = 60.0
    lock_s: float = 3600.0


@dataclass(frozen=True)
class Secrets:
    """Credential values. `repr` never shows them."""

    hf_token: str = field(default="", repr=False)
    aws_access_key_id: str = field(default="", repr=False)
    aws_secret_access_key: str = field(default="", repr=False)
    aws_session_token: str = field(default="", repr=False)

    def values(self) -> tuple[str, ...]:
        return tuple(
            v
            for v in (
                self.hf_token,
                self.aws_access_key_id,
                self.aws_secret_access_key,
                self.aws_session_token,
            )
            if v
        )


@dataclass(frozen=True)
class Config:
    source: str
    cache_dir: str
    model_path: str
    model_files: tuple[str, ...]
    refresh_policy: RefreshPolicy = "IfNotPresent"
    prefetch_stager: bool = False
    # sha256 pins by relative path (single-file: the basename of MODEL_PATH).
    pins: Mapping[str, str] = field(default_factory=dict)
    s3_bucket: str = ""
    s3_key: str = ""
    s3_prefix: str = ""
    hf_endpoint: str = ""
    aws_region: str = ""
    aws_endpoint_url: str = ""
    ca_dir: str = "/custom-certs"
    host_model: str = "/host-model/model.gguf"
    allowed_host_roots: tuple[str, ...] = ()
    termination_log: str = "/dev/termination-log"
    progress_interval_s: float = 10.0
    connections: int = DEFAULT_CONNECTIONS
    direct_io: bool = True  # "auto"/"on": still only where FsInfo.direct_io_ok
    direct_io_auto: bool = True  # "auto": files that fit memory go through the page cache
    proxy: ProxySettings = field(default_factory=ProxySettings)
    log_format: LogFormat = "text"
    timeouts: Timeouts = Timeouts()
    secrets: Secrets = Secrets()

    @property
    def multi_file(self) -> bool:
        return bool(self.model_files)


class _Reader:
    """Looks a variable up: flag first, then environment, then default."""

    def __init__(self, environ: Mapping[str, str], flags: Mapping[str, str | None]) -> None:
        self._environ = environ
        self._flags = flags

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

    def raw(self, name: str, default: str = "") -> str:
        flagged = self._flags.get(name)
        if flagged is not None:
            return flagged
        return self._environ.get(name, default)

    def number(self, name: str, default: float, *, minimum: float = 0.0) -> float:
        text = self.raw(name).strip()
        if not text:
            return default
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{name} must be a number of seconds, got {text!r}") from None
        if not math.isfinite(value) or value <= minimum:
            raise ConfigError(f"{name} must be a finite number above {minimum:g}, got {text!r}")
        return value

    def count(self, name: str, default: int) -> int:
        text = self.raw(name).strip()
        if not text:
            return default
        if not (text.isascii() and text.isdigit()):
            raise ConfigError(f"{name} must be a whole number >= 0, got {text!r}")
        return int(text)

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        text = self.raw(name).strip()
        if not text:
            return default
        for choice in choices:
            if text.lower() == choice.lower():
                return choice
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {text!r}")

    def boolean(self, name: str) -> bool:
        text = self.raw(name).strip().lower()
        if text in ("", "false", "0", "no"):
            return False
        if text in ("true", "1", "yes"):
            return True
        raise ConfigError(f"{name} must be true or false, got {text!r}")


def load_timeouts(read: _Reader) -> Timeouts:
    return Timeouts(
        connect_s=read.number("LLMKUBE_CONNECT_TIMEOUT", 10.0),
        stall_s=read.number("LLMKUBE_STALL_TIMEOUT", 60.0),
        retries=read.count("LLMKUBE_RETRIES", 5),
        max_retry_wait_s=read.number("LLMKUBE_MAX_RETRY_WAIT", 60.0),
        lock_s=read.number("LLMKUBE_LOCK_TIMEOUT", 3600.0),
    )


def load_secrets(read: _Reader) -> Secrets:
    return Secrets(
        hf_token=read.raw("HF_TOKEN").strip(),
        aws_access_key_id=read.raw("AWS_ACCESS_KEY_ID").strip(),
        aws_secret_access_key=read.raw("AWS_SECRET_ACCESS_KEY").strip(),
        aws_session_token=read.raw("AWS_SESSION_TOKEN").strip(),
    )


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
    variable counts whole (it may be unparseable) and by its credentials."""
    read = _Reader(environ, flags)
    values = list(load_secrets(read).values())
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


def _layout_paths(read: _Reader, source: str) -> tuple[str, str, tuple[str, ...]]:
    """CACHE_DIR, MODEL_PATH and the validated file list, with the mode rules."""
    cache_dir = read.raw("CACHE_DIR").strip()
    model_path = read.raw("MODEL_PATH").strip()
    if not model_path and source.lower().startswith("pvc://"):
        # pvc:// is verified where the claim is mounted (spec §3.5).
        claim_path = source.split("/", 3)[3] if source.count("/") >= 3 else ""
        model_path = posixpath.join("/model-source", claim_path) if claim_path else ""
    files = parse_file_list(read.raw("MODEL_FILES"))
    if files and model_path:
        raise ConfigError("set MODEL_FILES (multi-file) or MODEL_PATH (single-file), not both")
    if files and not cache_dir:
        raise ConfigError("CACHE_DIR is required with MODEL_FILES")
    if not files and not model_path:
        raise ConfigError("MODEL_PATH (single-file) or MODEL_FILES (multi-file) is required")
    for name, path in (("CACHE_DIR", cache_dir), ("MODEL_PATH", model_path)):
        if path and not path.startswith("/"):
            raise ConfigError(f"{name} must be an absolute path, got {path!r}")
    return cache_dir, model_path, files


def load_config(
    environ: Mapping[str, str],
    flags: Mapping[str, str | None],
    *,
    require_source: bool = True,
) -> Config:
    """Parse everything once. Raises ConfigError / InvalidFileSet."""
    read = _Reader(environ, flags)
    source = read.raw("MODEL_SOURCE").strip()
    if not source and require_source:
        raise ConfigError("MODEL_SOURCE is required")
    cache_dir, model_path, files = _layout_paths(read, source)
    return Config(
        source=source,
        cache_dir=cache_dir,
        model_path=model_path,
        model_files=files,
        refresh_policy=_policy(read),
        prefetch_stager=read.boolean("LLMKUBE_PREFETCH_STAGER"),
        pins=_pins(read, model_path, files),
        s3_bucket=read.raw("S3_BUCKET").strip(),
        s3_key=read.raw("S3_KEY").strip(),
        s3_prefix=read.raw("S3_PREFIX").strip(),
        # Trimmed like the controller's hfEndpointFromSecret (scenario 90).
        hf_endpoint=read.raw("HF_ENDPOINT").strip(),
        aws_region=read.raw("AWS_REGION").strip(),
        aws_endpoint_url=read.raw("AWS_ENDPOINT_URL").strip(),
        ca_dir=read.raw("LLMKUBE_CA_DIR", "/custom-certs").strip(),
        host_model=read.raw("LLMKUBE_HOST_MODEL", "/host-model/model.gguf").strip(),
        allowed_host_roots=tuple(
            r for r in read.raw("LLMKUBE_ALLOWED_HOST_ROOTS").split(":") if r.strip()
        ),
        termination_log=read.raw("LLMKUBE_TERMINATION_LOG", "/dev/termination-log").strip(),
        progress_interval_s=read.number("PROGRESS_INTERVAL", 10.0),
        connections=_connections(read),
        direct_io=read.choice("LLMKUBE_DIRECT_IO", ("auto", "on", "off"), "auto") != "off",
        direct_io_auto=read.choice("LLMKUBE_DIRECT_IO", ("auto", "on", "off"), "auto") == "auto",
        proxy=load_proxy(read),
        log_format=_log_format(read),
        timeouts=load_timeouts(read),
        secrets=load_secrets(read),
    )


def _connections(read: _Reader) -> int:
    value = read.count("LLMKUBE_CONNECTIONS", DEFAULT_CONNECTIONS)
    if not 1 <= value <= MAX_CONNECTIONS:
        raise ConfigError(f"LLMKUBE_CONNECTIONS must be between 1 and {MAX_CONNECTIONS}")
    return value


def _policy(read: _Reader) -> RefreshPolicy:
    value = read.choice("LLMKUBE_REFRESH_POLICY", ("IfNotPresent", "OnChange"), "IfNotPresent")
    return "OnChange" if value == "OnChange" else "IfNotPresent"


def _log_format(read: _Reader) -> LogFormat:
    return (
        "json" if read.choice("LLMKUBE_LOG_FORMAT", ("text", "json"), "text") == "json" else "text"
    )


def early_settings(
    environ: Mapping[str, str], flags: Mapping[str, str | None]
) -> tuple[LogFormat, str]:
    """Log format and termination path, read leniently so that even an invalid
    configuration is reported in the right format at the right place."""
    read = _Reader(environ, flags)
    fmt = read.raw("LLMKUBE_LOG_FORMAT").strip().lower()
    path = read.raw("LLMKUBE_TERMINATION_LOG", "/dev/termination-log").strip()
    return ("json" if fmt == "json" else "text"), path
