"""Azurite, Microsoft's Azure Storage emulator (npm `azurite@3`, installed
into the project's `.azurite/` by `tools/system-deps test`), on 127.0.0.1,
behind the recording, fault-injecting front of the S3 tests (s3front.py:
it forwards every request unchanged, so SAS signatures are still checked
by Azurite against what was signed; a fault answers instead, as Azure
would, e.g. `503 ServerBusy`).

Blobs are put with azure-storage-blob (a dev extra) straight to Azurite,
never through the front: the front's log is the agent's requests only.
With a `ca`, Azurite runs with the test CA's certificate and `--oauth
basic` (it checks a bearer token's lifetime, issuer and audience, over
https only), and the front speaks TLS on both sides.
"""

from __future__ import annotations

import http.client
import itertools
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

from tests.harness.lifecycle import Lifecycle
from tests.harness.s3front import S3Fault, S3Front, S3Request
from tests.harness.tlsca import LocalCA

ROOT = Path(__file__).resolve().parents[2]
AZURITE_DIR = ROOT / ".azurite"
ACCOUNT = "devstoreaccount1"
# Azurite's well-known emulator key (public, in Microsoft's documentation).
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
# The account's second key (Azurite checks a SAS against both): one whose
# base64 ends in `sig==`, as about 1 in 16,384 account keys does, which the
# agent once took for a SAS (#41 item 2). Made for the suite, not a secret
# of any account.
SIG_ENDING_KEY = (
    "bujit3y0J7gdBemCMhW0xdIwKFQIaSM+r57SfVpH7+dHHQQVOGKTYs8oUyg7hDQFI4Ny+Ock7MfJwSLZBaNsig=="
)
_START_TIMEOUT_S = 30.0

# A request to any host but 127.0.0.1 (a real account's, were the endpoint
# ever not moved to the emulator) goes to a closed loopback proxy port and
# fails there: nothing leaves the machine, not even DNS. Every pod of an
# Azure test gets it (tests/conftest.py `azure_loopback_only`).
LOOPBACK_ONLY = {"HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1"}
_CONTAINERS = itertools.count()

__all__ = [
    "ACCOUNT",
    "ACCOUNT_KEY",
    "LOOPBACK_ONLY",
    "SIG_ENDING_KEY",
    "Azurite",
    "AzuriteUnavailable",
    "S3Fault",
    "S3Request",
    "cleared",
    "container_sas",
    "new_container",
    "put",
    "put_many",
]


class AzuriteUnavailable(RuntimeError):
    pass


def azurite_binary() -> str | None:
    local = AZURITE_DIR / "node_modules" / ".bin" / "azurite-blob"
    if local.exists():
        return str(local)
    return shutil.which("azurite-blob")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Azurite(Lifecycle):
    def __init__(self, *, ca: LocalCA | None = None) -> None:
        self._ca = ca
        self._cert = ca.cert_pem if ca is not None else None
        self._key = ca.key_pem if ca is not None else None
        self._server: subprocess.Popen[bytes] | None = None
        self._work = ""
        self.port = 0
        self.front: S3Front | None = None

    @property
    def https(self) -> bool:
        return self._cert is not None

    def start(self) -> Self:
        binary = azurite_binary()
        if binary is None:
            raise AzuriteUnavailable("azurite (npm azurite@3) is not installed in .azurite/")
        self._work = tempfile.mkdtemp(prefix="llmkube-azurite-")
        self.port = _free_port()
        command = [
            binary,
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(self.port),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",
            "--disableProductStyleUrl",
            "--silent",
        ]
        if self._cert is not None and self._key is not None:
            command += ["--cert", str(self._cert), "--key", str(self._key), "--oauth", "basic"]
        self._server = subprocess.Popen(
            command,
            stdout=open(os.path.join(self._work, "azurite.log"), "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self._work,  # its debug and access logs, if any
            # The well-known key first (the SDK's, the suite's), a second
            # key of the account beside it (#41 item 2).
            env=os.environ | {"AZURITE_ACCOUNTS": f"{ACCOUNT}:{ACCOUNT_KEY}:{SIG_ENDING_KEY}"},
        )
        try:
            self._await_ready()
            if self._ca is None:
                self.front = S3Front(self.port).start()
            else:
                # TLS on both sides: Azurite takes a bearer token over https only.
                self.front = S3Front(
                    self.port,
                    tls=self._ca.server_context(),
                    upstream_tls=self._ca.client_context(),
                ).start()
        except BaseException:
            self.close()
            raise
        return self

    def _await_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._server is not None and self._server.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"Azurite did not start:\n{self.log_tail()}")

    def log_tail(self) -> str:
        try:
            return Path(self._work, "azurite.log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def close(self) -> None:
        if self.front is not None:
            self.front.close()
            self.front = None
        if self._server is not None:
            self._server.terminate()
            try:
                self._server.wait(5)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
            self._server = None
        if self._work:
            shutil.rmtree(self._work, ignore_errors=True)

    # -- what the agent is told ------------------------------------------------------------

    @property
    def direct_endpoint(self) -> str:
        scheme = "https" if self.https else "http"
        return f"{scheme}://127.0.0.1:{self.port}/{ACCOUNT}"

    @property
    def endpoint(self) -> str:
        """Where the agent is sent: the front."""
        if self.front is None:
            return self.direct_endpoint
        return f"{self.front.url}/{ACCOUNT}"

    def connection_string(self, *, key: bool = True, sas: str = "") -> str:
        parts = [f"AccountName={ACCOUNT}", f"BlobEndpoint={self.endpoint}"]
        if key:
            parts.append(f"AccountKey={ACCOUNT_KEY}")
        if sas:
            parts.append(f"SharedAccessSignature={sas}")
        return ";".join(parts) + ";"

    @staticmethod
    def source(container: str, path: str = "") -> str:
        return f"https://{ACCOUNT}.blob.core.windows.net/{container}/{path}"

    # -- the test's own client ---------------------------------------------------------------

    def service(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        kwargs: dict[str, Any] = {}
        if self._ca is not None:
            kwargs["connection_verify"] = str(self._ca.ca_pem)
        return BlobServiceClient(
            self.direct_endpoint,
            credential={"account_name": ACCOUNT, "account_key": ACCOUNT_KEY},
            **kwargs,
        )

    def direct_connection(self) -> http.client.HTTPConnection:
        """A connection straight to Azurite (not through the front)."""
        if self._ca is None:
            return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        context = self._ca.client_context()
        return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=30, context=context)

    def requests(self, method: str | None = None) -> list[S3Request]:
        return [] if self.front is None else self.front.requests(method)

    def set_fault(self, path: str, fault: S3Fault) -> None:
        assert self.front is not None
        self.front.set_fault(path, fault)

    def clear(self) -> None:
        if self.front is not None:
            self.front.clear()


def new_container(az: Azurite, prefix: str = "models", **options: Any) -> str:
    """A container of a name no other test uses (the emulator is the session's)."""
    name = f"{prefix}-{next(_CONTAINERS)}-{random.randrange(1 << 30):x}"
    az.service().create_container(name, **options)
    return name


def put(az: Azurite, container: str, name: str, data: bytes) -> str:
    """Uploads a blob (over any blob of that name); its ETag as the ETag
    header carries it."""
    blob = az.service().get_blob_client(container, name)
    answer = blob.upload_blob(data, overwrite=True)
    return str(answer["etag"])


def container_sas(container: str, *, valid_s: float = 3600, **permissions: bool) -> str:
    """A container SAS the account key signs, with these permissions
    (read, list, write, ...), valid for `valid_s` seconds from now (a
    negative value: expired that long ago)."""
    from datetime import UTC, datetime, timedelta

    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    return str(
        generate_container_sas(
            ACCOUNT,
            container,
            account_key=ACCOUNT_KEY,
            permission=ContainerSasPermissions(**permissions),
            expiry=datetime.now(UTC) + timedelta(seconds=valid_s),
        )
    )


def put_many(az: Azurite, container: str, names: list[str], data: bytes) -> None:
    """The same bytes under many names (a listing test's thousand blobs):
    Put Blob with a container SAS on one kept-alive connection, straight
    to Azurite (the SDK's client takes ~10 ms a blob, most of a listing
    test's time)."""
    sas = container_sas(container, create=True, write=True)
    conn = az.direct_connection()
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        for name in names:
            conn.request(
                "PUT",
                f"/{ACCOUNT}/{container}/{quote(name)}?{sas}",
                body=data,
                headers={"x-ms-blob-type": "BlockBlob"},
            )
            answer = conn.getresponse()
            body = answer.read()
            assert answer.status == 201, (answer.status, body[:300])
    finally:
        conn.close()


def cleared(server: Azurite) -> Iterator[Azurite]:
    """A fixture's body: the session's Azurite with its front's log, faults
    and caps cleared before and after the test."""
    server.clear()
    yield server
    server.clear()
