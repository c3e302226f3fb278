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

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Self

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
_START_TIMEOUT_S = 30.0

__all__ = ["ACCOUNT", "ACCOUNT_KEY", "Azurite", "AzuriteUnavailable", "S3Fault", "S3Request"]


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

    def requests(self, method: str | None = None) -> list[S3Request]:
        return [] if self.front is None else self.front.requests(method)

    def set_fault(self, path: str, fault: S3Fault) -> None:
        assert self.front is not None
        self.front.set_fault(path, fault)

    def clear(self) -> None:
        if self.front is not None:
            self.front.clear()
