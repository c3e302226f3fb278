"""A throwaway certificate authority for TLS tests on 127.0.0.1.

`make_ca(directory)` creates a self-signed CA and a server certificate it
signed for 127.0.0.1 (IP SAN) and `localhost`, writes the PEMs, and builds the
SSL contexts the loopback servers and clients need:

- `ca.server_context()` for `Origin(tls=...)`, `FakeHub(tls=...)` or the S3
  server helper (a `(cert, key)` pair via `ca.cert_pem`/`ca.key_pem`);
- `ca.ca_dir`: a directory holding only the CA certificate, fit for
  `LLMKUBE_CA_DIR` (the ConfigMap the operator mounts at /custom-certs);
- `ca.client_context()`: a client context trusting only this CA.

The server certificate is a leaf (CA:FALSE, serverAuth) signed by a separate
CA certificate, the way a private PKI looks, so a client that trusts the CA
but not the leaf itself is what is being tested.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_FILE_NAME = "llmkube-test-ca.crt"
_VALID_FOR = datetime.timedelta(days=2)


@dataclass(frozen=True)
class LocalCA:
    """PEM paths of one generated CA and the server certificate it issued."""

    ca_dir: Path  # only the CA certificate: LLMKUBE_CA_DIR
    ca_pem: Path
    cert_pem: Path  # server leaf certificate
    key_pem: Path  # server private key (PKCS#8, unencrypted)

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.cert_pem), str(self.key_pem))
        return context

    def client_context(self) -> ssl.SSLContext:
        """Trusts this CA only (no system roots)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cafile=str(self.ca_pem))
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "llmkube-stager tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _ca_certificate(key: ec.EllipticCurvePrivateKey, now: datetime.datetime) -> x509.Certificate:
    name = _name("llmkube-stager test CA")
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + _VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _server_certificate(
    key: ec.EllipticCurvePrivateKey,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    hosts: tuple[str, ...],
    now: datetime.datetime,
) -> x509.Certificate:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + _VALID_FOR)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )


def make_ca(directory: str | Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> LocalCA:
    """Create a CA and a server certificate for `hosts` under `directory`."""
    root = Path(directory)
    ca_dir = root / "ca"
    ca_dir.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _ca_certificate(ca_key, now)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _server_certificate(server_key, ca_key, ca_cert, hosts, now)
    ca_pem = ca_dir / CA_FILE_NAME
    ca_pem.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_pem = root / "server.crt"
    cert_pem.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    key_pem = root / "server.key"
    key_pem.write_bytes(_key_pem(server_key))
    key_pem.chmod(0o600)
    return LocalCA(ca_dir=ca_dir, ca_pem=ca_pem, cert_pem=cert_pem, key_pem=key_pem)
