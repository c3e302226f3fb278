"""The value types: the frozen `Config` the assembly (load.py) builds, its
`Timeouts` and `Secrets`, the values a choice may take and the bounds of
the counts. Every default comes from the variable table (variables.py).

Each class has a docstring: without one, dataclass builds one from the
class's signature, which cost a warm start 0.6 ms for Config and Timeouts
(#32 item 2)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from llmkube_stager.config.anchor import TrustAnchor
from llmkube_stager.config.variables import DEFAULTS
from llmkube_stager.logs import Level
from llmkube_stager.proxy import ProxySettings

RefreshPolicy = Literal["IfNotPresent", "OnChange"]
POLICIES: dict[str, RefreshPolicy] = {"ifnotpresent": "IfNotPresent", "onchange": "OnChange"}
MAX_CONNECTIONS = 32
MAX_FILES_IN_FLIGHT = 64
MAX_SHARDS = 10_000
LogFormat = Literal["text", "json"]
LOG_FORMATS: dict[str, LogFormat] = {"text": "text", "json": "json"}
LOG_LEVELS: dict[str, Level] = {
    "debug": "debug",
    "info": "info",
    "warning": "warning",
    "error": "error",
}
DirectIoMode = Literal["auto", "on", "off"]
DIRECT_IO_MODES: dict[str, DirectIoMode] = {"auto": "auto", "on": "on", "off": "off"}


@dataclass(frozen=True)
class Timeouts:
    """The waits and attempts of every request and of the cache lock."""

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
    # Azure (#33 item 2): the key, the client secret, the connection string
    # and the key or SAS inside it.
    azure: tuple[str, ...] = field(default=(), repr=False)
    # The mirror's own keys (docs/mirror.md).
    mirror: tuple[str, ...] = field(default=(), repr=False)

    def values(self) -> tuple[str, ...]:
        return tuple(
            v
            for v in (
                self.hf_token,
                self.aws_access_key_id,
                self.aws_secret_access_key,
                self.aws_session_token,
                self.aws_container_authorization_token,
                *self.azure,
                *self.mirror,
            )
            if v
        )


@dataclass(frozen=True)
class MirrorSettings:
    """LLMKUBE_MIRROR and its companions (docs/mirror.md): where a cluster
    keeps one copy of each model version, and whether this pod seeds it."""

    url: str  # s3://bucket/prefix, or an http(s):// base ending in "/"
    endpoint_url: str = ""
    access_key_id: str = field(default="", repr=False)
    secret_access_key: str = field(default="", repr=False)
    region: str = ""
    only: bool = False  # air-gapped: the origin is never asked
    publish: bool = False  # this pod uploads what it staged and verified

    @property
    def is_s3(self) -> bool:
        return self.url[:5].lower() == "s3://"


@dataclass(frozen=True)
class Config:
    """The whole configuration of a run, parsed once (load.py); every
    default from the variable table."""

    source: str
    cache_dir: str
    model_path: str
    model_files: tuple[str, ...]
    refresh_policy: RefreshPolicy = POLICIES[DEFAULTS["LLMKUBE_REFRESH_POLICY"].lower()]
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
    # gs:// (#33 item 1): GOOGLE_APPLICATION_CREDENTIALS (a path) and
    # STORAGE_EMULATOR_HOST, as given.
    gcs_credentials_file: str = ""
    gcs_emulator_host: str = ""
    # API_ENDPOINT_OVERRIDE: a custom endpoint sent the credentials, unlike
    # the emulator (google-cloud-storage's; #33 review item 5).
    gcs_api_endpoint: str = ""
    gcs_metadata_host: str = DEFAULTS["GCE_METADATA_HOST"]
    gcs_metadata_ip: str = DEFAULTS["GCE_METADATA_IP"]
    # oci:// (#43): the docker config.json (a file or its directory) and
    # the platform an index is resolved to.
    oci_docker_config: str = ""
    oci_platform: str = DEFAULTS["LLMKUBE_OCI_PLATFORM"]
    # The AZURE_*/AZ_* settings that were given: the Azure source's (#33 item 2).
    azure_env: Mapping[str, str] = field(default_factory=dict, repr=False)
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
    direct_io_mode: DirectIoMode = DIRECT_IO_MODES[DEFAULTS["LLMKUBE_DIRECT_IO"]]
    proxy: ProxySettings = field(default_factory=ProxySettings)
    # LLMKUBE_MIRROR (docs/mirror.md); None: every file from the origin.
    mirror: MirrorSettings | None = None
    # KServe's STORAGE_ALLOW_PATTERNS / STORAGE_IGNORE_PATTERNS: fnmatch
    # filters of a listed source's relative paths (#24 item 3, staging/listed.py).
    allow_patterns: tuple[str, ...] = ()
    ignore_patterns: tuple[str, ...] = ()
    archive_max_bytes: int = int(DEFAULTS["LLMKUBE_ARCHIVE_MAX_BYTES"])
    archive_max_files: int = int(DEFAULTS["LLMKUBE_ARCHIVE_MAX_FILES"])
    log_format: LogFormat = LOG_FORMATS[DEFAULTS["LLMKUBE_LOG_FORMAT"]]
    log_level: Level = LOG_LEVELS[DEFAULTS["LLMKUBE_LOG_LEVEL"]]
    timeouts: Timeouts = Timeouts()
    secrets: Secrets = Secrets()
    # #34: the trust anchor a signed model must verify against (None: unsigned).
    signing: TrustAnchor | None = None
    # Tolerated values, each with what was made of it (see the package's docstring).
    warnings: tuple[str, ...] = ()

    # No MODEL_FILES nor MODEL_PATH, a CACHE_DIR and a source that can list
    # its files (an s3:// prefix): the files are the listing's (#24 item 5).
    listed: bool = False
    # KServe mode (kserve/command.py): the model directory is the agent's
    # private one, linked into DEST_DIR, so a listed `x.sha256` is a file
    # like any other, staged apart from the stamp of `x` (layout.staged_rel,
    # #31 item 4). Set by the command, never by a variable.
    kserve_mode: bool = False
    # Whose words a failure's remedy uses (words.py): the boundary reads it
    # leniently before this is built; the check of its value is here.
    remedy_words: str = "variables"

    @property
    def multi_file(self) -> bool:
        return bool(self.model_files) or self.listed

    @property
    def direct_io(self) -> bool:
        """O_DIRECT allowed at all (where the filesystem takes it)."""
        return self.direct_io_mode != "off"
