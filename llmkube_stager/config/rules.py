"""Each variable's rule: what a value must be, what a tolerated one means
(#14), and the groups read together (timeouts, secrets, the AWS settings,
the proxy). Paths and the model's files have theirs in paths.py."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from llmkube_stager.config.kserve_env import storage_spec_docs
from llmkube_stager.config.reader import Reader, shown
from llmkube_stager.config.settings import (
    DIRECT_IO_MODES,
    LOG_FORMATS,
    LOG_LEVELS,
    MAX_CONNECTIONS,
    MAX_FILES_IN_FLIGHT,
    MAX_SHARDS,
    POLICIES,
    DirectIoMode,
    LogFormat,
    MirrorSettings,
    RefreshPolicy,
    Secrets,
    Timeouts,
)
from llmkube_stager.config.variables import AWS_ENV_VARS, AZURE_ENV_VARS, DEFAULTS
from llmkube_stager.errors import ConfigError
from llmkube_stager.logs import Level, display_url
from llmkube_stager.proxy import ProxyConfigError, ProxySettings, parse_no_proxy, parse_proxy

# URLs longer than this are refused by most servers and by httpx (64 KiB):
# a configuration mistake, not a transfer to attempt.
URL_MAX_BYTES = 8192
_URL_VARS = (
    "MODEL_SOURCE",
    "HF_ENDPOINT",
    "AWS_ENDPOINT_URL",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "LLMKUBE_MIRROR",
    "LLMKUBE_MIRROR_ENDPOINT",
)
# Secrets the agent sends as an HTTP header value (Authorization: Bearer).
_HEADER_SECRETS = ("HF_TOKEN",)


def checked_source(read: Reader, environ: Mapping[str, str], *, require_source: bool) -> str:
    """MODEL_SOURCE, after what must hold before anything else is read: a
    storage spec that parses, URLs of a sendable length, a source that
    parses as a URL, header secrets that a header can carry."""
    _, bad_spec = storage_spec_docs(environ)
    if bad_spec is not None:
        raise ConfigError(f"{bad_spec} (KServe's storage spec) is not a JSON object")
    _check_url_lengths(read)
    source = read.raw("MODEL_SOURCE").strip()
    if not source and require_source:
        raise ConfigError("MODEL_SOURCE is required")
    _check_source_text(source)
    _check_header_secrets(read)
    return source


def _check_source_text(source: str) -> None:
    """Whatever its scheme, MODEL_SOURCE must be one line that parses as a
    URL (a port too): the sources then never meet a ValueError."""
    from urllib.parse import urlsplit

    # Shown without userinfo, query or fragment: they may be credentials
    # or a signature (review: the whole value up to 78 characters was shown).
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in source):
        raise ConfigError(
            f"MODEL_SOURCE contains a control character: {shown(display_url(source))}"
        )
    try:
        _ = urlsplit(source).port
    except ValueError:
        raise ConfigError(
            f"MODEL_SOURCE is not a well-formed URL or path: {shown(display_url(source))}"
        ) from None


def _check_header_secrets(read: Reader) -> None:
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


def _check_url_lengths(read: Reader) -> None:
    """Named, never shown: a proxy URL may carry a password."""
    for name in _URL_VARS:
        size = max(len(read.raw(name).encode()), len(read.curl_style(name).encode()))
        if size > URL_MAX_BYTES:
            raise ConfigError(
                f"{name} is {size} bytes long: a URL may have at most {URL_MAX_BYTES}"
            )


def warn_unverified_s3(read: Reader) -> None:
    """KServe's S3_VERIFY_SSL=0 is not honoured: TLS is always verified."""
    if read.raw("S3_VERIFY_SSL").strip().lower() in ("0", "false"):
        read.warnings.append(
            "S3_VERIFY_SSL is off, but TLS is verified here all the same: give the endpoint's "
            "CA with AWS_CA_BUNDLE or LLMKUBE_CA_DIR"
        )


def prefetch_stager(read: Reader) -> bool:
    """A stager only for exactly `true` (the scripts' `= true` test): a
    serving pod taken for a stager would write on FUSE, which spec §9.3
    forbids, so `True`, `1` or `yes` mean a serving pod, with a warning."""
    value = read.raw("LLMKUBE_PREFETCH_STAGER")
    if value not in ("", "true", "false"):
        meaning = "this pod is a serving pod (a stager needs exactly 'true')"
        read.tolerated("LLMKUBE_PREFETCH_STAGER", value, meaning)
    return value == "true"


def patterns(read: Reader, name: str) -> tuple[str, ...]:
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


def positive(read: Reader, name: str) -> int:
    value = read.count(name)
    if value < 1:
        raise ConfigError(f"{name} must be at least 1")
    return value


def connections(read: Reader) -> int:
    value = read.count("LLMKUBE_CONNECTIONS")
    if not 1 <= value <= MAX_CONNECTIONS:
        raise ConfigError(f"LLMKUBE_CONNECTIONS must be between 1 and {MAX_CONNECTIONS}")
    return value


def files_in_flight(read: Reader) -> int:
    value = read.count("LLMKUBE_FILES_IN_FLIGHT")
    if not 1 <= value <= MAX_FILES_IN_FLIGHT:
        raise ConfigError(f"LLMKUBE_FILES_IN_FLIGHT must be between 1 and {MAX_FILES_IN_FLIGHT}")
    return value


def shards(read: Reader) -> dict[str, int]:
    """LLMKUBE_SHARDS and the Indexed Job's JOB_COMPLETION_INDEX. Without
    LLMKUBE_SHARDS the index is ignored (an Indexed Job that does not shard).
    Only a prefetch stager shards: a serving pod that staged a share would
    start its server on part of a model."""
    count = read.count("LLMKUBE_SHARDS")
    if not 1 <= count <= MAX_SHARDS:
        raise ConfigError(f"LLMKUBE_SHARDS must be between 1 and {MAX_SHARDS}")
    if count == 1:
        return {"shards": 1, "shard_index": 0}
    if not read.raw("JOB_COMPLETION_INDEX").strip():
        raise ConfigError(
            "LLMKUBE_SHARDS needs JOB_COMPLETION_INDEX (set by a Job with completionMode: Indexed)"
        )
    index = read.count("JOB_COMPLETION_INDEX")
    if index >= count:
        raise ConfigError(
            f"JOB_COMPLETION_INDEX {index} is not a share of LLMKUBE_SHARDS={count} "
            "(completions must equal LLMKUBE_SHARDS)"
        )
    if read.raw("LLMKUBE_PREFETCH_STAGER") != "true":  # as prefetch_stager reads it
        raise ConfigError(
            "LLMKUBE_SHARDS is for prefetch Jobs (LLMKUBE_PREFETCH_STAGER=true): a serving "
            "pod must stage the whole model"
        )
    return {"shards": count, "shard_index": index}


_JOB_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", re.ASCII)


def job_id(read: Reader) -> str:
    """LLMKUBE_JOB_ID: a Job's uid or name as its labels carry them (a
    label value: letters, digits, `-`, `_`, `.`); it is written into the
    commit claim and logged, so nothing else is taken (#29 item 6)."""
    text = read.raw("LLMKUBE_JOB_ID").strip()
    if text and not _JOB_ID_RE.fullmatch(text):
        raise ConfigError(
            "LLMKUBE_JOB_ID must be the Job's batch.kubernetes.io/controller-uid (or job-name) "
            f"label: letters, digits, '-', '_' and '.', at most 253, got {shown(text)}"
        )
    return text


def policy(read: Reader) -> RefreshPolicy:
    """The default (IfNotPresent, the CRD's: spec §5.2) for anything but
    OnChange."""
    text = read.text("LLMKUBE_REFRESH_POLICY")
    found = POLICIES.get(text.lower())
    if found is None:
        default = DEFAULTS["LLMKUBE_REFRESH_POLICY"]
        read.tolerated("LLMKUBE_REFRESH_POLICY", text, f"using {default} (the CRD default)")
        return POLICIES[default.lower()]
    return found


def direct_io_mode(read: Reader) -> DirectIoMode:
    return DIRECT_IO_MODES[read.choice("LLMKUBE_DIRECT_IO", tuple(DIRECT_IO_MODES))]


def log_format(read: Reader) -> LogFormat:
    return LOG_FORMATS[read.choice("LLMKUBE_LOG_FORMAT", tuple(LOG_FORMATS))]


def log_level(read: Reader) -> Level:
    return LOG_LEVELS[read.choice("LLMKUBE_LOG_LEVEL", tuple(LOG_LEVELS))]


def load_timeouts(read: Reader) -> Timeouts:
    return Timeouts(
        connect_s=read.number("LLMKUBE_CONNECT_TIMEOUT"),
        stall_s=read.number("LLMKUBE_STALL_TIMEOUT"),
        retries=read.count("LLMKUBE_RETRIES"),
        max_retry_wait_s=read.number("LLMKUBE_MAX_RETRY_WAIT"),
        lock_s=read.number("LLMKUBE_LOCK_TIMEOUT"),
    )


def load_secrets(read: Reader) -> Secrets:
    return Secrets(
        hf_token=read.raw("HF_TOKEN").strip(),
        aws_access_key_id=read.raw("AWS_ACCESS_KEY_ID").strip(),
        aws_secret_access_key=read.raw("AWS_SECRET_ACCESS_KEY").strip(),
        aws_session_token=read.raw("AWS_SESSION_TOKEN").strip(),
        aws_container_authorization_token=read.raw("AWS_CONTAINER_AUTHORIZATION_TOKEN").strip(),
        azure=azure_secrets(read),
        mirror=tuple(
            read.raw(name).strip()
            for name in ("LLMKUBE_MIRROR_ACCESS_KEY_ID", "LLMKUBE_MIRROR_SECRET_ACCESS_KEY")
        ),
    )


def azure_secrets(read: Reader) -> tuple[str, ...]:
    """Azure's secret values (#33 item 2), whole and, for the connection
    string, by its AccountKey and SharedAccessSignature (and that SAS's
    signature), so that a part shown alone is redacted too."""
    values = [
        read.raw(name).strip()
        for name in (
            "AZURE_STORAGE_ACCESS_KEY",
            "AZURE_CLIENT_SECRET",
            "AZ_CLIENT_SECRET",
            "AZURE_STORAGE_CONNECTION_STRING",
        )
    ]
    pieces = len(values)
    for piece in read.raw("AZURE_STORAGE_CONNECTION_STRING").split(";"):
        name, _, value = piece.partition("=")
        if name.strip().lower() in ("accountkey", "sharedaccesssignature"):
            values.append(value.strip())
    from urllib.parse import unquote

    sources = (read.raw("AZURE_STORAGE_ACCESS_KEY"), read.raw("MODEL_SOURCE"), *values[pieces:])
    values.append(read.raw("AZURE_CLIENT_CERTIFICATE_PASSWORD").strip())  # #41 item 3
    values.append(read.raw("IDENTITY_HEADER").strip())
    for text in sources:
        for part in text.replace("?", "&").replace(";", "&").split("&"):
            if part.startswith("sig="):
                values += [part[4:], unquote(part[4:])]
    return tuple(v for v in values if v)


def load_azure_env(read: Reader) -> Mapping[str, str]:
    """The Azure settings that were given, flags winning, blank ones dropped."""
    given = {name: read.raw(name).strip() for name in AZURE_ENV_VARS}
    return {name: value for name, value in given.items() if value}


def load_aws_env(read: Reader) -> Mapping[str, str]:
    """The AWS settings that were given, flags winning, blank ones dropped."""
    given = {name: read.raw(name).strip() for name in AWS_ENV_VARS}
    return {name: value for name, value in given.items() if value}


def load_proxy(read: Reader) -> ProxySettings:
    try:
        return ProxySettings(
            https=parse_proxy(read.curl_style("HTTPS_PROXY"), "HTTPS_PROXY"),
            http=parse_proxy(read.curl_style("HTTP_PROXY"), "HTTP_PROXY"),
            no_proxy=parse_no_proxy(read.curl_style("NO_PROXY")),
        )
    except ProxyConfigError as exc:
        raise ConfigError(str(exc)) from None


def ca_dir(read: Reader) -> str:
    """LLMKUBE_CA_DIR. A directory set but not there (a ConfigMap not
    mounted, a typo) is named: it used to be silent, and the first TLS
    failure then blamed the origin's certificate (#46 item 4). The default
    is not: /custom-certs is mounted only with --ca-cert-configmap."""
    path = read.raw("LLMKUBE_CA_DIR").strip()
    if path and path != DEFAULTS["LLMKUBE_CA_DIR"] and not os.path.isdir(path):
        read.warnings.append(
            f"LLMKUBE_CA_DIR is {shown(path)}, and there is no such directory: only the "
            "system's CA certificates are trusted"
        )
    return path


_HTTP_URL_RE = re.compile(r"https?://[^/?#@\s]+(/[^?#\s]*)?", re.IGNORECASE)
_S3_MIRROR_RE = re.compile(r"s3://[A-Za-z0-9._-]{1,255}(/[^\s]*)?", re.IGNORECASE)


def mirror(read: Reader) -> MirrorSettings | None:
    """LLMKUBE_MIRROR and its companions (docs/mirror.md); None when unset.
    A mirror URL carries no credentials (they have their own variables)."""
    url = read.raw("LLMKUBE_MIRROR").strip()
    only, publish = _flag(read, "LLMKUBE_MIRROR_ONLY"), _flag(read, "LLMKUBE_MIRROR_PUBLISH")
    if not url:
        if only or publish:
            given = "LLMKUBE_MIRROR_ONLY" if only else "LLMKUBE_MIRROR_PUBLISH"
            read.warnings.append(f"{given} is set without LLMKUBE_MIRROR: there is no mirror")
        return None
    is_s3 = _S3_MIRROR_RE.fullmatch(url) is not None
    if not is_s3 and _HTTP_URL_RE.fullmatch(url) is None:
        raise ConfigError(
            "LLMKUBE_MIRROR must be s3://bucket/prefix or an http(s):// base URL without "
            "credentials, query or fragment"
        )
    if publish and not is_s3:
        raise ConfigError(
            "LLMKUBE_MIRROR_PUBLISH needs an s3:// mirror (an http(s) one is read-only)"
        )
    if not is_s3 and not url.endswith("/"):
        url += "/"
    key_id = read.raw("LLMKUBE_MIRROR_ACCESS_KEY_ID").strip()
    secret = read.raw("LLMKUBE_MIRROR_SECRET_ACCESS_KEY").strip()
    if bool(key_id) != bool(secret):
        raise ConfigError(
            "LLMKUBE_MIRROR_ACCESS_KEY_ID and LLMKUBE_MIRROR_SECRET_ACCESS_KEY go together: "
            "set both or neither"
        )
    endpoint = read.raw("LLMKUBE_MIRROR_ENDPOINT").strip()
    if endpoint and _HTTP_URL_RE.fullmatch(endpoint) is None:
        raise ConfigError(
            "LLMKUBE_MIRROR_ENDPOINT must be scheme://host[:port], without credentials"
        )
    return MirrorSettings(
        url=url,
        endpoint_url=endpoint,
        access_key_id=key_id,
        secret_access_key=secret,
        region=read.raw("LLMKUBE_MIRROR_REGION").strip(),
        only=only,
        publish=publish,
    )


def _flag(read: Reader, name: str) -> bool:
    value = read.raw(name).strip().lower()
    if value not in ("", "true", "false"):
        raise ConfigError(f"{name} must be true or false, got {shown(value)}")
    return value == "true"
