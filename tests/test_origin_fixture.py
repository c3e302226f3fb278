"""Tests for the loopback origin fixture itself, using only http.client/socket as clients."""

from __future__ import annotations

import datetime
import http.client
import json
import os
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.origin import Blackhole, Fault, Origin, closed_port_url
from tests.harness.sample import gguf_like, safetensors_like, write_sample_tree

DATA = bytes(range(256)) * 40  # 10240 bytes, every offset easy to check
PATH = "/models/a.gguf"


@pytest.fixture
def origin(origin: Origin) -> Origin:
    """The suite's origin, serving DATA at PATH."""
    origin.put(PATH, DATA)
    return origin


def _conn(origin: Origin, timeout: float = 5.0) -> http.client.HTTPConnection:
    port = int(origin.url.rsplit(":", 1)[1])
    return http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)


def _get(
    origin: Origin, path: str = PATH, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[http.client.HTTPResponse, bytes]:
    conn = _conn(origin)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp, resp.read()
    finally:
        conn.close()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


# --- normal protocol -------------------------------------------------------------------


def test_url_is_loopback(origin: Origin) -> None:
    assert origin.url.startswith("http://127.0.0.1:")
    assert not origin.url.endswith("/")


def test_get_whole_body_and_headers(origin: Origin) -> None:
    resp, body = _get(origin)
    assert resp.status == 200
    assert body == DATA
    assert resp.getheader("Content-Length") == str(len(DATA))
    assert resp.getheader("Accept-Ranges") == "bytes"
    assert resp.getheader("Content-Type") == "application/octet-stream"
    assert resp.getheader("ETag", "").startswith('"') and len(resp.getheader("ETag", "")) == 18
    assert resp.getheader("Last-Modified")


def test_head_headers_without_body(origin: Origin) -> None:
    resp, body = _get(origin, method="HEAD")
    get_resp, _ = _get(origin)
    assert resp.status == 200 and body == b""
    assert resp.getheader("Content-Length") == str(len(DATA))
    assert resp.getheader("ETag") == get_resp.getheader("ETag")
    assert resp.getheader("Accept-Ranges") == "bytes"


@pytest.mark.parametrize(
    ("spec", "start", "end"),
    [("bytes=100-199", 100, 200), ("bytes=10000-", 10000, len(DATA)), ("bytes=5-99999", 5, None)],
)
def test_range_206(origin: Origin, spec: str, start: int, end: int | None) -> None:
    end = len(DATA) if end is None else end
    resp, body = _get(origin, headers={"Range": spec})
    assert resp.status == 206
    assert body == DATA[start:end]
    assert resp.getheader("Content-Range") == f"bytes {start}-{end - 1}/{len(DATA)}"
    assert resp.getheader("Content-Length") == str(end - start)


def test_range_past_end_is_416(origin: Origin) -> None:
    resp, _ = _get(origin, headers={"Range": f"bytes={len(DATA)}-"})
    assert resp.status == 416
    assert resp.getheader("Content-Range") == f"bytes */{len(DATA)}"


def test_if_range(origin: Origin) -> None:
    etag = _get(origin, method="HEAD")[0].getheader("ETag", "")
    resp, body = _get(origin, headers={"Range": "bytes=10-", "If-Range": etag})
    assert resp.status == 206 and body == DATA[10:]
    resp, body = _get(origin, headers={"Range": "bytes=10-", "If-Range": '"stale"'})
    assert resp.status == 200 and body == DATA


def test_unknown_path_404(origin: Origin) -> None:
    assert _get(origin, "/nope")[0].status == 404


def test_keep_alive_two_requests_one_connection(origin: Origin) -> None:
    conn = _conn(origin)
    try:
        conn.request("HEAD", PATH)
        first = conn.getresponse()
        first.read()
        sock = conn.sock
        conn.request("GET", PATH, headers={"Range": "bytes=0-9"})
        second = conn.getresponse()
        assert second.read() == DATA[:10]
        assert conn.sock is sock and sock is not None  # http.client did not reconnect
    finally:
        conn.close()
    assert [r.method for r in origin.requests(PATH)] == ["HEAD", "GET"]


def test_put_replaces_content_and_etag(origin: Origin) -> None:
    etag1 = _get(origin, method="HEAD")[0].getheader("ETag")
    origin.put(PATH, b"new content")
    resp, body = _get(origin)
    assert body == b"new content"
    assert resp.getheader("ETag") not in (None, etag1)


def test_put_etag_options_and_remove(origin: Origin) -> None:
    origin.put("/none", b"x", etag=None)
    origin.put("/custom", b"x", etag='W/"v1"')
    assert _get(origin, "/none")[0].getheader("ETag") is None
    assert _get(origin, "/custom")[0].getheader("ETag") == 'W/"v1"'
    # A weak tag never satisfies If-Range (strong comparison).
    resp, _ = _get(origin, "/custom", headers={"Range": "bytes=0-", "If-Range": 'W/"v1"'})
    assert resp.status == 200
    origin.remove("/none")
    assert _get(origin, "/none")[0].status == 404


def test_request_log(origin: Origin) -> None:
    _get(origin, PATH + "?rev=1", headers={"Range": "bytes=0-99", "X-Test": "yes"})
    _get(origin, method="HEAD")
    _get(origin, "/nope")
    (rec,) = origin.requests(PATH, "GET")
    assert rec.path == PATH + "?rev=1"
    assert rec.status == 206 and rec.body_bytes == 100
    assert rec.headers["range"] == "bytes=0-99" and rec.headers["x-test"] == "yes"
    assert [r.status for r in origin.requests()] == [206, 200, 404]
    assert origin.requests(method="HEAD")[0].body_bytes == 0
    origin.clear_log()
    assert origin.requests() == []


# --- faults ----------------------------------------------------------------------------


def test_fault_status_retry_after_times(origin: Origin) -> None:
    origin.set_fault(PATH, Fault(status=503, retry_after="2", times=2, methods=("GET",)))
    assert _get(origin, method="HEAD")[0].status == 200  # HEAD is not a matching method
    for _ in range(2):
        resp, body = _get(origin)
        assert resp.status == 503 and resp.getheader("Retry-After") == "2"
        assert body != DATA
    resp, body = _get(origin)
    assert resp.status == 200 and body == DATA
    assert [r.status for r in origin.requests(PATH, "GET")] == [503, 503, 200]


def test_fault_cleared(origin: Origin) -> None:
    origin.set_fault(PATH, Fault(status=500))
    assert _get(origin)[0].status == 500
    origin.set_fault(PATH, None)
    assert _get(origin)[0].status == 200


def test_fault_truncate_after(origin: Origin) -> None:
    origin.set_fault(PATH, Fault(truncate_after=1000))
    conn = _conn(origin)
    try:
        conn.request("GET", PATH)
        resp = conn.getresponse()
        assert resp.getheader("Content-Length") == str(len(DATA))
        with pytest.raises(http.client.IncompleteRead) as info:
            resp.read()
        assert info.value.partial == DATA[:1000]
    finally:
        conn.close()
    assert origin.requests(PATH)[0].body_bytes == 1000


def test_fault_stall_after(origin: Origin) -> None:
    origin.set_fault(PATH, Fault(stall_after=500))
    conn = _conn(origin, timeout=0.3)
    try:
        conn.request("GET", PATH)
        resp = conn.getresponse()
        assert resp.read(500) == DATA[:500]
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            resp.read(1)
        assert time.monotonic() - started >= 0.25
    finally:
        conn.close()


def test_fault_ignore_range(origin: Origin) -> None:
    origin.set_fault(PATH, Fault(ignore_range=True))
    resp, body = _get(origin, headers={"Range": "bytes=100-"})
    assert resp.status == 200 and body == DATA
    assert resp.getheader("Accept-Ranges") is None
    assert _get(origin, method="HEAD")[0].getheader("Accept-Ranges") is None


def test_fault_wrong_content_range(origin: Origin) -> None:
    origin.set_fault(PATH, Fault(wrong_content_range=True))
    resp, body = _get(origin, headers={"Range": "bytes=100-199"})
    assert resp.status == 206 and body == DATA[100:200]
    assert resp.getheader("Content-Range") == f"bytes 101-200/{len(DATA)}"


def test_fault_no_content_length(origin: Origin) -> None:
    origin.set_fault(PATH, Fault(no_content_length=True))
    resp, body = _get(origin)
    assert resp.status == 200 and body == DATA
    assert resp.getheader("Content-Length") is None
    assert resp.getheader("Connection") == "close"


def test_fault_head_content_length_zero(origin: Origin) -> None:
    origin.set_fault(PATH, Fault(head_content_length_zero=True))
    assert _get(origin, method="HEAD")[0].getheader("Content-Length") == "0"
    resp, body = _get(origin)
    assert resp.getheader("Content-Length") == str(len(DATA)) and body == DATA


def test_fault_redirect(origin: Origin) -> None:
    origin.put("/real", b"moved")
    origin.set_fault(PATH, Fault(redirect_to=origin.url + "/real"))
    resp, _ = _get(origin)
    assert resp.status == 302
    assert resp.getheader("Location") == origin.url + "/real"
    assert _get(origin, "/real")[1] == b"moved"


def test_fault_rate_and_delay(origin: Origin) -> None:
    origin.put("/slow", DATA * 5)  # 51200 bytes at 200 kB/s: ~0.25 s
    origin.set_fault("/slow", Fault(rate_bytes_per_s=200_000))
    started = time.monotonic()
    assert _get(origin, "/slow")[1] == DATA * 5
    assert 0.2 <= time.monotonic() - started < 2.0
    origin.set_fault(PATH, Fault(delay_s=0.2, times=1))
    started = time.monotonic()
    assert _get(origin)[0].status == 200
    assert time.monotonic() - started >= 0.19


def test_fault_applies_to_unknown_path(origin: Origin) -> None:
    origin.set_fault("/ghost", Fault(status=429, retry_after="1"))
    resp, _ = _get(origin, "/ghost")
    assert resp.status == 429 and resp.getheader("Retry-After") == "1"


# --- lifecycle -------------------------------------------------------------------------


def test_close_is_prompt_with_stalled_and_idle_clients() -> None:
    srv = Origin().start()
    srv.put(PATH, DATA)
    srv.set_fault(PATH, Fault(stall_after=10))
    idle = _conn(srv)
    idle.request("HEAD", "/nope")
    idle.getresponse().read()  # keep-alive connection now parked in the server
    stalled = _conn(srv)
    stalled.request("GET", PATH)
    resp = stalled.getresponse()
    assert resp.read(10) == DATA[:10]
    started = time.monotonic()
    srv.close()
    assert time.monotonic() - started < 1.0
    with pytest.raises(http.client.IncompleteRead):
        resp.read()  # the stalled body ends (EOF) instead of hanging
    stalled.close()
    idle.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", _port(srv.url)), timeout=1).close()


def test_close_twice_and_context_manager() -> None:
    with Origin() as srv:
        srv.put("/x", b"x")
        assert _get(srv, "/x")[1] == b"x"
    srv.close()


# --- timeouts helpers ------------------------------------------------------------------


def test_blackhole_accept_connects_but_never_answers() -> None:
    with Blackhole("accept") as hole:
        assert hole.url.startswith("http://127.0.0.1:")
        for _ in range(3):
            sock = socket.create_connection(("127.0.0.1", _port(hole.url)), timeout=0.5)
            with sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                sock.settimeout(0.2)
                with pytest.raises(TimeoutError):
                    sock.recv(1)


def test_blackhole_syn_drop_connect_times_out() -> None:
    with Blackhole("syn-drop") as hole:
        for _ in range(2):
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                socket.create_connection(("127.0.0.1", _port(hole.url)), timeout=0.5)
            assert time.monotonic() - started >= 0.45


def test_closed_port_refuses() -> None:
    url = closed_port_url()
    assert url.startswith("http://127.0.0.1:")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", _port(url)), timeout=1)


# --- directories, TLS, CLI -------------------------------------------------------------


def test_serve_directory(origin: Origin, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.bin").write_bytes(DATA)
    (tmp_path.parent / "secret.txt").write_text("no")
    origin.serve_directory(str(tmp_path), prefix="/disk")
    resp, body = _get(origin, "/disk/sub/f.bin")
    assert resp.status == 200 and body == DATA
    etag = resp.getheader("ETag", "")
    assert etag and resp.getheader("Accept-Ranges") == "bytes"
    resp, body = _get(origin, "/disk/sub/f.bin", headers={"Range": "bytes=7-", "If-Range": etag})
    assert resp.status == 206 and body == DATA[7:]
    head, _ = _get(origin, "/disk/sub/f.bin", method="HEAD")
    assert head.getheader("Content-Length") == str(len(DATA))
    for bad in ("/disk/../secret.txt", "/disk/%2e%2e/secret.txt", "/disk/sub", "/sub/f.bin"):
        assert _get(origin, bad)[0].status == 404, bad
    # Read on every request: a rewrite is visible at once, with a new ETag.
    (tmp_path / "sub" / "f.bin").write_bytes(b"changed!")
    os.utime(tmp_path / "sub" / "f.bin", ns=(0, 1_000_000_000))
    resp, body = _get(origin, "/disk/sub/f.bin")
    assert body == b"changed!" and resp.getheader("ETag") != etag


def _self_signed(tmp_path: Path) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


def test_tls_origin(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.load_verify_locations(cert)
    with Origin(tls=server_ctx) as srv:
        srv.put(PATH, DATA)
        assert srv.url.startswith("https://127.0.0.1:")
        conn = http.client.HTTPSConnection("127.0.0.1", _port(srv.url), context=client_ctx)
        try:
            conn.request("GET", PATH, headers={"Range": "bytes=1-"})
            resp = conn.getresponse()
            assert resp.status == 206 and resp.read() == DATA[1:]
        finally:
            conn.close()


def test_cli_serves_directory_until_sigterm(tmp_path: Path) -> None:
    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "m.bin").write_bytes(DATA)
    port_file = tmp_path / "url"
    served = str(tmp_path / "served")
    module = "tests.harness.origin"
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--dir", served, "--port-file", str(port_file)],
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],  # so the package imports from the checkout
    )
    try:
        deadline = time.monotonic() + 10
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        url = port_file.read_text()
        conn = http.client.HTTPConnection("127.0.0.1", _port(url), timeout=5)
        conn.request("GET", "/m.bin")
        assert conn.getresponse().read() == DATA
        conn.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=5)
        assert proc.returncode == 0
        assert f"origin listening on {url}" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- sample generators -----------------------------------------------------------------


def test_gguf_like() -> None:
    data = gguf_like(3 << 20, seed=7)
    assert len(data) == 3 << 20
    assert data[:4] == b"GGUF" and struct.unpack("<I", data[4:8]) == (3,)
    assert data == gguf_like(3 << 20, seed=7)
    assert data != gguf_like(3 << 20, seed=8)
    # Blocks differ, so a resume at a wrong MiB-aligned offset cannot go unnoticed.
    assert data[1 << 20 : 2 << 20] != data[2 << 20 : 3 << 20]
    assert len(gguf_like(8)) == 8
    with pytest.raises(ValueError):
        gguf_like(7)


@pytest.mark.parametrize("size", [200, 1000, 4 << 20, (1 << 20) + 3])
def test_safetensors_like(size: int) -> None:
    data = safetensors_like(size, seed=1)
    assert len(data) == size
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    n = size - 8 - header_len
    assert header["__metadata__"] == {"format": "pt"}
    assert header["weight"] == {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}


def test_sample_generation_is_deterministic() -> None:
    first = gguf_like(3 << 20, seed=7)
    assert len(first) == 3 << 20
    assert first == gguf_like(3 << 20, seed=7)
    assert first != gguf_like(3 << 20, seed=8)


def test_write_sample_tree(tmp_path: Path) -> None:
    layout = write_sample_tree(str(tmp_path), gguf_size=1 << 20, shard_size=512 << 10)
    assert layout["single"] == ["model.gguf"]
    assert layout["multi"][0] == "model-00001-of-00002.safetensors"
    assert set(layout["multi"]) == {
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "tokenizer/tokenizer.json",
    }
    assert (tmp_path / "single" / "model.gguf").read_bytes()[:4] == b"GGUF"
    assert (tmp_path / "single" / "model.gguf").stat().st_size == 1 << 20
    for rel in layout["multi"]:
        assert (tmp_path / "multi" / rel).is_file()
    shard = tmp_path / "multi" / "model-00002-of-00002.safetensors"
    assert shard.stat().st_size == 512 << 10
    json.loads((tmp_path / "multi" / "config.json").read_text())
