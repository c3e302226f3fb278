"""#24 item 2: .tar, .tar.gz/.tgz and .zip storage URIs are unpacked into
DEST_DIR as KServe does, safely: hostile archives are built here (members
climbing out, absolute names, links pointing out, devices, FIFOs, a bomb,
too many members) and each fails with ModelSourceRejected (exit 4) leaving
DEST_DIR without a model file and nothing written outside it."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.harness.archives import add_member, tar_built, zip_of
from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload

pytestmark = pytest.mark.e2e

WEIGHTS = payload(300 << 10, seed=9)
CONFIG = b'{"model_type": "sklearn"}'


def add_file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    add_member(tar, name, data, 0o4755)  # setuid: never kept


def add_special(tar: tarfile.TarFile, name: str, kind: bytes, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    tar.addfile(info)


def good_tree(tar: tarfile.TarFile) -> None:
    add_special(tar, "model", tarfile.DIRTYPE)
    add_file(tar, "model/weights.bin", WEIGHTS)
    add_file(tar, "config.json", CONFIG)
    add_special(tar, "model/latest.bin", tarfile.SYMTYPE, "weights.bin")
    add_special(tar, "copy.bin", tarfile.LNKTYPE, "model/weights.bin")


def visible(dest: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(dest)): p.read_bytes()
        for p in dest.rglob("*")
        if p.is_file() and not any(x.startswith(".") for x in p.relative_to(dest).parts)
    }


@pytest.mark.parametrize(
    ("name", "mode"), [("m.tar.gz", "w:gz"), ("m.tgz", "w:gz"), ("m.tar", "w")]
)
def test_a_tar_is_unpacked_into_dest_and_a_restart_moves_no_byte(
    pod: Pod, origin: Origin, name: str, mode: str
) -> None:
    origin.put(f"/a/{name}", tar_built(good_tree, mode))
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/a/{name}", str(dest))

    assert run.returncode == 0, str(run)
    assert run.compact_term()["outcome"] == "succeeded"
    assert visible(dest) == {
        "model/weights.bin": WEIGHTS,
        "model/latest.bin": WEIGHTS,
        "config.json": CONFIG,
        "copy.bin": WEIGHTS,
    }
    assert (dest / "model" / "latest.bin").is_symlink()
    # 0o4755 in the archive: the owner's exec bit kept, setuid never (#31 item 2).
    assert (dest / "model" / "weights.bin").stat().st_mode & 0o7777 == 0o755
    # The archive is gone once unpacked (as in KServe); no temp is left.
    private = dest / ".llmkube-stager"
    assert not list(private.rglob("m.t*")), list(private.rglob("*"))
    assert not list(private.glob("unpack.*"))
    assert sorted(p.name for p in dest.iterdir()) == [
        ".llmkube-stager",
        "config.json",
        "copy.bin",
        "model",
    ]

    origin.clear_log()
    warm = pod.run(f"{origin.url}/a/{name}", str(dest))
    assert warm.returncode == 0, str(warm)
    assert origin.requests() == []
    assert visible(dest)["model/weights.bin"] == WEIGHTS


def test_a_zip_is_unpacked(pod: Pod, origin: Origin) -> None:
    origin.put("/z/model.zip", zip_of({"model.onnx": WEIGHTS, "sub/labels.txt": b"a\nb\n"}))
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/z/model.zip", str(dest))

    assert run.returncode == 0, str(run)
    assert visible(dest) == {"model.onnx": WEIGHTS, "sub/labels.txt": b"a\nb\n"}


HOSTILE_TARS: dict[str, Callable[[tarfile.TarFile], None]] = {
    "dotdot": lambda t: add_file(t, "../../outside/evil", b"x"),
    "absolute": lambda t: add_file(t, "/tmp/evil-absolute", b"x"),
    "symlink-out": lambda t: add_special(t, "out", tarfile.SYMTYPE, "../../outside"),
    "symlink-absolute": lambda t: add_special(t, "etc", tarfile.SYMTYPE, "/etc/passwd"),
    "hardlink-out": lambda t: add_special(t, "h", tarfile.LNKTYPE, "../../outside/x"),
    "device": lambda t: add_special(t, "dev", tarfile.CHRTYPE),
    "fifo": lambda t: add_special(t, "fifo", tarfile.FIFOTYPE),
    "through-a-link": lambda t: (
        add_special(t, "l", tarfile.SYMTYPE, "sub"),
        add_file(t, "l/x", b"x"),
    ),
    "private-dir": lambda t: add_file(t, ".llmkube-stager/model/config.json", b"x"),
    "twice": lambda t: (add_file(t, "a", b"1"), add_file(t, "a", b"2")),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_TARS))
def test_a_hostile_tar_is_refused(pod: Pod, origin: Origin, kind: str) -> None:
    def build(tar: tarfile.TarFile) -> None:
        add_file(tar, "config.json", CONFIG)
        HOSTILE_TARS[kind](tar)

    origin.put("/h/m.tar.gz", tar_built(build))
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/h/m.tar.gz", str(dest))

    assert run.returncode == 4, str(run)
    doc = run.compact_term()
    assert doc["reason"] == "ModelSourceRejected", doc
    assert "rebuild the archive" in doc["remedy"]
    assert visible(dest) == {}
    assert not (pod.tmp / "outside").exists()
    assert not Path("/tmp/evil-absolute").exists()
    assert not list((dest / ".llmkube-stager").glob("unpack.*"))


@pytest.mark.parametrize(
    ("entries", "env"),
    [
        ({"../evil.txt": b"x"}, {}),
        ({"/abs.txt": b"x"}, {}),
        ({"bomb.bin": b"\0" * (8 << 20)}, {"LLMKUBE_ARCHIVE_MAX_BYTES": str(4 << 20)}),
        ({f"f{i}": b"x" for i in range(5)}, {"LLMKUBE_ARCHIVE_MAX_FILES": "3"}),
    ],
    ids=["dotdot", "absolute", "bomb", "too-many"],
)
def test_a_hostile_zip_is_refused(
    pod: Pod, origin: Origin, entries: dict[str, bytes], env: dict[str, str]
) -> None:
    origin.put("/h/m.zip", zip_of(entries))
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/h/m.zip", str(dest), env=env)

    assert run.returncode == 4, str(run)
    assert run.compact_term()["reason"] == "ModelSourceRejected"
    assert visible(dest) == {}
    assert not (pod.tmp / "evil.txt").exists()


def test_a_file_that_is_no_archive_is_refused(pod: Pod, origin: Origin) -> None:
    origin.put("/h/m.tar.gz", b"<html>not a tarball</html>")
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/h/m.tar.gz", str(dest))

    assert run.returncode == 4, str(run)
    assert run.compact_term()["reason"] == "ModelSourceRejected"
