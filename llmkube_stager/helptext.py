"""`stage --help` (and `plan`, `verify`) as a newcomer reads it: the
variables in the groups the README's table uses, then examples to copy.

The groups are written once, here; tests/e2e/test_newcomer_docs.py holds
the README's table and this to each other. A variable of the table
(config/variables.py) that no group names is shown under "other settings",
so a new one is never hidden.
"""

from __future__ import annotations

from collections.abc import Iterable

from llmkube_stager.config import VARS

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "the model",
        (
            "MODEL_SOURCE",
            "CACHE_DIR",
            "MODEL_PATH",
            "MODEL_FILES",
            "S3_BUCKET",
            "S3_KEY",
            "S3_PREFIX",
        ),
    ),
    (
        "pins and policy",
        ("MODEL_SHA256", "MODEL_FILE_SHA256", "LLMKUBE_REFRESH_POLICY", "LLMKUBE_PREFETCH_STAGER"),
    ),
    ("Hugging Face", ("HF_TOKEN", "HF_ENDPOINT")),
    (
        "S3 and its credential chain",
        (
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_S3",
            "AWS_ENDPOINT_URL_STS",
            "AWS_S3_ADDRESSING_STYLE",
            "AWS_PROFILE",
            "AWS_SHARED_CREDENTIALS_FILE",
            "AWS_CONFIG_FILE",
            "AWS_ROLE_ARN",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_ROLE_SESSION_NAME",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_AUTHORIZATION_TOKEN",
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            "AWS_EC2_METADATA_DISABLED",
            "AWS_EC2_METADATA_SERVICE_ENDPOINT",
        ),
    ),
    (
        "Google Cloud Storage",
        (
            "GOOGLE_APPLICATION_CREDENTIALS",
            "STORAGE_EMULATOR_HOST",
            "API_ENDPOINT_OVERRIDE",
            "GCE_METADATA_HOST",
            "GCE_METADATA_IP",
        ),
    ),
    (
        "Azure Blob",
        (
            "AZURE_STORAGE_ACCESS_KEY",
            "AZURE_STORAGE_CONNECTION_STRING",
            "AZURE_CLIENT_ID",
            "AZURE_CLIENT_SECRET",
            "AZURE_TENANT_ID",
            "AZURE_FEDERATED_TOKEN_FILE",
            "AZURE_CLIENT_CERTIFICATE_PATH",
            "AZURE_CLIENT_CERTIFICATE_PASSWORD",
            "AZURE_AUTHORITY_HOST",
            "AZURE_POD_IDENTITY_AUTHORITY_HOST",
            "IDENTITY_ENDPOINT",
            "IDENTITY_HEADER",
            "LLMKUBE_AZURE_MANAGED_IDENTITY",
            "AZ_CLIENT_ID",
            "AZ_CLIENT_SECRET",
            "AZ_TENANT_ID",
        ),
    ),
    (
        "OCI registries",
        (
            "LLMKUBE_OCI_DOCKER_CONFIG",
            "KSERVE_OCI_DOCKER_CONFIG",
            "DOCKER_CONFIG",
            "LLMKUBE_OCI_PLATFORM",
        ),
    ),
    (
        "in-cluster mirror",
        (
            "LLMKUBE_MIRROR",
            "LLMKUBE_MIRROR_ENDPOINT",
            "LLMKUBE_MIRROR_ACCESS_KEY_ID",
            "LLMKUBE_MIRROR_SECRET_ACCESS_KEY",
            "LLMKUBE_MIRROR_REGION",
            "LLMKUBE_MIRROR_ONLY",
            "LLMKUBE_MIRROR_PUBLISH",
        ),
    ),
    (
        "signed models",
        (
            "LLMKUBE_SIGNING_KEY",
            "LLMKUBE_SIGNING_CERTS",
            "LLMKUBE_SIGNATURE",
            "LLMKUBE_SIGNED_DIGEST",
        ),
    ),
    ("local sources", ("LLMKUBE_HOST_MODEL", "LLMKUBE_ALLOWED_HOST_ROOTS")),
    ("TLS and proxies", ("LLMKUBE_CA_DIR", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY")),
    (
        "waits and retries",
        (
            "LLMKUBE_CONNECT_TIMEOUT",
            "LLMKUBE_STALL_TIMEOUT",
            "LLMKUBE_RETRIES",
            "LLMKUBE_MAX_RETRY_WAIT",
            "LLMKUBE_LOCK_TIMEOUT",
        ),
    ),
    ("throughput", ("LLMKUBE_CONNECTIONS", "LLMKUBE_FILES_IN_FLIGHT", "LLMKUBE_DIRECT_IO")),
    (
        "sharded prefetch and Job identity",
        ("LLMKUBE_SHARDS", "JOB_COMPLETION_INDEX", "LLMKUBE_JOB_ID"),
    ),
    (
        "outputs",
        (
            "LLMKUBE_TERMINATION_LOG",
            "LLMKUBE_LOG_FORMAT",
            "LLMKUBE_LOG_LEVEL",
            "PROGRESS_INTERVAL",
            "LLMKUBE_REMEDY_WORDS",
        ),
    ),
    ("KServe mode", ("LLMKUBE_ARCHIVE_MAX_BYTES", "LLMKUBE_ARCHIVE_MAX_FILES")),
)
OTHER = "other settings"

# Shown verbatim after the options: each runs as written in a shell.
EXAMPLES = """\
Every option is also an environment variable (the name in brackets); a flag wins.
Full table: docs/configuration.md.

Examples:

  # one file from a local web server into ./cache/tiny, then check it offline
  export MODEL_SOURCE=http://127.0.0.1:8000/tiny.gguf
  export CACHE_DIR=$PWD/cache/tiny MODEL_PATH=$PWD/cache/tiny/tiny.gguf
  llmkube-stager stage && llmkube-stager verify

  # a Hugging Face repository's files, pinned to a revision, as a prefetch Job runs it
  llmkube-stager stage --model-source hf://Qwen/Qwen2.5-0.5B-Instruct@main \\
    --cache-dir /models/qwen --model-files $'config.json\\nmodel.safetensors' \\
    --llmkube-prefetch-stager true

  # an S3 prefix, asking the origin on every start whether a file changed
  AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... llmkube-stager stage \\
    --model-source s3://models/llama/ --cache-dir /models/llama \\
    --llmkube-refresh-policy OnChange
"""


def grouped(envs: Iterable[str]) -> list[tuple[str, list[str]]]:
    """`envs` in the groups' order; the ungrouped ones last, under OTHER."""
    given = list(envs)
    sections = [(title, [e for e in members if e in given]) for title, members in GROUPS]
    named = {e for _, members in GROUPS for e in members}
    sections.append((OTHER, [e for e in given if e not in named]))
    return [(title, envs) for title, envs in sections if envs]


def variable_names() -> list[str]:
    return [var.env for var in VARS]
