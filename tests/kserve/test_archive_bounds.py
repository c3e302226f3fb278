"""#31 item 6: an archive is unpacked inside the memory the shipped
ClusterStorageContainer gives (128Mi): every header and the member count
are bounded, a bound hit is ModelSourceRejected naming it, and the real
CLI's peak RSS stays <= 64 MiB for the issue's archives (a 0.25 MB
.tar.gz of ten 1-byte members with 30 MB pax headers reached 382 MiB, a
100,000-member tar 122 MiB). The peak is the CLI subprocess's own, read
with getrusage(RUSAGE_CHILDREN) by a wrapper process whose only child it
is."""

from __future__ import annotations

import io
import lzma
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.harness.archives import tar_built, tar_of, uncompressed_tar_of_one_byte_members
from tests.harness.origin import Origin
from tests.harness.pod import Pod, Run
from tests.kserve.test_archives import visible

pytestmark = pytest.mark.e2e

PEAK_RSS_BOUND_KIB = 64 << 10
# Runs argv[2:], writes the peak RSS (KiB) of that child to argv[1], exits
# with its code.
_PEAK_RSS_WRAPPER = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[2:])\n"
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
    "sys.exit(code if code >= 0 else 128 - code)\n"
)


def run_measured(pod: Pod, *args: str, **env: str) -> tuple[Run, int]:
    """The CLI's run and its peak RSS in KiB."""
    out = pod.tmp / "peak-rss"
    wrapper = [sys.executable, "-c", _PEAK_RSS_WRAPPER, str(out)]
    run = pod.run(*args, wrapper=wrapper, env=env, timeout=240)
    return run, int(out.read_text())


def pax_bomb() -> bytes:
    """The issue's archive: ten 1-byte members, each with a 30 MB pax header."""

    def build(tar: tarfile.TarFile) -> None:
        for i in range(10):
            info = tarfile.TarInfo(f"f{i}")
            info.size = 1
            info.pax_headers = {"comment": "x" * (30 << 20)}
            tar.addfile(info, io.BytesIO(b"x"))

    return tar_built(build, "w:gz", format=tarfile.PAX_FORMAT)


def test_the_pax_header_bomb_is_refused_naming_the_bound_within_64_mib(
    pod: Pod, origin: Origin
) -> None:
    body = pax_bomb()
    assert len(body) < 400 << 10
    origin.put("/a/m.tar.gz", body)
    dest = pod.tmp / "mnt" / "models"

    run, peak_kib = run_measured(pod, f"{origin.url}/a/m.tar.gz", str(dest))

    assert run.returncode == 4, str(run)
    doc = run.compact_term()
    assert doc["reason"] == "ModelSourceRejected", doc
    assert "extended (pax or GNU long name) header holds" in doc["message"], doc
    assert visible(dest) == {}
    assert peak_kib <= PEAK_RSS_BOUND_KIB, f"peak RSS {peak_kib} KiB"


MEMBERS = 100_000


def many_members_tar(path: Path) -> None:
    """What tarfile.open(path, "w") writes for these members, made from one
    header (tests/harness/archives.py; tarfile itself took ~5 s)."""
    names = (f"d{i % 100}/file-{i:06d}.bin" for i in range(MEMBERS))
    path.write_bytes(uncompressed_tar_of_one_byte_members(names))


def many_members_zip(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as zipped:
        for i in range(MEMBERS):
            zipped.writestr(f"d{i % 100}/file-{i:06d}.bin", b"x")


def test_the_one_header_tar_is_what_tarfile_writes(tmp_path: Path) -> None:
    """The harness's quick builder of many_members_tar, against tarfile."""
    names = [f"d{i % 100}/file-{i:06d}.bin" for i in range(250)] + ["x" * 100, "a/b"]
    with tarfile.open(tmp_path / "ref.tar", "w") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))

    assert uncompressed_tar_of_one_byte_members(names) == (tmp_path / "ref.tar").read_bytes()


@pytest.mark.parametrize(
    ("name", "build"), [("many.tar", many_members_tar), ("many.zip", many_members_zip)]
)
def test_a_100000_member_archive_unpacks_and_restarts_within_64_mib(
    pod: Pod, name: str, build: object
) -> None:
    archive = pod.tmp / "src" / name
    archive.parent.mkdir()
    build(archive)  # type: ignore[operator]
    dest = pod.tmp / "mnt" / "models"

    run, peak_kib = run_measured(pod, f"file://{archive}", str(dest))

    assert run.returncode == 0, str(run)
    assert peak_kib <= PEAK_RSS_BOUND_KIB, f"cold: peak RSS {peak_kib} KiB"
    assert sum(1 for p in dest.glob("d*/file-*.bin") if p.read_bytes() == b"x") == MEMBERS
    warm, warm_peak_kib = run_measured(pod, f"file://{archive}", str(dest))
    assert warm.returncode == 0, str(warm)
    assert warm.compact_term()["stats"]["reused"] == MEMBERS
    assert warm_peak_kib <= PEAK_RSS_BOUND_KIB, f"warm: peak RSS {warm_peak_kib} KiB"


# -- each bound, hit: ModelSourceRejected naming it, nothing in DEST_DIR ----------------


def _raw_header(name: str, kind: bytes, payload: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(payload)
    pad = -len(payload) % tarfile.BLOCKSIZE
    return info.tobuf(format=tarfile.USTAR_FORMAT) + payload + b"\0" * pad


def _pax_payload(records: dict[str, str]) -> bytes:
    out = b""
    for key, value in records.items():
        body = f" {key}={value}\n".encode()
        length = len(body) + 1
        while len(str(length)) + len(body) != length:
            length += 1
        out += str(length).encode() + body
    return out


def _plain_member(name: str, data: bytes = b"x") -> bytes:
    return _raw_header(name, tarfile.REGTYPE, data)


def _end() -> bytes:
    return b"\0" * (2 * tarfile.BLOCKSIZE)


def long_gnu_name() -> bytes:
    return (
        _raw_header("././@LongLink", tarfile.GNUTYPE_LONGNAME, b"n" * (80 << 10))
        + _plain_member("x")
        + _end()
    )


def header_chain() -> bytes:
    longs = b"".join(
        _raw_header("././@LongLink", tarfile.GNUTYPE_LONGNAME, f"name{i}\0".encode())
        for i in range(6)
    )
    return longs + _plain_member("x") + _end()


def global_headers() -> bytes:
    out = b""
    for i in range(3):
        records = {f"k{i}.{j}": "v" * 1000 for j in range(50)}
        out += _raw_header("pax_global_header", tarfile.XGLTYPE, _pax_payload(records))
        out += _plain_member(f"f{i}")
    return out + _end()


def sparse_member() -> bytes:
    return _raw_header("s", tarfile.GNUTYPE_SPARSE, b"") + _end()


def name_too_long() -> bytes:
    payload = _pax_payload({"path": "/".join(["d" * 200] * 30)})
    return _raw_header("./PaxHeaders/x", tarfile.XHDTYPE, payload) + _plain_member("x") + _end()


BOUND_TARS = {
    "gnu-long-name-80k": (long_gnu_name, "extended (pax or GNU long name) header holds 81920"),
    "six-headers-for-one-member": (header_chain, "more than 4 extended headers precede one"),
    "global-pax-headers": (global_headers, "global pax headers hold more than 65536"),
    "sparse": (sparse_member, "sparse member"),
    "name-past-path-max": (name_too_long, "longer than Linux allows"),
}


@pytest.mark.parametrize("kind", sorted(BOUND_TARS))
def test_a_tar_past_a_header_bound_is_refused_naming_it(
    pod: Pod, origin: Origin, kind: str
) -> None:
    build, words = BOUND_TARS[kind]
    origin.put("/b/m.tar", build())
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/b/m.tar", str(dest))

    assert run.returncode == 4, str(run)
    doc = run.compact_term()
    assert doc["reason"] == "ModelSourceRejected", doc
    assert words in doc["message"], doc
    assert visible(dest) == {}
    assert not list((dest / ".llmkube-stager").glob("unpack.*"))


def test_a_zip_stating_too_many_members_is_refused_before_any_is_written(
    pod: Pod, origin: Origin
) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped:
        for i in range(51):
            zipped.writestr(f"f{i}", b"x")
    origin.put("/b/m.zip", buffer.getvalue())
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/b/m.zip", str(dest), env={"LLMKUBE_ARCHIVE_MAX_FILES": "50"})

    assert run.returncode == 4, str(run)
    assert "it holds 51 members, more than 50" in run.compact_term()["message"]
    assert visible(dest) == {}


def test_an_xz_needing_more_than_the_memory_bound_is_refused_naming_the_preset(
    pod: Pod, origin: Origin
) -> None:
    origin.put("/b/m.tar.xz", lzma.compress(tar_of({"config.json": b"{}"}, "w"), preset=9))
    dest = pod.tmp / "mnt" / "models"

    run, peak_kib = run_measured(pod, f"{origin.url}/b/m.tar.xz", str(dest))

    assert run.returncode == 4, str(run)
    assert "xz -9" in run.compact_term()["message"]
    assert peak_kib <= PEAK_RSS_BOUND_KIB, f"peak RSS {peak_kib} KiB"
