"""KServe's initializer and the agent on a gs:// prefix (#33 item 5), side
by side as bench/kserve.py runs its cases: the same arguments
(`SRC_URI DEST_DIR`), the same environment (STORAGE_EMULATOR_HOST, no
credentials: KServe's `storage.Client()` takes the emulator's anonymous
client, the agent its anonymous requests), each into a fresh directory,
the sha256 of every file checked after every run.

The origin is gcp-storage-emulator (the dev extras' GCS emulator), started
as a process of its own and billed as the origin. It is single-threaded and
reads a whole object into memory for every request, ranged or not, so it
is the bound here, not the network: the agent's ranged connections each
make it read the object again. The case is run with LLMKUBE_CONNECTIONS=1
(one stream per file, KServe's own shape: one `download_to_filename` per
blob) so that the emulator's cost per request does not decide the ratio;
the row says so. Cases: kserve-gcs (KSERVE_GCS_OBJECTS x KSERVE_GCS_MIB
objects plus small files).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import subprocess
import sys
from urllib.parse import quote, urlencode

from benchlib import Case, Context, Row, wait_port, watch_origin, write_model
from kserve import _SMALL, DURABLE_TARGET, kserve_env, side_by_side

GCS_OBJECTS = int(os.environ.get("KSERVE_GCS_OBJECTS", "4"))
GCS_MIB = int(os.environ.get("KSERVE_GCS_MIB", "32"))
BUCKET = "kserve"
PREFIX = "models/llm"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_emulator(ctx: Context) -> str:
    port = _free_port()
    emulator = os.path.join(os.path.dirname(sys.executable), "gcp-storage-emulator")
    proc = subprocess.Popen(
        [
            emulator,
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--in-memory",
            "-q",
            "--default-bucket",
            BUCKET,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ctx.servers.on_stop(proc.terminate)
    watch_origin(proc.pid)
    wait_port(port)
    return f"http://127.0.0.1:{port}"


def _upload(endpoint: str, name: str, path: str) -> None:
    host, _, port = endpoint.removeprefix("http://").partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    with open(path, "rb") as handle:
        query = urlencode({"uploadType": "media", "name": name})
        conn.request("POST", f"/upload/storage/v1/b/{quote(BUCKET)}/o?{query}", body=handle.read())
    answer = conn.getresponse()
    body = answer.read()
    conn.close()
    if answer.status != 200:
        raise RuntimeError(f"upload of {name} failed: {answer.status} {body[:200]!r}")
    json.loads(body)


def _make_model(directory: str) -> dict[str, str]:
    files = {}
    for i in range(GCS_OBJECTS):
        path = os.path.join(directory, f"model-{i + 1:05d}-of-{GCS_OBJECTS:05d}.safetensors")
        files[path] = write_model(path, GCS_MIB, 300 + i)
    for name, data in _SMALL.items():
        path = os.path.join(directory, name)
        with open(path, "wb") as handle:
            handle.write(data)
        files[path] = hashlib.sha256(data).hexdigest()
    return files


def gcs_case(ctx: Context) -> list[Row]:
    endpoint = _start_emulator(ctx)
    generated = ctx.model("kserve-gcs", _make_model)
    model = {}
    for path, sha in generated.files.items():
        name = os.path.basename(path)
        _upload(endpoint, f"{PREFIX}/{name}", path)
        model[name] = sha
    # No metadata server is asked by either tool: google-auth's variables
    # point at a closed loopback port, and NO_GCE_CHECK skips its probe.
    closed = f"127.0.0.1:{_free_port()}"
    env = kserve_env(
        ctx,
        STORAGE_EMULATOR_HOST=endpoint,
        GCE_METADATA_HOST=closed,
        GCE_METADATA_IP=closed,
        NO_GCE_CHECK="true",
        LLMKUBE_CONNECTIONS="1",
    )
    case = f"kserve: GCS prefix (emulator), {GCS_OBJECTS} x {GCS_MIB} MiB + {len(_SMALL)} small"
    nbytes = sum(os.path.getsize(p) for p in generated.files)
    sources = list(generated.files)
    return side_by_side(
        ctx, case, f"gs://{BUCKET}/{PREFIX}", env, model, nbytes, sources, DURABLE_TARGET
    )


CASES = [Case("kserve-gcs", gcs_case, "KServe's initializer vs the agent: a GCS prefix")]
