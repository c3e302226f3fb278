"""#24 review: the KServe drop-in mode against hostile input. Each test
here failed against the code before its fix (the commit says how)."""

from __future__ import annotations

import bz2
import io
import lzma
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.harness.canary import assert_no_leak, canary, outputs_of
from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload

pytestmark = pytest.mark.e2e

WEIGHTS_A = payload(64 << 10, seed=41)
WEIGHTS_B = payload(64 << 10, seed=42)


def _tar_of(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize("inner_first", [True, False], ids=["inner-first", "outer-first"])
def test_nested_dest_dirs_are_refused_before_any_io(
    pod: Pod, origin: Origin, inner_first: bool
) -> None:
    """One pair's DEST_DIR inside another's: the outer model's `sub/w.bin`
    and the inner model's `w.bin` are one name, and the later pair would
    replace the earlier one's file (a wrong file served, exit 0)."""
    origin.put("/a/m.tar.gz", _tar_of({"sub/w.bin": WEIGHTS_A}))
    origin.put("/b/w.bin", WEIGHTS_B)
    dest = pod.tmp / "mnt" / "models"
    outer = (f"{origin.url}/a/m.tar.gz", str(dest))
    inner = (f"{origin.url}/b/w.bin", str(dest / "sub"))
    pairs = (inner, outer) if inner_first else (outer, inner)

    run = pod.run(*pairs[0], *pairs[1])

    assert run.returncode == 2, str(run)
    assert run.compact_term()["reason"] == "InvalidConfiguration"
    assert "inside" in run.compact_term()["message"]
    assert origin.requests() == []
    assert not dest.exists() or not any(dest.rglob("w.bin"))


def test_a_dest_inside_another_pairs_private_dir_is_refused(pod: Pod, origin: Origin) -> None:
    origin.put("/b/w.bin", WEIGHTS_B)
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(
        f"{origin.url}/b/w.bin",
        str(dest),
        f"{origin.url}/b/w.bin",
        str(dest / ".llmkube-stager" / "model"),
    )

    assert run.returncode == 2, str(run)
    assert run.compact_term()["reason"] == "InvalidConfiguration"
    assert origin.requests() == []


def _zip_encrypted() -> bytes:
    """A member flagged encrypted (general purpose bit 0, in the local and
    the central header): zipfile asks for a password (RuntimeError)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped:
        zipped.writestr("model.onnx", WEIGHTS_A)
    raw = bytearray(buffer.getvalue())
    raw[6] |= 0x1  # local file header: flags at offset 6
    central = raw.rfind(b"PK\x01\x02")
    raw[central + 8] |= 0x1  # central directory header: flags at offset 8
    return bytes(raw)


def _zip_bad_stream(method: int) -> bytes:
    """A member whose compressed stream is garbage (CRC and sizes as
    declared): bz2 / lzma raise their own errors, not zlib.error."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as zipped:
        zipped.writestr("model.onnx", WEIGHTS_A)
    raw = bytearray(buffer.getvalue())
    # The local header is 30 bytes + the name; spoil the stream after it.
    start = 30 + len("model.onnx")
    for i in range(start, start + 64):
        raw[i] ^= 0x5A
    return bytes(raw)


@pytest.mark.parametrize(
    "build",
    [
        _zip_encrypted,
        lambda: _zip_bad_stream(zipfile.ZIP_BZIP2),
        lambda: _zip_bad_stream(zipfile.ZIP_LZMA),
    ],
    ids=["encrypted", "bad-bzip2", "bad-lzma"],
)
def test_an_unreadable_zip_is_rejected_not_an_internal_error(
    pod: Pod, origin: Origin, build: object
) -> None:
    assert callable(build)
    origin.put("/z/m.zip", build())
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/z/m.zip", str(dest))

    assert run.returncode == 4, str(run)
    assert run.compact_term()["reason"] == "ModelSourceRejected"
    assert not (dest / "model.onnx").exists()
    assert not list((dest / ".llmkube-stager").glob("unpack.*"))


@pytest.mark.parametrize("compress", [bz2.compress, lzma.compress], ids=["bzip2", "xz"])
def test_a_bad_compressed_tar_is_rejected_not_an_internal_error(
    pod: Pod, origin: Origin, compress: Callable[[bytes], bytes]
) -> None:
    good = io.BytesIO()
    with tarfile.open(fileobj=good, mode="w") as tar:
        info = tarfile.TarInfo("w.bin")
        info.size = len(WEIGHTS_A)
        tar.addfile(info, io.BytesIO(WEIGHTS_A))
    raw = bytearray(compress(good.getvalue()))
    for i in range(200, 260):
        raw[i] ^= 0x5A
    origin.put("/t/m.tar", bytes(raw))  # tarfile's r:* reads bzip2 / xz whatever the name
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/t/m.tar", str(dest))

    assert run.returncode == 4, str(run)
    assert run.compact_term()["reason"] == "ModelSourceRejected"
    assert not (dest / "w.bin").exists()


def test_s3_endpoint_with_userinfo_never_shows_the_password(pod: Pod, tmp_path: Path) -> None:
    secret = canary("s3epw")
    dest = pod.tmp / "mnt" / "models"
    env = {
        "S3_ENDPOINT": f"someone:{secret}@127.0.0.1:9",
        "S3_USE_HTTPS": "0",
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": canary("s3sk"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }

    run = pod.run("s3://bucket/iris", str(dest), env=env)

    assert run.returncode != 0, str(run)
    assert_no_leak(outputs_of(run, pod.tmp), {"S3_ENDPOINT password": secret})
