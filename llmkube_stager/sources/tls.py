"""TLS trust: the system roots PLUS the certificates in LLMKUBE_CA_DIR.

Additive, never replacing (spec §3.6: replacing the roots broke public HF pulls
in production). Built once per run, only when an https URL is used.
"""

from __future__ import annotations

import os
import ssl

_CERT_SUFFIXES = (".crt", ".pem", ".cer")


def ca_files(ca_dir: str) -> list[str]:
    """Regular files of the CA directory (ConfigMap mounts use symlinks)."""
    try:
        names = sorted(os.listdir(ca_dir))
    except OSError:
        return []
    paths = [os.path.join(ca_dir, n) for n in names if not n.startswith(".")]
    return [p for p in paths if os.path.isfile(p)]


def make_ssl_context(ca_dir: str) -> ssl.SSLContext:
    context = ssl.create_default_context()
    for path in ca_files(ca_dir):
        try:
            context.load_verify_locations(cafile=path)
        except (ssl.SSLError, OSError, ValueError):
            # A ConfigMap may carry non-certificate keys; skip them.
            continue
    return context


def is_cert_failure(exc: BaseException | None) -> bool:
    """True when a TLS verification failure is anywhere in the chain."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ssl.SSLCertVerificationError):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False
