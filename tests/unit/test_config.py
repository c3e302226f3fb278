"""config.load_config: every contract variable, flags over env, defaults, errors (CONTRACT §3)."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping
from operator import attrgetter
from pathlib import Path
from typing import Any

import pytest

from llmkube_stager.config import (
    SECRET_VARS,
    VARS,
    Config,
    Secrets,
    early_log_level,
    early_settings,
    load_config,
    secret_values,
)
from llmkube_stager.errors import ConfigError, InvalidFileSet, Reason

SINGLE = {"MODEL_SOURCE": "https://host.example/m.gguf", "MODEL_PATH": "/models/k/m.gguf"}
MULTI = {
    "MODEL_SOURCE": "hf://org/repo",
    "CACHE_DIR": "/models/k",
    "MODEL_FILES": "config.json\nmodel.safetensors\n",
}
# A share of a sharded prefetch (#16): JOB_COMPLETION_INDEX of LLMKUBE_SHARDS.
SHARDED = {
    **MULTI,
    "LLMKUBE_PREFETCH_STAGER": "true",
    "LLMKUBE_SHARDS": "4",
    "JOB_COMPLETION_INDEX": "1",
}
# A model read through an in-cluster mirror (#42, docs/mirror.md).
MIRRORED = {**SINGLE, "LLMKUBE_MIRROR": "s3://mirror/models"}
DIGEST_A = "a" * 64
DIGEST_B = "0123456789abcdef" * 4

# Canary secrets: none of these may ever appear in a configuration error.
SECRETS = {
    "HF_TOKEN": "hf_CanaryTokenValue0123456789abcd",
    "AWS_ACCESS_KEY_ID": "AKIACANARYKEYID00001",
    "AWS_SECRET_ACCESS_KEY": "canary/secret+access+key/value0000000000",
    "AWS_SESSION_TOKEN": "canary-session-token-value-XYZ",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN": "canary-container-token-value-0",
    # #33 item 2.
    "AZURE_STORAGE_ACCESS_KEY": "Y2FuYXJ5LWF6dXJlLWFjY291bnQta2V5LXZhbHVl",
    "AZURE_STORAGE_CONNECTION_STRING": "AccountName=a;AccountKey=Y2FuYXJ5LWNvbm4ta2V5",
    "AZURE_CLIENT_SECRET": "canary-azure-client-secret-value",
    "AZ_CLIENT_SECRET": "canary-az-legacy-client-secret-0",
    "AZURE_CLIENT_CERTIFICATE_PASSWORD": "canary-azure-certificate-password",
    "IDENTITY_HEADER": "canary-app-service-identity-header",
    # #42: the mirror's own keys.
    "LLMKUBE_MIRROR_ACCESS_KEY_ID": "AKIACANARYMIRROR0001",
    "LLMKUBE_MIRROR_SECRET_ACCESS_KEY": "canary-mirror-secret-access-key-00",
}


def load(
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, str | None] | None = None,
    base: Mapping[str, str] = SINGLE,
) -> Config:
    return load_config({**base, **(env or {})}, dict(flags or {}))


# (variable, value, base env, attribute, expected value, another valid value)
CASES: list[tuple[str, str, Mapping[str, str], str, Any, str]] = [
    ("MODEL_SOURCE", "s3://bucket/m.gguf", SINGLE, "source", "s3://bucket/m.gguf", "/abs/m"),
    ("CACHE_DIR", "/models/abc", MULTI, "cache_dir", "/models/abc", "/other"),
    ("MODEL_PATH", "/models/k/x.gguf", SINGLE, "model_path", "/models/k/x.gguf", "/y.gguf"),
    ("MODEL_FILES", "a.json\nsub/b.bin", MULTI, "model_files", ("a.json", "sub/b.bin"), "z"),
    ("S3_BUCKET", "bucket", SINGLE, "s3_bucket", "bucket", "other"),
    ("S3_KEY", "dir/m.gguf", SINGLE, "s3_key", "dir/m.gguf", "other"),
    ("S3_PREFIX", "models/x", SINGLE, "s3_prefix", "models/x", "other"),
    ("MODEL_SHA256", DIGEST_A.upper(), SINGLE, "pins", {"m.gguf": DIGEST_A}, DIGEST_B),
    (
        "MODEL_FILE_SHA256",
        f"{DIGEST_A} config.json",
        MULTI,
        "pins",
        {"config.json": DIGEST_A},
        f"{DIGEST_B} model.safetensors",
    ),
    ("LLMKUBE_REFRESH_POLICY", "OnChange", SINGLE, "refresh_policy", "OnChange", "IfNotPresent"),
    ("LLMKUBE_PREFETCH_STAGER", "true", SINGLE, "prefetch_stager", True, "false"),
    ("HF_TOKEN", "hf_tokentokentoken", SINGLE, "secrets.hf_token", "hf_tokentokentoken", "x1"),
    ("HF_ENDPOINT", "https://mirror.example", SINGLE, "hf_endpoint", "https://mirror.example", "x"),
    ("AWS_ACCESS_KEY_ID", "AKIDXX", SINGLE, "secrets.aws_access_key_id", "AKIDXX", "other"),
    ("AWS_SECRET_ACCESS_KEY", "s3cr3t", SINGLE, "secrets.aws_secret_access_key", "s3cr3t", "o"),
    ("AWS_SESSION_TOKEN", "sess", SINGLE, "secrets.aws_session_token", "sess", "other"),
    ("AWS_REGION", "eu-west-1", SINGLE, "aws_region", "eu-west-1", "us-east-1"),
    ("AWS_ENDPOINT_URL", "http://minio:9000", SINGLE, "aws_endpoint_url", "http://minio:9000", "x"),
    ("LLMKUBE_CA_DIR", "/etc/my-ca", SINGLE, "ca_dir", "/etc/my-ca", "/other"),
    ("LLMKUBE_HOST_MODEL", "/host/m.gguf", SINGLE, "host_model", "/host/m.gguf", "/other"),
    ("LLMKUBE_ALLOWED_HOST_ROOTS", "/a:/b", SINGLE, "allowed_host_roots", ("/a", "/b"), "/c"),
    ("LLMKUBE_TERMINATION_LOG", "/tmp/term", SINGLE, "termination_log", "/tmp/term", "/other"),
    ("LLMKUBE_REMEDY_WORDS", "operator", SINGLE, "remedy_words", "operator", "variables"),
    ("PROGRESS_INTERVAL", "2.5", SINGLE, "progress_interval_s", 2.5, "30"),
    ("LLMKUBE_LOG_FORMAT", "json", SINGLE, "log_format", "json", "text"),
    ("LLMKUBE_LOG_LEVEL", "debug", SINGLE, "log_level", "debug", "info"),
    ("LLMKUBE_CONNECT_TIMEOUT", "3", SINGLE, "timeouts.connect_s", 3.0, "4"),
    ("LLMKUBE_STALL_TIMEOUT", "45.5", SINGLE, "timeouts.stall_s", 45.5, "4"),
    ("LLMKUBE_RETRIES", "0", SINGLE, "timeouts.retries", 0, "9"),
    ("LLMKUBE_MAX_RETRY_WAIT", "120", SINGLE, "timeouts.max_retry_wait_s", 120.0, "4"),
    ("LLMKUBE_LOCK_TIMEOUT", "600", SINGLE, "timeouts.lock_s", 600.0, "4"),
    ("LLMKUBE_CONNECTIONS", "8", SINGLE, "connections", 8, "2"),
    ("LLMKUBE_FILES_IN_FLIGHT", "4", SINGLE, "files_in_flight", 4, "2"),
    ("LLMKUBE_SHARDS", "4", SHARDED, "shards", 4, "3"),
    ("JOB_COMPLETION_INDEX", "3", SHARDED, "shard_index", 3, "0"),
    ("LLMKUBE_JOB_ID", "0c1d2e3f-1234", SHARDED, "job_id", "0c1d2e3f-1234", "other-job"),
    ("LLMKUBE_DIRECT_IO", "off", SINGLE, "direct_io", False, "auto"),
    # The in-cluster mirror (#42, docs/mirror.md).
    ("LLMKUBE_MIRROR", "s3://mirror/models", SINGLE, "mirror.url", "s3://mirror/models", "s3://b"),
    (
        "LLMKUBE_MIRROR_ENDPOINT",
        "http://seaweedfs.storage:8333",
        MIRRORED,
        "mirror.endpoint_url",
        "http://seaweedfs.storage:8333",
        "http://minio:9000",
    ),
    (
        "LLMKUBE_MIRROR_ACCESS_KEY_ID",
        "AKIAMIRROR",
        {**MIRRORED, "LLMKUBE_MIRROR_SECRET_ACCESS_KEY": "s"},
        "mirror.access_key_id",
        "AKIAMIRROR",
        "AKIAOTHER",
    ),
    (
        "LLMKUBE_MIRROR_SECRET_ACCESS_KEY",
        "m1rror",
        {**MIRRORED, "LLMKUBE_MIRROR_ACCESS_KEY_ID": "k"},
        "mirror.secret_access_key",
        "m1rror",
        "other",
    ),
    ("LLMKUBE_MIRROR_REGION", "eu-west-1", MIRRORED, "mirror.region", "eu-west-1", "us-east-2"),
    ("LLMKUBE_MIRROR_ONLY", "true", MIRRORED, "mirror.only", True, "false"),
    ("LLMKUBE_MIRROR_PUBLISH", "true", MIRRORED, "mirror.publish", True, "false"),
    ("LLMKUBE_ARCHIVE_MAX_BYTES", "4096", SINGLE, "archive_max_bytes", 4096, "8192"),
    ("LLMKUBE_ARCHIVE_MAX_FILES", "10", SINGLE, "archive_max_files", 10, "20"),
    ("HTTPS_PROXY", "http://p1:3128", SINGLE, "proxy.https.display", "p1:3128", "http://p2:1"),
    ("HTTP_PROXY", "http://p1:3128", SINGLE, "proxy.http.display", "p1:3128", "http://p2:1"),
    ("NO_PROXY", ".svc,10.0.0.0/8", SINGLE, "proxy.no_proxy", (".svc", "10.0.0.0/8"), "x"),
    # #33 item 1: gs://
    (
        "GOOGLE_APPLICATION_CREDENTIALS",
        "/var/secrets/k.json",
        SINGLE,
        "gcs_credentials_file",
        "/var/secrets/k.json",
        "/x",
    ),
    ("STORAGE_EMULATOR_HOST", "localhost:9023", SINGLE, "gcs_emulator_host", "localhost:9023", "x"),
    (
        "API_ENDPOINT_OVERRIDE",
        "https://gcs.corp:443",
        SINGLE,
        "gcs_api_endpoint",
        "https://gcs.corp:443",
        "x",
    ),
    ("GCE_METADATA_HOST", "127.0.0.1:8080", SINGLE, "gcs_metadata_host", "127.0.0.1:8080", "x"),
    ("GCE_METADATA_IP", "127.0.0.1:8080", SINGLE, "gcs_metadata_ip", "127.0.0.1:8080", "x"),
    # oci:// (#43): the first of the three docker config settings given.
    (
        "LLMKUBE_OCI_DOCKER_CONFIG",
        "/pull/config.json",
        SINGLE,
        "oci_docker_config",
        "/pull/config.json",
        "/x",
    ),
    (
        "KSERVE_OCI_DOCKER_CONFIG",
        "/kserve/docker",
        SINGLE,
        "oci_docker_config",
        "/kserve/docker",
        "/x",
    ),
    ("DOCKER_CONFIG", "/root/.docker", SINGLE, "oci_docker_config", "/root/.docker", "/x"),
    ("LLMKUBE_OCI_PLATFORM", "linux/arm64", SINGLE, "oci_platform", "linux/arm64", "linux/amd64"),
]
# The rest of the AWS chain lands in Config.aws_env (handed to botocore).
_AWS_ENV_CASES: dict[str, tuple[str, str]] = {
    "AWS_ENDPOINT_URL_S3": ("http://s3.example:9000", "x"),
    "AWS_ENDPOINT_URL_STS": ("https://sts.example", "x"),
    "AWS_DEFAULT_REGION": ("eu-west-1", "us-east-1"),
    "AWS_S3_ADDRESSING_STYLE": ("path", "virtual"),
    "AWS_PROFILE": ("models", "other"),
    "AWS_SHARED_CREDENTIALS_FILE": ("/aws/credentials", "/x"),
    "AWS_CONFIG_FILE": ("/aws/config", "/x"),
    "AWS_ROLE_ARN": ("arn:aws:iam::1:role/r", "x"),
    "AWS_WEB_IDENTITY_TOKEN_FILE": ("/var/run/token", "/x"),
    "AWS_ROLE_SESSION_NAME": ("stager", "x"),
    "AWS_CONTAINER_CREDENTIALS_FULL_URI": ("http://169.254.170.23/v1/credentials", "x"),
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": ("/v2/credentials/x", "/y"),
    "AWS_CONTAINER_AUTHORIZATION_TOKEN": ("c0ntainer", "x"),
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": ("/var/run/pod-identity", "/x"),
    "AWS_EC2_METADATA_DISABLED": ("true", "false"),
    "AWS_EC2_METADATA_SERVICE_ENDPOINT": ("http://169.254.169.254", "x"),
}
CASES += [
    (name, value, SINGLE, "aws_env", {name: value}, other)
    for name, (value, other) in _AWS_ENV_CASES.items()
]
# Azure Blob's variables (#33 item 2) land in Config.azure_env.
_AZURE_ENV_CASES: dict[str, tuple[str, str]] = {
    "AZURE_STORAGE_ACCESS_KEY": ("a2V5a2V5", "b3RoZXI="),
    "AZURE_STORAGE_CONNECTION_STRING": ("BlobEndpoint=http://127.0.0.1:1/a", "x"),
    "AZURE_CLIENT_ID": ("0b6c0c3e", "x"),
    "AZURE_CLIENT_SECRET": ("s3cr3t", "x"),
    "AZURE_TENANT_ID": ("72f988bf", "x"),
    "AZURE_FEDERATED_TOKEN_FILE": ("/var/run/azure-token", "/x"),
    "AZURE_CLIENT_CERTIFICATE_PATH": ("/var/run/azure/sp.pem", "/x"),
    "AZURE_CLIENT_CERTIFICATE_PASSWORD": ("p4ss", "x"),
    "AZURE_POD_IDENTITY_AUTHORITY_HOST": ("http://127.0.0.1:1", "x"),
    "IDENTITY_ENDPOINT": ("http://localhost:4141/msi/token", "x"),
    "IDENTITY_HEADER": ("h3ader", "x"),
    "LLMKUBE_AZURE_MANAGED_IDENTITY": ("true", "false"),
    "AZURE_AUTHORITY_HOST": ("https://login.microsoftonline.us", "x"),
    "AZ_CLIENT_ID": ("0b6c0c3e", "x"),
    "AZ_CLIENT_SECRET": ("s3cr3t", "x"),
    "AZ_TENANT_ID": ("72f988bf", "x"),
}
CASES += [
    (name, value, SINGLE, "azure_env", {name: value}, other)
    for name, (value, other) in _AZURE_ENV_CASES.items()
]
# #34: trust anchors as one-line base64 DER (config/anchor.py), and their
# fingerprints (sha256 of the DER).
KEY_A = (
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEZBg0pusagb1aMqOTg/w+hZd38/W2WDZjMbTjpj6BxYU0K1jal+"
    "R7Tfv0BdasQJGxHpf8TNuYePfjRkphc0oHTA=="
)
KEY_B = (
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEAAEAAQABAAEAAQABAAEAAQABAAEAAQABAAEAAQABAAEAAQABAAE"
    "AAQABAAEAAQABAAEAAQABAAEAAQABAAEAAQABAAEAAQ=="
)


def _fingerprint(b64: str) -> str:
    return hashlib.sha256(base64.b64decode(b64)).hexdigest()


CASES += [
    ("LLMKUBE_SIGNING_KEY", KEY_A, SINGLE, "signing.fingerprint", _fingerprint(KEY_A), KEY_B),
    ("LLMKUBE_SIGNING_CERTS", KEY_A, SINGLE, "signing.kind", "certs", KEY_B),
    (
        "LLMKUBE_SIGNATURE",
        "/etc/llmkube/model.sig",
        {**SINGLE, "LLMKUBE_SIGNING_KEY": KEY_A},
        "signing.signature",
        "/etc/llmkube/model.sig",
        "https://host.example/model.sig",
    ),
    (
        "LLMKUBE_SIGNED_DIGEST",
        "SHA256:" + "AB" * 32,
        {**SINGLE, "LLMKUBE_SIGNING_KEY": KEY_A},
        "signing.signed_digest",
        "ab" * 32,
        "cd" * 32,
    ),
]
CASE_IDS = [c[0] for c in CASES]


def _without(base: Mapping[str, str], var: str) -> dict[str, str]:
    return {k: v for k, v in base.items() if k != var}


def test_every_contract_variable_has_a_parsing_case() -> None:
    assert sorted(CASE_IDS) == sorted(v.env for v in VARS)


@pytest.mark.parametrize(("var", "value", "base", "attr", "expected", "other"), CASES, ids=CASE_IDS)
def test_variable_is_read_from_the_environment(
    var: str, value: str, base: Mapping[str, str], attr: str, expected: Any, other: str
) -> None:
    config = load({var: value}, base=base)
    assert attrgetter(attr)(config) == expected


@pytest.mark.parametrize(("var", "value", "base", "attr", "expected", "other"), CASES, ids=CASE_IDS)
def test_variable_is_read_from_its_flag(
    var: str, value: str, base: Mapping[str, str], attr: str, expected: Any, other: str
) -> None:
    config = load_config(_without(base, var), {var: value})
    assert attrgetter(attr)(config) == expected


@pytest.mark.parametrize(("var", "value", "base", "attr", "expected", "other"), CASES, ids=CASE_IDS)
def test_flag_wins_over_environment(
    var: str, value: str, base: Mapping[str, str], attr: str, expected: Any, other: str
) -> None:
    config = load({var: other}, {var: value}, base=base)
    assert attrgetter(attr)(config) == expected


def test_flag_given_as_none_means_not_given() -> None:
    config = load({"LLMKUBE_RETRIES": "7"}, {"LLMKUBE_RETRIES": None})
    assert config.timeouts.retries == 7


def test_flag_names_follow_the_variable_names() -> None:
    flags = {v.env: v.flag for v in VARS}
    assert flags["MODEL_SOURCE"] == "--model-source"
    assert flags["LLMKUBE_PREFETCH_STAGER"] == "--llmkube-prefetch-stager"
    assert flags["HF_TOKEN"] == "--hf-token"
    assert len(set(flags.values())) == len(VARS)


def test_secret_variables_are_exactly_the_credentials() -> None:
    # Proxy URLs may carry credentials (user:password@).
    assert set(SECRET_VARS) == set(SECRETS) | {"HTTPS_PROXY", "HTTP_PROXY"}


def test_defaults() -> None:
    config = load()
    assert config.timeouts.connect_s == 10.0
    assert config.timeouts.stall_s == 60.0
    assert config.timeouts.retries == 5
    assert config.timeouts.max_retry_wait_s == 60.0
    assert config.timeouts.lock_s == 3600.0
    assert config.progress_interval_s == 10.0
    assert config.ca_dir == "/custom-certs"
    assert config.host_model == "/host-model/model.gguf"
    assert config.termination_log == "/dev/termination-log"
    assert config.refresh_policy == "IfNotPresent"
    assert config.prefetch_stager is False
    assert config.log_format == "text"
    assert config.pins == {}
    assert config.secrets.values() == ()
    assert config.multi_file is False


def test_empty_values_fall_back_to_defaults() -> None:
    env = {
        "PROGRESS_INTERVAL": "",
        "LLMKUBE_CONNECT_TIMEOUT": "  ",
        "LLMKUBE_RETRIES": "",
        "LLMKUBE_REFRESH_POLICY": "",
        "LLMKUBE_LOG_FORMAT": "",
    }
    config = load(env)
    assert config.progress_interval_s == 10.0
    assert config.timeouts.connect_s == 10.0
    assert config.timeouts.retries == 5
    assert config.refresh_policy == "IfNotPresent"
    assert config.log_format == "text"


BAD_VALUES = [
    ("LLMKUBE_CONNECT_TIMEOUT", "0"),
    ("LLMKUBE_CONNECT_TIMEOUT", "fast"),
    ("LLMKUBE_CONNECT_TIMEOUT", "1e400"),
    ("LLMKUBE_STALL_TIMEOUT", "-5"),
    ("LLMKUBE_MAX_RETRY_WAIT", "0"),
    ("LLMKUBE_LOCK_TIMEOUT", "forever"),
    ("LLMKUBE_RETRIES", "-1"),
    ("LLMKUBE_RETRIES", "1.5"),
    ("LLMKUBE_RETRIES", "many"),
    ("LLMKUBE_LOG_FORMAT", "xml"),
    ("LLMKUBE_LOG_LEVEL", "verbose"),
    ("LLMKUBE_REMEDY_WORDS", "spec"),
    ("MODEL_SHA256", "abc"),
    ("MODEL_SHA256", "g" * 64),
    ("MODEL_SHA256", "a" * 63),
    ("MODEL_SHA256", "a" * 65),
    ("MODEL_SHA256", "md5:" + "a" * 64),  # sha256: is accepted (#46 item 4), no other
    ("MODEL_SHA256", ""),
    ("MODEL_FILE_SHA256", f"{DIGEST_A} m.gguf"),  # single-file model
    ("MODEL_PATH", "~/models/m.gguf"),
    ("CACHE_DIR", "~/models/k"),
    ("MODEL_SOURCE", ""),
    ("MODEL_SOURCE", "   \n"),
]


@pytest.mark.parametrize(("var", "value"), BAD_VALUES, ids=[f"{v}={x!r}" for v, x in BAD_VALUES])
def test_bad_value_is_a_config_error_naming_the_variable_without_secrets(
    var: str, value: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load({**SECRETS, var: value})
    err = info.value
    assert err.reason is Reason.INVALID_CONFIGURATION
    assert err.exit_code == 2
    assert err.retryable is False
    assert var in err.detail
    for secret in SECRETS.values():
        assert secret not in err.detail
        assert secret not in str(err)
        assert secret not in repr(err)


@pytest.mark.parametrize("value", ["²", "٣"], ids=["superscript-two", "arabic-indic-three"])
def test_non_ascii_digits_in_a_count_are_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        load({"LLMKUBE_RETRIES": value})
    assert "LLMKUBE_RETRIES" in info.value.detail


def test_secret_values_never_appear_in_any_config_error_message() -> None:
    # Every way this configuration can be wrong, with all secrets set.
    messages: list[str] = []
    for var, value in BAD_VALUES:
        try:
            load({**SECRETS, var: value})
        except ConfigError as err:
            messages.append(err.detail)
    assert len(messages) == len(BAD_VALUES)
    joined = "\n".join(messages)
    for secret in SECRETS.values():
        assert secret not in joined


# --- single-file vs multi-file mode rules --------------------------------------------------------


def test_single_file_mode() -> None:
    config = load()
    assert config.model_path == "/models/k/m.gguf"
    assert config.model_files == ()
    assert config.multi_file is False


def test_multi_file_mode_keeps_order_and_primary_first() -> None:
    config = load(base=MULTI)
    assert config.model_files == ("config.json", "model.safetensors")
    assert config.multi_file is True
    assert config.model_path == ""


def test_model_path_and_model_files_together_are_rejected() -> None:
    with pytest.raises(ConfigError) as info:
        load({"MODEL_PATH": "/models/k/m.gguf"}, base=MULTI)
    assert "MODEL_PATH" in info.value.detail
    assert "MODEL_FILES" in info.value.detail
    assert info.value.exit_code == 2


def test_model_files_require_cache_dir() -> None:
    with pytest.raises(ConfigError) as info:
        load(base=_without(MULTI, "CACHE_DIR"))
    assert "CACHE_DIR" in info.value.detail


def test_neither_model_path_nor_model_files_is_rejected() -> None:
    with pytest.raises(ConfigError) as info:
        load(base=_without(SINGLE, "MODEL_PATH"))
    assert "MODEL_PATH" in info.value.detail
    assert "MODEL_FILES" in info.value.detail


def test_blank_model_files_count_as_absent() -> None:
    config = load({"MODEL_FILES": "\n\n"})
    assert config.multi_file is False
    assert config.model_path == "/models/k/m.gguf"


def test_invalid_model_files_is_invalid_file_set_exit_2() -> None:
    with pytest.raises(InvalidFileSet) as info:
        load({"MODEL_FILES": "config.json\n../escape.bin"}, base=MULTI)
    assert info.value.reason is Reason.INVALID_FILE_SET
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("cache_dir", "resolved"),
    [
        ("models/k", "/home/me/work/models/k"),
        ("./models", "/home/me/work/models"),
        ("../m", "/home/me/m"),
        ("models//k/./", "/home/me/work/models/k"),
        (".", "/home/me/work"),
    ],
)
def test_relative_cache_dir_is_taken_from_the_working_directory(
    cache_dir: str, resolved: str
) -> None:
    """#13 item 9: a person's local dry run (`plan`, `verify`) with relative paths."""
    config = load_config({**MULTI, "CACHE_DIR": cache_dir}, {}, cwd="/home/me/work")
    assert config.cache_dir == resolved


def test_relative_model_path_is_taken_from_the_working_directory() -> None:
    env = {**SINGLE, "CACHE_DIR": "cache/k", "MODEL_PATH": "cache/k/m.gguf"}
    config = load_config(env, {}, cwd="/srv")
    assert (config.cache_dir, config.model_path) == ("/srv/cache/k", "/srv/cache/k/m.gguf")
    assert config.pins == {}  # the pin key is the basename either way


def test_absolute_paths_are_kept_as_given() -> None:
    config = load_config({**SINGLE, "CACHE_DIR": "/models/k/"}, {}, cwd="/srv")
    assert (config.cache_dir, config.model_path) == ("/models/k/", "/models/k/m.gguf")


def test_the_working_directory_defaults_to_the_process_one() -> None:
    config = load_config(SINGLE, {}, cwd=None)  # no getcwd needed: both absolute
    assert config.model_path == "/models/k/m.gguf"
    rel = load_config({**SINGLE, "MODEL_PATH": "m.gguf"}, {})
    assert rel.model_path == os.path.join(os.getcwd(), "m.gguf")


@pytest.mark.parametrize("name", ["CACHE_DIR", "MODEL_PATH"])
def test_an_unexpanded_tilde_is_refused(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        load({name: "~/models/m.gguf"}, base=SINGLE)
    assert name in info.value.detail
    assert "~" in info.value.detail


# --- refresh policy, prefetch switch, digests, endpoint ------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("OnChange", "OnChange"),
        ("onchange", "OnChange"),
        ("ONCHANGE", "OnChange"),
        (" OnChange\n", "OnChange"),
        ("IfNotPresent", "IfNotPresent"),
        ("ifnotpresent", "IfNotPresent"),
        ("IFNOTPRESENT", "IfNotPresent"),
    ],
)
def test_refresh_policy_is_case_insensitive(text: str, expected: str) -> None:
    assert load({"LLMKUBE_REFRESH_POLICY": text}).refresh_policy == expected


# --- values the scripts tolerated: their old meaning, a warning, never exit 2 (#14) ------

TOLERATED = [
    ("PROGRESS_INTERVAL", "0", "progress_interval_s", 10.0),
    ("PROGRESS_INTERVAL", "-1", "progress_interval_s", 10.0),
    ("PROGRESS_INTERVAL", "ten", "progress_interval_s", 10.0),
    ("PROGRESS_INTERVAL", "10s", "progress_interval_s", 10.0),
    ("PROGRESS_INTERVAL", "nan", "progress_interval_s", 10.0),
    ("PROGRESS_INTERVAL", "inf", "progress_interval_s", 10.0),
    ("LLMKUBE_REFRESH_POLICY", "Always", "refresh_policy", "IfNotPresent"),
    ("LLMKUBE_REFRESH_POLICY", "Never", "refresh_policy", "IfNotPresent"),
    ("LLMKUBE_REFRESH_POLICY", "on-change", "refresh_policy", "IfNotPresent"),
    ("LLMKUBE_REFRESH_POLICY", "OnChangeX", "refresh_policy", "IfNotPresent"),
    ("LLMKUBE_PREFETCH_STAGER", "maybe", "prefetch_stager", False),
    ("LLMKUBE_PREFETCH_STAGER", "2", "prefetch_stager", False),
]


@pytest.mark.parametrize(
    ("var", "value", "attr", "expected"), TOLERATED, ids=[f"{v}={x!r}" for v, x, _, _ in TOLERATED]
)
def test_tolerated_value_keeps_the_scripts_meaning_with_a_warning(
    var: str, value: str, attr: str, expected: object
) -> None:
    config = load({**SECRETS, var: value})
    assert getattr(config, attr) == expected
    assert len(config.warnings) == 1
    assert config.warnings[0].startswith(f"{var}={value!r} is not valid; ")
    for secret in SECRETS.values():
        assert secret not in config.warnings[0]


def test_a_huge_tolerated_value_is_shown_bounded() -> None:
    (warning,) = load({"LLMKUBE_REFRESH_POLICY": "x" * 100_000}).warnings
    assert len(warning) < 300


def test_valid_values_give_no_warnings() -> None:
    config = load({"PROGRESS_INTERVAL": "2.5", "LLMKUBE_REFRESH_POLICY": "OnChange"})
    assert config.warnings == ()


@pytest.mark.parametrize(
    ("text", "expected", "warned"),
    [
        ("true", True, False),
        ("false", False, False),
        ("", False, False),
        # A serving pod taken for a stager would write on FUSE (spec §9.3):
        # only the scripts' exact `true` makes a stager.
        ("TRUE", False, True),
        ("True", False, True),
        (" true\n", False, True),
        ("1", False, True),
        ("yes", False, True),
        ("FALSE", False, True),
        ("0", False, True),
        ("no", False, True),
    ],
)
def test_prefetch_stager_only_for_exactly_true(text: str, expected: bool, warned: bool) -> None:
    config = load({"LLMKUBE_PREFETCH_STAGER": text})
    assert config.prefetch_stager is expected
    assert bool(config.warnings) is warned


def test_blank_lines_inside_model_files_are_skipped_with_a_warning() -> None:
    config = load({"MODEL_FILES": "a.bin\n\nb.bin\n\n\nc.bin\n"}, base=MULTI)
    assert config.model_files == ("a.bin", "b.bin", "c.bin")
    assert config.warnings == (
        "MODEL_FILES has 3 blank line(s) between entries; skipped, as the scripts did",
    )


def test_prefetch_stager_unset_is_a_serving_pod() -> None:
    assert load().prefetch_stager is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (DIGEST_A, DIGEST_A),
        (DIGEST_A.upper(), DIGEST_A),
        (f"  {DIGEST_B}\n", DIGEST_B),
    ],
)
def test_model_sha256_is_normalised_and_keyed_by_the_file_name(text: str, expected: str) -> None:
    assert load({"MODEL_SHA256": text}).pins == {"m.gguf": expected}


@pytest.mark.parametrize("text", ["", "  ", "\n"])
def test_model_sha256_set_but_empty_fails_closed(text: str) -> None:
    # spec §7: an empty digest in a gated command refuses to transfer unchecked.
    with pytest.raises(ConfigError) as info:
        load({"MODEL_SHA256": text})
    assert "MODEL_SHA256" in info.value.detail
    assert info.value.exit_code == 2


def test_model_sha256_with_model_files_is_rejected() -> None:
    with pytest.raises(ConfigError, match="MODEL_SHA256"):
        load({"MODEL_SHA256": DIGEST_A}, base=MULTI)


def test_model_file_sha256_pins_by_relative_path() -> None:
    text = f"{DIGEST_A.upper()} config.json\n{DIGEST_B} model.safetensors\n"
    config = load({"MODEL_FILE_SHA256": text}, base=MULTI)
    assert config.pins == {"config.json": DIGEST_A, "model.safetensors": DIGEST_B}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "refusing to transfer unchecked"),
        (f"{DIGEST_A} other.bin", "not staged files"),  # orphan key (spec §6.4)
        (f"{DIGEST_A}  config.json", "whitespace"),
        (f"{DIGEST_A} config.json ", "whitespace"),
        (f"{DIGEST_A[:-1]} config.json", "64-hex"),
        (f"{DIGEST_A}config.json", "64-hex"),
        (f"{DIGEST_A} config.json\n{DIGEST_B} config.json", "twice"),
    ],
)
def test_bad_model_file_sha256_fails_closed(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load({**SECRETS, "MODEL_FILE_SHA256": text}, base=MULTI)
    assert "MODEL_FILE_SHA256" in info.value.detail
    assert needle in info.value.detail
    for secret in SECRETS.values():
        assert secret not in info.value.detail


def test_bad_model_sha256_error_names_the_variable_and_length() -> None:
    with pytest.raises(ConfigError) as info:
        load({"MODEL_SHA256": "z" * 64})
    assert "MODEL_SHA256" in info.value.detail
    assert "64" in info.value.detail


@pytest.mark.parametrize(
    "text", ["https://mirror.example\n", "  https://mirror.example  ", "https://mirror.example\r\n"]
)
def test_hf_endpoint_is_trimmed(text: str) -> None:
    assert load({"HF_ENDPOINT": text}).hf_endpoint == "https://mirror.example"


def test_secrets_are_trimmed() -> None:
    config = load({"HF_TOKEN": "hf_abc123\n"})
    assert config.secrets.hf_token == "hf_abc123"


# --- secrets: never shown ------------------------------------------------------------------------


def test_secrets_repr_hides_values() -> None:
    config = load(SECRETS)
    # The connection string counts whole and by its AccountKey (#33 item 2).
    assert set(config.secrets.values()) == set(SECRETS.values()) | {"Y2FuYXJ5LWNvbm4ta2V5"}
    for text in (repr(config.secrets), str(config.secrets), repr(config), str(config)):
        for secret in SECRETS.values():
            assert secret not in text


def test_secrets_values_skips_empty_ones() -> None:
    assert Secrets(hf_token="t0k3n").values() == ("t0k3n",)
    assert Secrets().values() == ()


def test_secret_values_are_readable_when_the_rest_is_invalid() -> None:
    env = {**SECRETS, "LLMKUBE_RETRIES": "many"}  # no MODEL_SOURCE either
    with pytest.raises(ConfigError):
        load_config(env, {})
    assert set(secret_values(env, {})) == set(SECRETS.values()) | {"Y2FuYXJ5LWNvbm4ta2V5"}


def test_secret_values_take_the_flag_over_the_environment() -> None:
    values = secret_values({"HF_TOKEN": "env-token"}, {"HF_TOKEN": "flag-token"})
    assert values == ("flag-token",)


# --- early settings ------------------------------------------------------------------------------


def test_early_settings_defaults() -> None:
    assert early_settings({}, {}) == ("text", "/dev/termination-log")


def test_early_settings_are_lenient_and_case_insensitive() -> None:
    assert early_settings({"LLMKUBE_LOG_FORMAT": "JSON"}, {}) == ("json", "/dev/termination-log")
    assert early_settings({"LLMKUBE_LOG_FORMAT": "xml"}, {})[0] == "text"


def test_early_log_level_is_lenient_and_the_flag_wins() -> None:
    assert early_log_level({}, {}) == "info"
    assert early_log_level({"LLMKUBE_LOG_LEVEL": "DEBUG"}, {}) == "debug"
    assert early_log_level({"LLMKUBE_LOG_LEVEL": "verbose"}, {}) == "info"  # refused later
    flags: dict[str, str | None] = {"LLMKUBE_LOG_LEVEL": "error"}
    assert early_log_level({"LLMKUBE_LOG_LEVEL": "debug"}, flags) == "error"


def test_early_settings_flag_wins() -> None:
    env = {"LLMKUBE_LOG_FORMAT": "text", "LLMKUBE_TERMINATION_LOG": "/env/term"}
    flags: dict[str, str | None] = {
        "LLMKUBE_LOG_FORMAT": "json",
        "LLMKUBE_TERMINATION_LOG": "/flag/term",
    }
    assert early_settings(env, flags) == ("json", "/flag/term")


# --- proxies (proxy.py) ----------------------------------------------------------------------


def test_lowercase_proxy_variables_win_as_in_curl() -> None:
    config = load(
        {
            "HTTPS_PROXY": "http://upper:1",
            "https_proxy": "http://lower:2",
            "NO_PROXY": "upper.example",
            "no_proxy": "lower.example",
        }
    )
    assert config.proxy.https is not None and config.proxy.https.display == "lower:2"
    assert config.proxy.no_proxy == ("lower.example",)


def test_proxy_credentials_are_secret_values_and_hidden_from_repr() -> None:
    env = {"HTTPS_PROXY": "http://agent:pr0xy-pa55word@proxy:3128"}
    config = load(env)
    assert "pr0xy-pa55word" in secret_values(env, {})
    assert "pr0xy-pa55word" not in repr(config)


def test_a_bad_proxy_is_a_configuration_error_naming_the_variable_only() -> None:
    with pytest.raises(ConfigError) as caught:
        load({"HTTPS_PROXY": "socks5://agent:pr0xy-pa55word@proxy:1080"})
    assert "HTTPS_PROXY" in str(caught.value)
    assert "pr0xy-pa55word" not in str(caught.value)
    # Unparseable, and still known to the redactor by its whole value.
    assert "socks5://agent:pr0xy-pa55word@proxy:1080" in secret_values(
        {"HTTPS_PROXY": "socks5://agent:pr0xy-pa55word@proxy:1080"}, {}
    )


@pytest.mark.parametrize(
    ("value", "direct_io", "auto"),
    [("auto", True, True), ("on", True, False), ("off", False, False)],
)
def test_direct_io_modes(value: str, direct_io: bool, auto: bool) -> None:
    """#16: auto (page cache while the model fits memory), on, off."""
    config = load({"LLMKUBE_DIRECT_IO": value}, base=SINGLE)
    assert (config.direct_io, config.direct_io_mode == "auto") == (direct_io, auto)


@pytest.mark.parametrize(
    "name",
    [
        ".llmkube.lock",
        "m.gguf.llmkube-size",
        "m.gguf.llmkube-evidence",
        ".llmkube-validators",
        ".llmkube-shards",
    ],
)
def test_a_model_path_named_like_the_agents_records_is_refused(name: str) -> None:
    """MODEL_PATH=<dir>/.llmkube.lock staged onto the agent's own (empty) lock
    file, kept it as the model and exited 0: an empty file served (#24
    review, found for KServe's URL names, true of MODEL_PATH too)."""
    with pytest.raises(ConfigError, match="reserved for cache records"):
        load({"MODEL_PATH": f"/models/k/{name}"})


@pytest.mark.parametrize(
    "value", ["a b", "job\n1", "-leading-dash", "x" * 254, "caf\u00e9", "{}", "uid;rm"]
)
def test_a_job_id_that_is_no_label_value_is_refused(value: str) -> None:
    """#29 item 6: the identity is written into the commit claim and
    logged; only what a Job's uid or name label can hold is taken."""
    with pytest.raises(ConfigError, match="LLMKUBE_JOB_ID"):
        load({"LLMKUBE_JOB_ID": value}, base=SHARDED)


def test_a_blank_job_id_is_none() -> None:
    assert load({"LLMKUBE_JOB_ID": "  "}, base=SHARDED).job_id == ""


# -- #34: the trust anchor ----------------------------------------------------------------


def test_no_anchor_is_no_signing_and_a_lone_signature_warns() -> None:
    assert load().signing is None
    config = load({"LLMKUBE_SIGNATURE": "model.sig"})
    assert config.signing is None
    assert any("LLMKUBE_SIGNATURE is set without" in w for w in config.warnings)


def test_a_key_by_pem_text_or_by_path_is_the_same_anchor(tmp_path: Path) -> None:
    pem = (
        "-----BEGIN PUBLIC KEY-----\n"
        + KEY_A[:64]
        + "\n"
        + KEY_A[64:]
        + "\n-----END PUBLIC KEY-----\n"
    )
    path = tmp_path / "key.pem"
    path.write_text(pem)
    by_text = load({"LLMKUBE_SIGNING_KEY": pem}).signing
    by_path = load({"LLMKUBE_SIGNING_KEY": str(path)}).signing
    assert by_text is not None and by_path is not None
    assert by_text.fingerprint == by_path.fingerprint == _fingerprint(KEY_A)
    assert by_text.signature == "model.sig"


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"LLMKUBE_SIGNING_KEY": KEY_A, "LLMKUBE_SIGNING_CERTS": KEY_A}, "both set"),
        ({"LLMKUBE_SIGNING_KEY": "not base64 at all!"}, "LLMKUBE_SIGNING_KEY must be a PEM"),
        ({"LLMKUBE_SIGNING_KEY": "/nonexistent/key.pem"}, "cannot read"),
        ({"LLMKUBE_SIGNING_KEY": KEY_A, "LLMKUBE_SIGNATURE": "s3://b/model.sig"}, "http(s) URL"),
        ({"LLMKUBE_SIGNING_KEY": KEY_A, "LLMKUBE_SIGNATURE": "../model.sig"}, "'..'"),
        (
            {"LLMKUBE_SIGNING_KEY": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----"},
            "holds no PEM PUBLIC KEY",
        ),
    ],
)
def test_a_bad_anchor_is_invalid_configuration(env: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(env)
    assert words in caught.value.detail


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"LLMKUBE_MIRROR": "ftp://mirror/models"}, "LLMKUBE_MIRROR must be"),
        ({"LLMKUBE_MIRROR": "http://user:pw@mirror/models/"}, "LLMKUBE_MIRROR must be"),
        ({"LLMKUBE_MIRROR": "https://mirror/m/?sig=1"}, "LLMKUBE_MIRROR must be"),
        (
            {"LLMKUBE_MIRROR": "https://mirror/m/", "LLMKUBE_MIRROR_PUBLISH": "true"},
            "needs an s3:// mirror",
        ),
        (
            {"LLMKUBE_MIRROR": "s3://mirror/m", "LLMKUBE_MIRROR_ACCESS_KEY_ID": "AKIAHALF"},
            "set both or neither",
        ),
        ({"LLMKUBE_MIRROR": "s3://mirror/m", "LLMKUBE_MIRROR_ONLY": "yes"}, "LLMKUBE_MIRROR_ONLY"),
    ],
)
def test_a_bad_mirror_setting_is_refused_by_name(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named) as caught:
        load(env, base=SINGLE)
    assert "pw@" not in str(caught.value) and "sig=1" not in str(caught.value)


def test_an_http_mirror_is_a_base_ending_in_a_slash() -> None:
    config = load({"LLMKUBE_MIRROR": "https://mirror.internal/models"}, base=SINGLE)
    assert config.mirror is not None and config.mirror.url == "https://mirror.internal/models/"


def test_mirror_only_without_a_mirror_is_a_warning() -> None:
    config = load({"LLMKUBE_MIRROR_ONLY": "true"}, base=SINGLE)
    assert config.mirror is None
    assert any("LLMKUBE_MIRROR_ONLY" in w for w in config.warnings)
