"""A throwaway certificate authority for TLS tests on 127.0.0.1 (trustme).

`make_ca(directory)` creates a CA and a server certificate it signed for
127.0.0.1 (IP SAN) and `localhost`, writes the PEMs, and builds the SSL
contexts the loopback servers and clients need:

- `ca.server_context()` for `Origin(tls=...)`, `FakeHub(tls=...)` or the S3
  server helper (a `(cert, key)` pair via `ca.cert_pem`/`ca.key_pem`);
- `ca.ca_dir`: a directory holding only the CA certificate, fit for
  `LLMKUBE_CA_DIR` (the ConfigMap the operator mounts at /custom-certs);
- `ca.client_context()`: a client context trusting only this CA;
- `tls_server_context(tmp)`: a new CA's server context and CA directory at once.

The server certificate is a leaf signed by a separate CA certificate, the way
a private PKI looks, so a client that trusts the CA but not the leaf itself is
what is being tested.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme

CA_FILE_NAME = "llmkube-test-ca.crt"


@dataclass(frozen=True)
class LocalCA:
    """PEM paths of one generated CA and the server certificate it issued."""

    ca_dir: Path  # only the CA certificate: LLMKUBE_CA_DIR
    ca_pem: Path
    cert_pem: Path  # server leaf certificate (then the chain)
    key_pem: Path  # server private key (unencrypted)

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.cert_pem), str(self.key_pem))
        return context

    def client_context(self) -> ssl.SSLContext:
        """Trusts this CA only (no system roots)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cafile=str(self.ca_pem))
        return context


def make_ca(directory: str | Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> LocalCA:
    """Create a CA and a server certificate for `hosts` under `directory`."""
    root = Path(directory)
    ca_dir = root / "ca"
    ca_dir.mkdir(parents=True, exist_ok=True)
    authority = trustme.CA(organization_name="llmkube-stager tests")
    leaf = authority.issue_cert(*hosts)
    ca_pem = ca_dir / CA_FILE_NAME
    authority.cert_pem.write_to_path(str(ca_pem))
    cert_pem = root / "server.crt"
    cert_pem.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    key_pem = root / "server.key"
    leaf.private_key_pem.write_to_path(str(key_pem))
    key_pem.chmod(0o600)
    return LocalCA(ca_dir=ca_dir, ca_pem=ca_pem, cert_pem=cert_pem, key_pem=key_pem)


def tls_server_context(tmp: Path) -> tuple[ssl.SSLContext, Path]:
    """A private CA and a certificate for 127.0.0.1 under `tmp/pki`: the
    server context for `Origin(tls=...)` and a directory holding only the CA,
    fit for LLMKUBE_CA_DIR."""
    ca = make_ca(tmp / "pki")
    return ca.server_context(), ca.ca_dir
