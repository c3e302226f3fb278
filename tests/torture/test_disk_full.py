"""Disk full (#11): a small real filesystem (a tmpfs with size= and
nr_inodes=) is the cache volume. The preflight refuses what cannot fit;
ENOSPC in the middle of a write, or when the size record is written, is
`ModelTransferOutOfSpace`; a file published before is never damaged.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.harness.disk import sha256
from tests.harness.mounts import tmpfs
from tests.harness.origin import Fault, Origin
from tests.harness.sandbox import Sandbox, open_sandbox

pytestmark = pytest.mark.torture

KIB = 1024
SMALL = bytes(range(256)) * 256  # 64 KiB, fits
BIG = os.urandom(3 * 1024 * KIB)  # 3 MiB, does not fit a 2 MiB volume


@pytest.fixture
def origin(origin: Origin) -> Origin:
    """The suite's origin, serving the model."""
    origin.put("/m/small.bin", SMALL)
    origin.put("/m/big.bin", BIG)
    return origin


@pytest.fixture
def small_volume() -> Iterator[Sandbox]:
    """The sandbox's volume is a 2 MiB tmpfs."""
    with open_sandbox() as box, tmpfs(box.volume, "size=2m,mode=0755"):
        yield box


def _published(box: Sandbox) -> dict[str, tuple[str, str]]:
    """name -> (sha256, record) of every published file with its record."""
    out = {}
    for path in box.cache.glob("*.bin"):
        record = path.with_name(path.name + ".llmkube-size")
        out[path.name] = (sha256(path.read_bytes()), record.read_text() if record.exists() else "")
    return out


def test_the_preflight_refuses_what_cannot_fit(small_volume: Sandbox, origin: Origin) -> None:
    box = small_volume
    box.multi(origin.url + "/m", ["small.bin"])
    box.run("stage").ok()
    before = _published(box)
    box.env["MODEL_FILES"] = "small.bin\nbig.bin"

    run = box.run("stage")

    doc = run.failed("ModelTransferOutOfSpace").term
    assert doc["file"] == "big.bin", doc
    assert _published(box) == before, "a published file was damaged"
    assert not (box.cache / "big.bin").exists()
    gets = origin.requests("/m/big.bin", "GET")
    assert all(r.body_bytes == 0 for r in gets), "the preflight let the transfer start"


def test_enospc_in_the_middle_of_a_write(small_volume: Sandbox, origin: Origin) -> None:
    """No size announced: the preflight cannot refuse, the disk fills mid-write."""
    box = small_volume
    box.multi(origin.url + "/m", ["small.bin"])
    box.run("stage").ok()
    before = _published(box)
    origin.set_fault("/m/big.bin", Fault(no_content_length=True))
    box.env["MODEL_FILES"] = "small.bin\nbig.bin"
    # Pinned: a body of unknown length is complete only by its digest (#10).
    box.env["MODEL_FILE_SHA256"] = f"{sha256(BIG)} big.bin"

    run = box.run("stage")

    run.failed("ModelTransferOutOfSpace")
    assert _published(box) == before, "a published file was damaged"
    assert not (box.cache / "big.bin").exists(), "a partial file was published"
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
def test_enospc_on_inodes_at_the_size_record(policy: str, origin: Origin) -> None:
    """The bytes fit but no inode is left for the record's temp file."""
    with open_sandbox() as box, tmpfs(box.volume, "size=2m,nr_inodes=4,mode=0755"):
        box.single(origin.url + "/m/small.bin", name="small.bin")
        box.env["LLMKUBE_REFRESH_POLICY"] = policy
        box.env["LLMKUBE_CONNECTIONS"] = "1"

        run = box.run("stage")

        doc = run.failed("ModelTransferOutOfSpace").term
        assert "recording the size" in doc["message"], doc
        # Published before its record: complete and right, a legacy copy
        # the next writer backfills.
        assert (box.cache / "small.bin").read_bytes() == SMALL
        assert not list(box.cache.glob("*.llmkube-tmp.*")), "a record temp was left"


def test_a_full_volume_never_damages_a_warm_copy(small_volume: Sandbox, origin: Origin) -> None:
    box = small_volume
    box.multi(origin.url + "/m", ["small.bin"])
    box.run("stage").ok()
    fd = os.open(box.volume / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"\0" * 64 * KIB):
            pass
    except OSError:
        pass  # full
    finally:
        os.close(fd)
    before = _published(box)

    for command in ("stage", "verify"):
        box.run(command).ok()
    box.run("stage", env={"LLMKUBE_REFRESH_POLICY": "OnChange"}).ok()

    assert _published(box) == before
