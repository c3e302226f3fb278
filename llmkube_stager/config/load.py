"""The assembly: `load_config` checks what must hold first, places the
model's files, then builds `Config` one field a line (`_assemble`: a new
variable adds its line there); and the lenient reads that must work even
when the rest is invalid (`secret_values`, `early_settings`,
`inspect_target`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from llmkube_stager.config import paths, rules
from llmkube_stager.config.anchor import TrustAnchor, trust_anchor
from llmkube_stager.config.kserve_env import STORAGE_SPEC_VARS, storage_spec
from llmkube_stager.config.reader import Reader
from llmkube_stager.config.settings import LOG_FORMATS, LOG_LEVELS, Config, LogFormat
from llmkube_stager.config.variables import DEFAULTS
from llmkube_stager.logs import Level
from llmkube_stager.proxy import ProxyConfigError, parse_proxy


def load_config(
    environ: Mapping[str, str],
    flags: Mapping[str, str | None],
    *,
    require_source: bool = True,
    cwd: str | None = None,
) -> Config:
    """Parse everything once. Raises ConfigError / InvalidFileSet. Relative
    CACHE_DIR / MODEL_PATH are taken from `cwd` (default: the process's)."""
    read = Reader(environ, flags)
    source = rules.checked_source(read, environ, require_source=require_source)
    cache_dir, model_path, files = paths.layout_paths(read, source, cwd)
    pins = paths.model_pins(read, cache_dir, model_path, files)
    rules.warn_unverified_s3(read)
    return _assemble(read, source, cache_dir, model_path, files, pins)


def _assemble(
    read: Reader,
    source: str,
    cache_dir: str,
    model_path: str,
    files: tuple[str, ...],
    pins: Mapping[str, str],
) -> Config:
    """One field a line, read in this order (the first bad value is the
    one reported; the warnings keep this order)."""
    return Config(
        source=source,
        cache_dir=cache_dir,
        model_path=model_path,
        model_files=files,
        listed=not files and not model_path,
        kserve_mode=False,  # no variable: kserve/command.py sets it (#31 item 4)
        refresh_policy=rules.policy(read),
        prefetch_stager=rules.prefetch_stager(read),
        pins=pins,
        s3_bucket=read.raw("S3_BUCKET").strip(),
        s3_key=read.raw("S3_KEY").strip(),
        s3_prefix=read.raw("S3_PREFIX").strip(),
        # Trimmed like the controller's hfEndpointFromSecret (scenario 90).
        hf_endpoint=read.raw("HF_ENDPOINT").strip(),
        aws_region=read.raw("AWS_REGION").strip(),
        aws_endpoint_url=read.raw("AWS_ENDPOINT_URL").strip(),
        aws_env=rules.load_aws_env(read),
        gcs_credentials_file=read.raw("GOOGLE_APPLICATION_CREDENTIALS").strip(),
        gcs_emulator_host=read.raw("STORAGE_EMULATOR_HOST").strip(),
        gcs_api_endpoint=read.raw("API_ENDPOINT_OVERRIDE").strip(),
        gcs_metadata_host=read.text("GCE_METADATA_HOST"),
        gcs_metadata_ip=read.text("GCE_METADATA_IP"),
        azure_env=rules.load_azure_env(read),
        oci_docker_config=(
            read.raw("LLMKUBE_OCI_DOCKER_CONFIG").strip()
            or read.raw("KSERVE_OCI_DOCKER_CONFIG").strip()
            or read.raw("DOCKER_CONFIG").strip()
        ),
        oci_platform=read.text("LLMKUBE_OCI_PLATFORM"),
        ca_dir=rules.ca_dir(read),
        host_model=paths.abs_path(read, "LLMKUBE_HOST_MODEL"),
        allowed_host_roots=paths.allowed_roots(read),
        termination_log=paths.abs_path(read, "LLMKUBE_TERMINATION_LOG"),
        remedy_words=read.choice("LLMKUBE_REMEDY_WORDS", ("variables", "operator")),
        progress_interval_s=read.interval("PROGRESS_INTERVAL"),
        connections=rules.connections(read),
        files_in_flight=rules.files_in_flight(read),
        **rules.shards(read),
        job_id=rules.job_id(read),
        direct_io_mode=rules.direct_io_mode(read),
        proxy=rules.load_proxy(read),
        mirror=rules.mirror(read),
        allow_patterns=rules.patterns(read, "STORAGE_ALLOW_PATTERNS"),
        ignore_patterns=rules.patterns(read, "STORAGE_IGNORE_PATTERNS"),
        archive_max_bytes=rules.positive(read, "LLMKUBE_ARCHIVE_MAX_BYTES"),
        archive_max_files=rules.positive(read, "LLMKUBE_ARCHIVE_MAX_FILES"),
        log_format=rules.log_format(read),
        log_level=rules.log_level(read),
        timeouts=rules.load_timeouts(read),
        secrets=rules.load_secrets(read),
        signing=_signing(read),
        warnings=tuple(read.warnings),
    )


def _signing(read: Reader) -> TrustAnchor | None:
    """#34 item 1 (config/anchor.py). LLMKUBE_SIGNATURE's default is read
    only when an anchor is set."""
    signature = read.optional("LLMKUBE_SIGNATURE") or ""
    key, certs = read.raw("LLMKUBE_SIGNING_KEY"), read.raw("LLMKUBE_SIGNING_CERTS")
    pin = read.raw("LLMKUBE_SIGNED_DIGEST")
    anchor = trust_anchor(key, certs, signature, pin)
    if anchor is None and signature.strip():
        # A bundle nobody verifies must not look like protection.
        read.warnings.append(
            "LLMKUBE_SIGNATURE is set without LLMKUBE_SIGNING_KEY or LLMKUBE_SIGNING_CERTS: "
            "no signature is verified"
        )
    return anchor


def secret_values(environ: Mapping[str, str], flags: Mapping[str, str | None]) -> tuple[str, ...]:
    """Secret values, readable even when the rest of the config is invalid,
    so that the redactor exists before any error can be printed. A proxy
    variable counts whole (it may be unparseable) and by its credentials.
    Read as given: a key that awsAnonymousCredential drops is still a secret."""
    read = Reader(environ, flags, kserve=False)
    values = list(rules.load_secrets(read).values())
    # KServe's storage spec: whole (it may be unparseable) and by its keys.
    values += [environ.get(name, "").strip() for name in STORAGE_SPEC_VARS]
    spec = storage_spec(environ)
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


def early_settings(
    environ: Mapping[str, str], flags: Mapping[str, str | None]
) -> tuple[LogFormat, str]:
    """Log format and termination path, read leniently so that even an invalid
    configuration is reported in the right format at the right place."""
    read = Reader(environ, flags)
    default = LOG_FORMATS[DEFAULTS["LLMKUBE_LOG_FORMAT"]]
    fmt = LOG_FORMATS.get(read.text("LLMKUBE_LOG_FORMAT").lower(), default)
    path = read.raw("LLMKUBE_TERMINATION_LOG").strip()
    # A relative path would land in the working directory: none is written
    # (load_config refuses it; the log still says why).
    return fmt, path if path.startswith("/") else ""


def early_log_level(environ: Mapping[str, str], flags: Mapping[str, str | None]) -> Level:
    """The lowest level logged, read leniently as `early_settings` reads the
    format (load_config refuses a bad value; the log says so at info)."""
    default = LOG_LEVELS[DEFAULTS["LLMKUBE_LOG_LEVEL"]]
    return LOG_LEVELS.get(Reader(environ, flags).text("LLMKUBE_LOG_LEVEL").lower(), default)


def remedy_words(
    environ: Mapping[str, str], flags: Mapping[str, str | None]
) -> Literal["operator", "variables"]:
    """Whose words a failure's remedy uses (words.py), read leniently like
    `early_settings`: only `operator` asks for the operator's constants."""
    given = Reader(environ, flags).text("LLMKUBE_REMEDY_WORDS").strip().lower()
    return "operator" if given == "operator" else "variables"


def inspect_target(environ: Mapping[str, str], given: str | None) -> str:
    """The directory `inspect` reports: its argument, else CACHE_DIR as set
    (nothing else of the configuration needs to be valid for it)."""
    return given or Reader(environ, {}, kserve=False).raw("CACHE_DIR")
