"""The contract as the tests know it, written down here independently of
the package: its variables and their flags (CONTRACT §3), and its reason
table (CONTRACT §5 and docs/operations.md "Reasons") with the remedy of a
FUSE refusal, so that a change to the code's mapping fails a test instead of
silently changing what a Job's podFailurePolicy or an operator sees.

Exit codes: 0 success; 1 a failure restarting may fix (`retryable` true);
4 a failure retrying as is cannot fix; 2 usage/configuration found before any
I/O; 3 internal error.
"""

from __future__ import annotations

# Every variable of CONTRACT §3; each must also be a flag.
CONTRACT_VARS = (
    "MODEL_SOURCE",
    "CACHE_DIR",
    "MODEL_PATH",
    "MODEL_FILES",
    "S3_BUCKET",
    "S3_KEY",
    "S3_PREFIX",
    "MODEL_SHA256",
    "MODEL_FILE_SHA256",
    "LLMKUBE_REFRESH_POLICY",
    "LLMKUBE_PREFETCH_STAGER",
    "HF_TOKEN",
    "HF_ENDPOINT",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "LLMKUBE_CA_DIR",
    "LLMKUBE_HOST_MODEL",
    "LLMKUBE_TERMINATION_LOG",
    "PROGRESS_INTERVAL",
    "LLMKUBE_LOG_FORMAT",
    "LLMKUBE_CONNECT_TIMEOUT",
    "LLMKUBE_STALL_TIMEOUT",
    "LLMKUBE_RETRIES",
    "LLMKUBE_LOCK_TIMEOUT",
)


def flag_of(var: str) -> str:
    return "--" + var.lower().replace("_", "-")


EXIT_OK, EXIT_RETRYABLE, EXIT_USAGE, EXIT_INTERNAL, EXIT_PERMANENT = 0, 1, 2, 3, 4

# reason -> (retryable, exit code)
REASONS: dict[str, tuple[bool, int]] = {
    "ModelTransferSucceeded": (False, EXIT_OK),
    # Restarting can help by itself.
    "ModelSourceUnreachable": (True, EXIT_RETRYABLE),
    "ModelSourceUnavailable": (True, EXIT_RETRYABLE),
    "ModelSourceRateLimited": (True, EXIT_RETRYABLE),
    "ModelSourceChanged": (True, EXIT_RETRYABLE),
    "ModelTransferCancelled": (True, EXIT_RETRYABLE),
    "ModelCacheLockTimeout": (True, EXIT_RETRYABLE),
    "ModelCacheTruncated": (True, EXIT_RETRYABLE),
    "ModelCacheDisconnected": (True, EXIT_RETRYABLE),
    # Retrying as is cannot help: someone must change something.
    "ModelSourceUnauthorized": (False, EXIT_PERMANENT),
    "ModelSourceNotFound": (False, EXIT_PERMANENT),
    "ModelSourceRejected": (False, EXIT_PERMANENT),
    "ModelSourceUntrusted": (False, EXIT_PERMANENT),
    "ModelTransferOutOfSpace": (False, EXIT_PERMANENT),
    "ModelTransferSizeMismatch": (False, EXIT_PERMANENT),
    "ModelTransferChecksumMismatch": (False, EXIT_PERMANENT),
    "ModelSignatureInvalid": (False, EXIT_PERMANENT),
    "ModelCacheLockUnsupported": (False, EXIT_PERMANENT),
    "ModelCacheUnwritable": (False, EXIT_PERMANENT),
    "ModelCacheFailing": (False, EXIT_PERMANENT),
    "ModelCacheEmpty": (False, EXIT_PERMANENT),
    "ModelCacheIncomplete": (False, EXIT_PERMANENT),
    "SourceNotAllowed": (False, EXIT_PERMANENT),
    # Found before any I/O.
    "InvalidConfiguration": (False, EXIT_USAGE),
    "InvalidFileSet": (False, EXIT_USAGE),
    "ModelStagerInternalError": (False, EXIT_INTERNAL),
}


def exit_code_of(reason: str) -> int:
    """The exit code the contract gives a failure with this reason."""
    return REASONS[reason][1]


def retryable_of(reason: str) -> bool:
    return REASONS[reason][0]


# The remedy of ModelCacheLockUnsupported for an http(s) source (a serving
# pod refused on FUSE storage).
REMEDY_HTTP = (
    "set spec.modelCache.prefetch: true on every InferenceService using this claim, or use "
    "storage with cross-node flock support"
)
