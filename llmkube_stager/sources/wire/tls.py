"""TLS trust: the system roots PLUS the certificates in LLMKUBE_CA_DIR.

Additive, never replacing (spec §3.6: replacing the roots broke public HF pulls
in production). Built once per run, only when an https URL is used.
"""

from __future__ import annotations

import os
import ssl

from llmkube_stager.errors import ConfigError

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


def cert_error(exc: BaseException | None) -> ssl.SSLCertVerificationError | None:
    """The TLS verification failure in the chain (its `verify_message` is
    OpenSSL's reason, which curl printed too), or None."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ssl.SSLCertVerificationError):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


_SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",  # Debian, Alpine (curlimages)
    "/etc/pki/tls/certs/ca-bundle.crt",  # RHEL
    "/etc/ssl/cert.pem",
)


def check_ca_bundle(ca_dir: str) -> None:
    """A bundle file (write_ca_bundle) will be possible: with certificates
    in LLMKUBE_CA_DIR, some temporary directory must be writable. Checked
    before anything is written, writing nothing that stays."""
    if not ca_files(ca_dir):
        return
    import tempfile

    try:
        tempfile.gettempdir()  # tries each candidate with a throw-away file
    except OSError as exc:
        raise _no_tmp(exc) from None


def write_ca_bundle(ca_dir: str) -> str | None:
    """A PEM file holding the system roots plus LLMKUBE_CA_DIR, for clients
    that take a path (botocore); the caller removes it. None when there are
    no extra certificates: the client's defaults apply, and nothing is
    written (a read-only root filesystem has no /tmp: #13 item 3). Falls back to
    the custom certificates alone when no system bundle exists (spec §3.6)."""
    extra = ca_files(ca_dir)
    if not extra:
        return None
    candidates = (ssl.get_default_verify_paths().cafile, *_SYSTEM_BUNDLES)
    system = next((p for p in candidates if p and os.path.isfile(p)), None)
    parts = ([_read(system)] if system else []) + [_read(p) for p in extra]
    import tempfile

    try:
        fd, path = tempfile.mkstemp(prefix="llmkube-ca-", suffix=".crt")
    except OSError as exc:
        raise _no_tmp(exc) from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(b"\n".join(parts))
    return path


def _no_tmp(exc: OSError) -> ConfigError:
    return ConfigError(
        f"LLMKUBE_CA_DIR holds certificates, and botocore needs them in one file, but no "
        f"temporary directory is writable ({exc.strerror}): mount an emptyDir at /tmp "
        "or set TMPDIR"
    )


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read().strip() + b"\n"
