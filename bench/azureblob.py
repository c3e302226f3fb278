"""KServe's initializer and the agent on an Azure Blob prefix (#33 item 5),
side by side as bench/kserve.py runs its cases: the same arguments
(`SRC_URI DEST_DIR`, the URI the real account's:
`https://devstoreaccount1.blob.core.windows.net/kserve/models/llm`), the
same environment (AZURE_STORAGE_ACCESS_KEY, KServe's variable: KServe signs
each request with the shared key, the agent a SAS with it), each into a
fresh directory, the sha256 of every file checked after every run.

KServe's `_download_azure_blob` builds the account's URL from the URI and
takes no endpoint, so both tools are sent to the origin the way a pod
behind a proxy is: HTTPS_PROXY names the bench's CONNECT proxy
(connectproxy.py), which tunnels `<account>.blob.core.windows.net:443` to
Azurite (npm, `.azurite/` from `tools/system-deps test`) speaking TLS with
a certificate for that name from a CA of the run's (tests/harness/tlsca.py).
KServe's aiohttp trusts it by SSL_CERT_FILE (REQUESTS_CA_BUNDLE too, for
the sync clients), the agent by LLMKUBE_CA_DIR. Azurite and the proxy are
billed as the origin. The blobs are put whole (one Put Blob each), so each
carries a Content-MD5: the agent checks it (hashed while received), KServe
does not. Cases: kserve-azure (KSERVE_AZURE_BLOBS x KSERVE_AZURE_MIB blobs
plus small files).
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time

from benchlib import ROOT, Case, Context, Row, wait_port, watch_origin, write_model
from kserve import _SMALL, DURABLE_TARGET, kserve_env, side_by_side

AZURE_BLOBS = int(os.environ.get("KSERVE_AZURE_BLOBS", "4"))
# At most 64 MiB: one Put Blob, so the service records its Content-MD5.
AZURE_MIB = int(os.environ.get("KSERVE_AZURE_MIB", "64"))
ACCOUNT = "devstoreaccount1"
# Azurite's well-known emulator key (public, in Microsoft's documentation).
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
HOST = f"{ACCOUNT}.blob.core.windows.net"
CONTAINER = "kserve"
PREFIX = "models/llm"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _azurite_binary() -> str:
    local = os.path.join(ROOT, ".azurite", "node_modules", ".bin", "azurite-blob")
    if not os.path.exists(local):
        raise RuntimeError("Azurite is missing: run `tools/system-deps test` (npm azurite@3)")
    return local


def _start_azurite(ctx: Context, cert: str, key: str) -> int:
    """Azurite over TLS; product-style URLs (the account from the Host)."""
    port = _free_port()
    work = ctx.out("azurite")
    os.makedirs(work, exist_ok=True)
    proc = subprocess.Popen(
        [
            _azurite_binary(),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",
            "--silent",
            "--cert",
            cert,
            "--key",
            key,
        ],
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    ctx.servers.on_stop(proc.terminate)
    watch_origin(proc.pid)
    wait_port(port, 30)
    return port


def _start_proxy(ctx: Context, azurite_port: int) -> int:
    port_file = os.path.join(ctx.work, "connectproxy.port")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "connectproxy.py")
    proc = subprocess.Popen(
        [sys.executable, script, port_file, f"{HOST}:443=127.0.0.1:{azurite_port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    ctx.servers.on_stop(proc.terminate)
    watch_origin(proc.pid)
    deadline = time.monotonic() + 20
    while not os.path.exists(port_file):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("the CONNECT proxy did not start")
        time.sleep(0.05)
    with open(port_file) as handle:
        return int(handle.read())


def _upload(azurite_port: int, ca_pem: str, blobs: dict[str, str]) -> None:
    """name -> local path, put whole straight to Azurite (path-style)."""
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient(
        f"https://127.0.0.1:{azurite_port}/{ACCOUNT}",
        credential={"account_name": ACCOUNT, "account_key": ACCOUNT_KEY},
        connection_verify=ca_pem,
        max_single_put_size=AZURE_MIB << 20,
    )
    container = service.get_container_client(CONTAINER)
    if not container.exists():
        container.create_container()
    for name, path in blobs.items():
        with open(path, "rb") as handle:
            container.upload_blob(name, handle.read(), overwrite=True)
        md5 = container.get_blob_client(name).get_blob_properties().content_settings.content_md5
        if not md5:
            raise RuntimeError(f"Azurite recorded no Content-MD5 for {name}")


def _make_model(directory: str) -> dict[str, str]:
    files = {}
    for i in range(AZURE_BLOBS):
        path = os.path.join(directory, f"model-{i + 1:05d}-of-{AZURE_BLOBS:05d}.safetensors")
        files[path] = write_model(path, AZURE_MIB, 400 + i)
    for name, data in _SMALL.items():
        path = os.path.join(directory, name)
        with open(path, "wb") as handle:
            handle.write(data)
        files[path] = hashlib.sha256(data).hexdigest()
    return files


def azure_case(ctx: Context) -> list[Row]:
    if AZURE_MIB > 64:
        raise RuntimeError("KSERVE_AZURE_MIB above 64 would be put in blocks, without an MD5")
    sys.path.insert(0, ROOT)
    from tests.harness.tlsca import make_ca

    ca = make_ca(ctx.out("azure-pki"), hosts=(HOST, "127.0.0.1"))
    azurite_port = _start_azurite(ctx, str(ca.cert_pem), str(ca.key_pem))
    generated = ctx.model("kserve-azure", _make_model)
    model = {os.path.basename(path): sha for path, sha in generated.files.items()}
    _upload(
        azurite_port,
        str(ca.ca_pem),
        {f"{PREFIX}/{os.path.basename(path)}": path for path in generated.files},
    )
    proxy = f"http://127.0.0.1:{_start_proxy(ctx, azurite_port)}"
    env = kserve_env(
        ctx,
        HTTPS_PROXY=proxy,
        https_proxy=proxy,
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        AZURE_STORAGE_ACCESS_KEY=ACCOUNT_KEY,
        SSL_CERT_FILE=str(ca.ca_pem),
        REQUESTS_CA_BUNDLE=str(ca.ca_pem),
        LLMKUBE_CA_DIR=str(ca.ca_dir),
    )
    case = f"kserve: Azure prefix, {AZURE_BLOBS} x {AZURE_MIB} MiB + {len(_SMALL)} small"
    nbytes = sum(os.path.getsize(p) for p in generated.files)
    sources = list(generated.files)
    src = f"https://{HOST}/{CONTAINER}/{PREFIX}"
    return side_by_side(ctx, case, src, env, model, nbytes, sources, DURABLE_TARGET)


CASES = [Case("kserve-azure", azure_case, "KServe's initializer vs the agent: an Azure prefix")]
