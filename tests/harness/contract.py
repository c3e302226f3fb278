"""The contract's reason table as the tests know it (CONTRACT §5 and
docs/operations.md "Reasons"), written down here independently of
`llmkube_stager.errors`, so that a change to the code's mapping fails a test
instead of silently changing what a Job's podFailurePolicy sees.

Exit codes: 0 success; 1 a failure restarting may fix (`retryable` true);
4 a failure retrying as is cannot fix; 2 usage/configuration found before any
I/O; 3 internal error.
"""

from __future__ import annotations

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
