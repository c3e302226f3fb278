"""O_DIRECT partial writes and the receive/hash/write pipeline (transfer/directio.py,
transfer/pipeline.py; #6).

Real files on the test machine's disk (ext4 here and in CI). What is
asserted: the bytes in the file, how much of it the page cache holds after
the write (`fincore`: the point of O_DIRECT), that a write error reaches the
receiving thread, and that a resumed partial of odd size (the alignment edge)
publishes the right bytes in both write modes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from llmkube_stager.cache.fs import probe_fs
from llmkube_stager.transfer.directio import (
    ALIGN_BYTES,
    DirectReader,
    PartialWriter,
    aligned_buffer,
    fill_limit,
)
from llmkube_stager.transfer.pipeline import INLINE_MAX_BYTES, Pipeline
from tests.harness.disk import seed, shell_partial
from tests.harness.features import missing_feature
from tests.harness.sample import payload

MIB = 1 << 20
PATH = "/files/model.gguf"


def _resident_bytes(path: Path) -> int:
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return int(out.strip())


def _drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.fixture
def disk_dir(tmp_path: Path) -> Path:
    fs = probe_fs(str(tmp_path))
    if not fs.direct_io_ok:
        missing_feature(
            f"needs a local ext4/xfs/btrfs test directory for O_DIRECT, got {fs.fstype}"
        )
    return tmp_path


def _write_file(path: Path, data: bytes, direct: bool, offset: int = 0) -> bool:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    writer = PartialWriter(fd, direct)
    buffer = aligned_buffer(len(data) + ALIGN_BYTES)
    buffer[: len(data)] = data
    try:
        with memoryview(buffer) as view:
            writer.write(view[: len(data)], offset)
        used_direct = writer.direct
    finally:
        writer.close()
        os.fsync(fd)
        os.close(fd)
    return used_direct


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "buffered"])
def test_partial_writer_bytes_and_what_stays_in_the_page_cache(
    disk_dir: Path, direct: bool
) -> None:
    data = payload(8 * MIB + 100, seed=1)  # an odd tail, as at the end of a file
    path = disk_dir / "part"

    used_direct = _write_file(path, data, direct)

    resident = _resident_bytes(path)  # before reading it back fills the cache
    assert used_direct is direct
    if direct:
        # Only the buffered tail page went through the page cache.
        assert resident <= 2 * ALIGN_BYTES, resident
    else:
        assert resident >= 8 * MIB, resident
    assert path.read_bytes() == data


def test_an_odd_offset_is_written_through_the_page_cache_and_stays_right(disk_dir: Path) -> None:
    head = payload(1000, seed=2)
    rest = payload(3 * MIB, seed=3)
    path = disk_dir / "part"
    path.write_bytes(head)

    _write_file(path, rest, direct=True, offset=len(head))

    assert path.read_bytes() == head + rest


def test_fill_limit_brings_an_odd_offset_back_to_alignment() -> None:
    assert fill_limit(0, 4 * MIB) == 4 * MIB
    assert fill_limit(1000, 4 * MIB) == ALIGN_BYTES - 1000
    assert fill_limit(ALIGN_BYTES * 3, 4 * MIB) == 4 * MIB
    assert fill_limit(1000, 100) == 100


@pytest.mark.parametrize(
    ("offset", "length"), [(0, 5000), (1, 4095), (4095, 2), (12345, 1 * MIB), (3 * MIB - 7, 100)]
)
def test_direct_reader_returns_exactly_the_asked_span(
    disk_dir: Path, offset: int, length: int
) -> None:
    data = payload(3 * MIB + 11, seed=4)
    path = disk_dir / "f"
    path.write_bytes(data)
    _drop_cache(path)
    fd = os.open(path, os.O_RDONLY)
    reader = DirectReader(fd, 2 * MIB)
    try:
        got = bytes(reader.read(offset, length))
    finally:
        reader.close()
        os.close(fd)
    assert got == data[offset : offset + min(length, 2 * MIB)]


def test_a_write_error_reaches_the_receiving_thread(tmp_path: Path) -> None:
    path = tmp_path / "ro"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)  # every pwrite fails with EBADF
    pipe = Pipeline(PartialWriter(fd, False), hashlib.sha256(), depth=2)
    try:
        buffer = pipe.take()
        pipe.submit(buffer, 4096, 0)
        with pytest.raises(OSError):
            for _ in range(20):  # the pool runs dry or the failure shows first
                pipe.take()
        with pytest.raises(OSError):
            pipe.close()
    finally:
        os.close(fd)


def test_an_inline_pipeline_raises_a_write_error_at_once(tmp_path: Path) -> None:
    """A small file's pipeline has no threads (#16): the failed write is the
    submit's own error, and the buffer is back for nothing else to block on."""
    path = tmp_path / "ro"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)  # every pwrite fails with EBADF
    pipe = Pipeline(PartialWriter(fd, False), hashlib.sha256(), depth=1, inline=True)
    try:
        buffer = pipe.take()
        with pytest.raises(OSError):
            pipe.submit(buffer, 4096, 0)
        assert pipe.take() is buffer
        pipe.close()
    finally:
        os.close(fd)


# (size, odd offset): a partial a buffered writer (or the scripts) left, of
# a file the threaded pipeline receives, and of one under INLINE_MAX_BYTES
# that one buffer takes without threads (filled up to alignment, then the rest).
_ODD_PARTIALS = {
    "pipelined": (9 * MIB + 333, 5 * MIB + 1001),
    "inline": (INLINE_MAX_BYTES - 4096 + 333, 5001),
}


@pytest.mark.parametrize("shape", sorted(_ODD_PARTIALS))
@pytest.mark.parametrize("mode", ["auto", "on", "off"])
def test_an_odd_sized_partial_resumes_and_verifies_in_every_write_mode(
    origin, pod, mode: str, shape: str
) -> None:
    size, odd = _ODD_PARTIALS[shape]
    data = payload(size, seed=5)
    origin.put(PATH, data, etag='"vA"')
    dest = pod.dest()
    seed(shell_partial(dest, size, '"vA"'), data[:odd], age_s=3600)
    digest = hashlib.sha256(data).hexdigest()

    pod.stage(pod.single_env(origin.url + PATH, MODEL_SHA256=digest, LLMKUBE_DIRECT_IO=mode)).ok()

    (get,) = origin.requests(PATH, "GET")
    assert get.headers.get("range") == f"bytes={odd}-"
    assert get.body_bytes == size - odd
    assert dest.read_bytes() == data
    assert Path(f"{dest}.sha256").read_text().split()[:2] == [digest, str(size)]


@pytest.mark.parametrize(("mode", "cached"), [("auto", True), ("on", False), ("off", True)])
def test_the_write_mode_decides_whether_the_server_reads_from_memory(
    origin, pod, mode: str, cached: bool
) -> None:
    """#16: with room for it (the test machine has), `auto` leaves the staged
    file in the page cache, so the inference server's first read comes from
    memory; `on` writes it with O_DIRECT, past the cache."""
    size = 12 * MIB
    data = payload(size, seed=6)
    origin.put(PATH, data)
    dest = pod.dest()
    if not probe_fs(str(pod.cache_dir.parent)).direct_io_ok:
        missing_feature("needs a local ext4/xfs/btrfs test directory for O_DIRECT")
    digest = hashlib.sha256(data).hexdigest()

    pod.stage(pod.single_env(origin.url + PATH, MODEL_SHA256=digest, LLMKUBE_DIRECT_IO=mode)).ok()

    resident = _resident_bytes(dest)  # before any read of ours fills the cache
    if cached:
        assert resident == size
    else:
        assert resident < size // 4
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == digest
