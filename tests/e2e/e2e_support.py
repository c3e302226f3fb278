"""What only the end-to-end tests need beyond tests/harness: the contract's
variables and flags, partial names, import traces, waiting on a running
stager, a TLS origin."""

from __future__ import annotations

import re
import signal
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.harness.tlsca import make_ca

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
# Partials of `<dest>`: the shell's `<dest>.<key>.tmp` or a per-writer
# `<dest>.<key>.<writer>.llmkube-part.tmp` (`.llmkube-part` before #14)
# (spec §4.2, CONTRACT §4).
_PARTIAL_RE = r"\.[0-9a-f]{12}(?:\.tmp|\.[0-9a-f]+\.llmkube-part(?:\.tmp)?)"


def flag_of(var: str) -> str:
    return "--" + var.lower().replace("_", "-")


def partials_of(dest: Path) -> list[Path]:
    pattern = re.compile(re.escape(dest.name) + _PARTIAL_RE)
    if not dest.parent.is_dir():
        return []
    return sorted(p for p in dest.parent.iterdir() if pattern.fullmatch(p.name))


def import_lines(stderr: str) -> set[str]:
    """Module names from `python -X importtime` output."""
    mods = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                mods.add(name)
    return mods


def wait_for(predicate: Any, timeout: float, what: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the stager exited early ({proc.returncode}) waiting for {what}")
        if time.monotonic() > deadline:
            proc.send_signal(signal.SIGKILL)
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def tls_server_context(tmp: Path) -> tuple[ssl.SSLContext, Path]:
    """A private CA and a certificate for 127.0.0.1: the server context for
    `Origin(tls=...)` and a directory holding only the CA, fit for
    LLMKUBE_CA_DIR."""
    ca = make_ca(tmp / "pki")
    return ca.server_context(), ca.ca_dir
