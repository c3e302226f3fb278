"""`plan` without `--probe` asks no source, whatever the source kind
(CONTRACT §2): on a cold cache, where only the source could say what the
model is (a prefix's or repo's files, the hub's commit, an artifact's
manifest), it exits 0 and says so, naming `--probe`; with `--probe` it asks.

The source's endpoint is a loopback listener that counts the connections
it accepts; the CLI runs under the audit hook, so a name looked up (DNS)
counts too."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.hub import FakeHub
from tests.harness.loopback import HOST, accept_until
from tests.harness.pod import Pod, Run

pytestmark = pytest.mark.e2e


class CountingListener:
    """Accepts connections on 127.0.0.1, counts them, hangs up at once."""

    def __init__(self) -> None:
        self._sock = socket.create_server((HOST, 0))
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=accept_until, args=(self._sock, self._stop, self._count), daemon=True
        )
        self._thread.start()

    def _count(self, conn: socket.socket) -> None:
        self.accepted += 1
        conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self._sock.close()


@pytest.fixture
def listener() -> Iterator[CountingListener]:
    counting = CountingListener()
    yield counting
    counting.close()


S3_KEYS = {"AWS_ACCESS_KEY_ID": "AKIAOFFLINE", "AWS_SECRET_ACCESS_KEY": "offline-secret"}


def _env(kind: str, port: int, cache: Path) -> dict[str, str]:
    """A cold cache (an empty CACHE_DIR) for each source kind, its endpoint the listener."""
    end = f"http://127.0.0.1:{port}"
    cache_dir = {"CACHE_DIR": str(cache)}
    single = {"CACHE_DIR": str(cache), "MODEL_PATH": str(cache / "m.gguf")}
    return {
        "hf-file": {"MODEL_SOURCE": "hf://org/repo/m.gguf", "HF_ENDPOINT": end, **single},
        # Without MODEL_PATH a path is a folder the hub lists.
        "hf-path-listed": {"MODEL_SOURCE": "hf://org/repo/m.gguf", "HF_ENDPOINT": end, **cache_dir},
        "hf-repo": {"MODEL_SOURCE": "hf://org/repo", "HF_ENDPOINT": end, **cache_dir},
        "s3-key": {
            "MODEL_SOURCE": "s3://bucket/key.gguf",
            "AWS_ENDPOINT_URL": end,
            **S3_KEYS,
            **single,
        },
        "s3-key-listed": {
            "MODEL_SOURCE": "s3://bucket/key.gguf",
            "AWS_ENDPOINT_URL": end,
            **S3_KEYS,
            **cache_dir,
        },
        "s3-prefix": {
            "MODEL_SOURCE": "s3://bucket/prefix/",
            "AWS_ENDPOINT_URL": end,
            **S3_KEYS,
            **cache_dir,
        },
        "gs-prefix": {
            "MODEL_SOURCE": "gs://bucket/prefix/",
            "STORAGE_EMULATOR_HOST": f"127.0.0.1:{port}",
            **cache_dir,
        },
        "azure-prefix": {
            "MODEL_SOURCE": "https://acct.blob.core.windows.net/models/prefix/",
            "AZURE_STORAGE_CONNECTION_STRING": (
                f"AccountName=acct;BlobEndpoint={end}/acct;AccountKey=b2ZmbGluZQ==;"
            ),
            **cache_dir,
        },
        "oci": {
            "MODEL_SOURCE": f"oci://127.0.0.1:{port}/org/model:v1",
            "LLMKUBE_OCI_INSECURE": "true",
            **cache_dir,
        },
        "http-file": {"MODEL_SOURCE": f"{end}/m.gguf", **single},
        "s3-key-mirror": {
            "MODEL_SOURCE": "s3://bucket/key.gguf",
            "AWS_ENDPOINT_URL": end,
            "LLMKUBE_MIRROR": f"{end}/mirror/",
            **S3_KEYS,
            **single,
        },
    }[kind]


KINDS = (
    "hf-file",
    "hf-path-listed",
    "hf-repo",
    "s3-key",
    "s3-key-listed",
    "s3-prefix",
    "gs-prefix",
    "azure-prefix",
    "oci",
    "http-file",
    "s3-key-mirror",
)


NAMED_WHOLE = ("hf-file", "s3-key", "http-file", "s3-key-mirror")


def _nothing_left(run: Run, listener: CountingListener) -> None:
    assert listener.accepted == 0, str(run)
    assert run.network == [], str(run)


@pytest.mark.parametrize("kind", KINDS)
def test_plan_on_a_cold_cache_asks_no_source_but_probe_does(
    pod: Pod, tmp_path: Path, listener: CountingListener, kind: str
) -> None:
    env = _env(kind, listener.port, tmp_path / "cache")
    (tmp_path / "cache").mkdir()
    table = pod.run("plan", env=env, audit=True)
    _nothing_left(table, listener)
    assert table.returncode == 0, str(table)
    as_json = pod.run("plan", "--json", env=env, audit=True)
    _nothing_left(as_json, listener)
    assert as_json.returncode == 0, str(as_json)
    doc = json.loads(as_json.stdout)
    if kind in NAMED_WHOLE:  # MODEL_PATH names the file: nothing is unknown
        assert doc["offline"] == {"unknown": [], "message": ""}, doc
        assert [row["decision"] for row in doc["files"]] == ["fetch"], doc
    else:
        assert "--probe" in table.stdout, table.stdout
        assert doc["offline"]["unknown"], doc
        assert "--probe" in doc["offline"]["message"], doc
        assert doc["files"] == [] and doc["needs_network"] is True, doc
    assert list((tmp_path / "cache").iterdir()) == []
    # --probe asks the source, as before.
    probed = pod.run("plan", "--probe", env=env, timeout=120)
    assert listener.accepted > 0, str(probed)


WARM_FILES = {"config.json": b'{"model_type": "llama"}\n', "model.safetensors": b"w" * 30_000}


def test_plan_on_a_warm_listed_cache_is_made_from_the_records(
    pod: Pod, hub: FakeHub, tmp_path: Path
) -> None:
    """A repo `stage` listed once: `plan` makes the plan from the recorded
    listing with no request; under OnChange it says what it did not ask
    (whether the listing changed), and `--probe` asks the hub."""
    hub.add_repo("org/warm", WARM_FILES)
    env = {"MODEL_SOURCE": "hf://org/warm", "HF_ENDPOINT": hub.url, "CACHE_DIR": str(pod.cache_dir)}
    pod.run(env=env).ok()
    before = len(hub.requests())
    run = pod.run("plan", "--json", env=env, audit=True)
    assert run.returncode == 0 and run.network == [], str(run)
    doc = json.loads(run.stdout)
    assert {row["file"]: row["decision"] for row in doc["files"]} == {
        "config.json": "reuse",
        "model.safetensors": "reuse",
    }, doc
    assert doc["offline"] == {"unknown": [], "message": ""}, doc
    on_change = pod.run("plan", env=env, audit=True, LLMKUBE_REFRESH_POLICY="OnChange")
    assert on_change.returncode == 0 and on_change.network == [], str(on_change)
    assert "whether the files of hf://org/warm" in on_change.stdout, on_change.stdout
    assert "--probe" in on_change.stdout, on_change.stdout
    assert len(hub.requests()) == before
    probed = pod.run("plan", "--probe", env=env, LLMKUBE_REFRESH_POLICY="OnChange")
    assert probed.returncode == 0, str(probed)
    assert "unknown:" not in probed.stdout, probed.stdout
    assert len(hub.requests()) > before
