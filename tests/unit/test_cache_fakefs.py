"""Cache state reads, record/stamp/validators parsing with garbage content,
sweep selection by age and name, and `inspect` of odd trees, on pyfakefs
(#15): filesystem logic that needs no real flock, statfs or FIFO. The real
hostile cases (FIFOs, mode 000 as another uid, symlinks leading outside)
are in tests/torture/test_hostile_cache.py.
"""

from __future__ import annotations

import os
import time

import pytest
from pyfakefs.fake_filesystem import FakeFilesystem

from llmkube_stager.cache.records import (
    read_record,
    read_stamp,
    stamp_status,
    write_atomic,
    write_size_record,
)
from llmkube_stager.cache.runrecord import RunRecord, read_run_record
from llmkube_stager.cache.state import read_local_file
from llmkube_stager.cache.sweep import DEBRIS_AGE_S, debris, sweep
from llmkube_stager.commands.inspect import inspect_dir
from llmkube_stager.model import LocalState, PinState

ROOT = "/cache/k"
DEST = f"{ROOT}/model.gguf"
TIB_8 = 1 << 43
NOW = 1_700_000_000.0


def _file(fs: FakeFilesystem, path: str, data: bytes = b"", mtime: float = NOW) -> None:
    fs.create_file(path, contents=data)
    os.utime(path, (mtime, mtime))


# --- size records ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "value"),
    [
        (b"123", 123),
        (b"123\n", 123),
        (b" 7 ", 7),
        (b"0", 0),
        (b"9" * 64, int("9" * 64)),
    ],
)
def test_a_valid_record(fs: FakeFilesystem, content: bytes, value: int) -> None:
    fs.create_file(DEST + ".llmkube-size", contents=content)
    assert read_record(DEST).size_bytes == value


@pytest.mark.parametrize(
    "content",
    [b"", b"\n", b"abc", b"-1", b"1.5", b"1e3", b"0x10", b"\xff\xfe", b"\x00", b"1 2", b"9" * 65],
)
def test_a_garbage_record_is_invalid_not_unreadable(fs: FakeFilesystem, content: bytes) -> None:
    fs.create_file(DEST + ".llmkube-size", contents=content)
    record = read_record(DEST)
    assert (record.size_bytes, record.unreadable) == (None, False)
    assert record.problem


def test_a_huge_record_is_invalid_even_when_its_prefix_is_digits(fs: FakeFilesystem) -> None:
    fs.create_file(DEST + ".llmkube-size", contents=b"1" * 70 + b"garbage")
    assert read_record(DEST).size_bytes is None


def test_an_absent_record_is_no_problem(fs: FakeFilesystem) -> None:
    fs.create_dir(ROOT)
    assert read_record(DEST) == type(read_record(DEST))(None)


@pytest.mark.parametrize("target", ["/elsewhere/real-record", DEST + ".other"])
def test_a_symlinked_record_is_never_followed(fs: FakeFilesystem, target: str) -> None:
    fs.create_file(target, contents=b"123")
    fs.create_symlink(DEST + ".llmkube-size", target)
    record = read_record(DEST)
    assert record.size_bytes is None and "symlink" in record.problem


def test_a_directory_at_the_record_name_is_invalid(fs: FakeFilesystem) -> None:
    fs.create_dir(DEST + ".llmkube-size")
    record = read_record(DEST)
    assert record.size_bytes is None and "directory" in record.problem


def test_write_atomic_replaces_a_planted_symlink_not_its_target(fs: FakeFilesystem) -> None:
    fs.create_file("/elsewhere/victim", contents=b"keep")
    fs.create_dir(ROOT)
    fs.create_symlink(DEST + ".llmkube-size", "/elsewhere/victim")
    write_size_record(DEST, 42)
    assert read_record(DEST).size_bytes == 42
    with open("/elsewhere/victim", "rb") as handle:
        assert handle.read() == b"keep"


def test_write_atomic_refuses_a_symlinked_directory(fs: FakeFilesystem) -> None:
    fs.create_dir("/elsewhere")
    fs.create_dir(ROOT)
    fs.create_symlink(f"{ROOT}/sub", "/elsewhere")
    with pytest.raises(OSError):
        write_atomic(f"{ROOT}/sub/x.llmkube-size", b"1")
    assert os.listdir("/elsewhere") == []


# --- stamps and validators -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"", b"deadbeef", b"a b", b"a 1 2 3", b"a x 2", b"a 1 y", b"\x00" * 10, b"a 1 2" + b" " * 300],
)
def test_a_garbage_stamp_is_a_miss(fs: FakeFilesystem, content: bytes) -> None:
    fs.create_file(DEST + ".sha256", contents=content)
    assert read_stamp(DEST) is None


def test_stamp_status(fs: FakeFilesystem) -> None:
    _file(fs, DEST, b"12345")
    st = os.stat(DEST)
    assert stamp_status(DEST, st) == "absent"
    fs.create_file(DEST + ".sha256", contents=f"{'a' * 64} 5 {int(st.st_mtime)}".encode())
    assert stamp_status(DEST, st) == "matches"
    os.utime(DEST, (NOW + 10, NOW + 10))
    assert stamp_status(DEST, os.stat(DEST)) == "stale"
    with open(DEST + ".sha256", "wb") as handle:
        handle.write(b"garbage")
    assert stamp_status(DEST, st) == "legacy"


@pytest.mark.parametrize(
    "content", [b"", b"[]", b"null", b"{", b'{"a": 1}', b"\xff", b"[" * 100000, b'{"a":' * 50000]
)
def test_garbage_validators_are_empty(fs: FakeFilesystem, content: bytes) -> None:
    fs.create_file(f"{ROOT}/.llmkube-validators", contents=content)
    assert read_run_record(ROOT) == RunRecord()


# --- the state of one file -----------------------------------------------------------------------


def test_an_8_tib_file_with_its_record_is_complete(fs: FakeFilesystem) -> None:
    """No sparse file needed: pyfakefs gives the size without the bytes."""
    fs.create_file(DEST, st_size=TIB_8)
    fs.create_file(DEST + ".llmkube-size", contents=str(TIB_8).encode())
    local = read_local_file("model.gguf", DEST, root=ROOT)
    assert (local.state, local.size_bytes, local.record_bytes) == (
        LocalState.COMPLETE,
        TIB_8,
        TIB_8,
    )


def test_an_8_tib_record_on_a_short_file_is_a_mismatch(fs: FakeFilesystem) -> None:
    fs.create_file(DEST, contents=b"short")
    fs.create_file(DEST + ".llmkube-size", contents=str(TIB_8).encode())
    assert read_local_file("model.gguf", DEST, root=ROOT).state is LocalState.MISMATCH


def test_a_garbage_record_leaves_a_legacy_file_with_the_reason(fs: FakeFilesystem) -> None:
    fs.create_file(DEST, contents=b"weights")
    fs.create_file(DEST + ".llmkube-size", contents=b"garbage")
    local = read_local_file("model.gguf", DEST, root=ROOT)
    assert local.state is LocalState.LEGACY
    assert "not valid" in local.detail


def test_a_symlinked_destination_is_not_a_file(fs: FakeFilesystem) -> None:
    fs.create_file("/elsewhere/model.gguf", contents=b"weights")
    fs.create_file(DEST + ".llmkube-size", contents=b"7")
    fs.create_symlink(DEST, "/elsewhere/model.gguf")
    local = read_local_file("model.gguf", DEST, root=ROOT)
    assert local.state is LocalState.NOT_A_FILE and "symlink" in local.detail
    # pvc:// claims are read where they are mounted: followed there.
    assert read_local_file("model.gguf", DEST, follow_symlinks=True).state is LocalState.COMPLETE


def test_a_file_under_a_symlinked_directory_is_not_a_file(fs: FakeFilesystem) -> None:
    fs.create_file("/elsewhere/x.bin", contents=b"weights")
    fs.create_file("/elsewhere/x.bin.llmkube-size", contents=b"7")
    fs.create_dir(ROOT)
    fs.create_symlink(f"{ROOT}/sub", "/elsewhere")
    local = read_local_file("sub/x.bin", f"{ROOT}/sub/x.bin", root=ROOT)
    assert local.state is LocalState.NOT_A_FILE and "sub" in local.detail


def test_one_read_of_the_cache_judges_each_directory_on_its_own(fs: FakeFilesystem) -> None:
    """read_cache_state checks a directory's parents once for all its files
    (#16): a symlinked directory must still fail every file under it, and a
    symlink below a real directory must not borrow its parent's verdict."""
    from llmkube_stager.cache.state import read_cache_state
    from llmkube_stager.model import Manifest, RemoteFile

    for name in ("x.bin", "y.bin"):
        fs.create_file(f"/elsewhere/{name}", contents=b"weights")
        fs.create_file(f"/elsewhere/{name}.llmkube-size", contents=b"7")
        fs.create_file(f"{ROOT}/real/{name}", contents=b"weights")
        fs.create_file(f"{ROOT}/real/{name}.llmkube-size", contents=b"7")
    fs.create_symlink(f"{ROOT}/sub", "/elsewhere")
    fs.create_symlink(f"{ROOT}/real/link", "/elsewhere")
    rels = ["real/x.bin", "sub/x.bin", "real/y.bin", "sub/y.bin", "real/link/x.bin"]
    files = tuple(RemoteFile(rel, f"http://o/{rel}", f"{ROOT}/{rel}") for rel in rels)
    state = read_cache_state(Manifest("http", ROOT, files, True, "http://o/"))
    got = {rel: state.files[rel].state for rel in rels}
    assert got == {
        "real/x.bin": LocalState.COMPLETE,
        "real/y.bin": LocalState.COMPLETE,
        "sub/x.bin": LocalState.NOT_A_FILE,
        "sub/y.bin": LocalState.NOT_A_FILE,
        "real/link/x.bin": LocalState.NOT_A_FILE,
    }


def test_a_file_under_a_missing_directory_is_missing(fs: FakeFilesystem) -> None:
    fs.create_dir(ROOT)
    local = read_local_file("sub/x.bin", f"{ROOT}/sub/x.bin", "a" * 64, root=ROOT)
    assert (local.state, local.pin) == (LocalState.MISSING, PinState.ABSENT)


def test_a_directory_at_the_destination_is_not_a_file(fs: FakeFilesystem) -> None:
    fs.create_dir(DEST)
    assert read_local_file("model.gguf", DEST, root=ROOT).state is LocalState.NOT_A_FILE


# --- sweep selection -----------------------------------------------------------------------------

OLD = NOW - DEBRIS_AGE_S - 1
YOUNG = NOW - DEBRIS_AGE_S + 60
FUTURE = NOW + 86400


def _debris_tree(fs: FakeFilesystem) -> None:
    _file(fs, f"{ROOT}/a.bin.llmkube-tmp.AbC123", mtime=OLD)
    _file(fs, f"{ROOT}/a.bin.llmkube-tmp.AbC124", mtime=YOUNG)
    _file(fs, f"{ROOT}/a.bin.llmkube-size.Xy9Zq1", mtime=FUTURE)
    _file(fs, f"{ROOT}/a.bin.0123456789ab.deadbeef.llmkube-part", mtime=OLD)
    _file(fs, f"{ROOT}/a.bin.sha256.Ldfhhl", mtime=OLD)  # never swept
    _file(fs, f"{ROOT}/keep.tmp", mtime=OLD)  # listed
    _file(fs, f"{ROOT}/deep/" + "d/" * 50 + "x.llmkube-tmp.QwErTy", mtime=OLD)
    fs.create_file("/elsewhere/victim", contents=b"keep")
    fs.create_symlink(f"{ROOT}/b.bin.llmkube-tmp.LnK001", "/elsewhere/victim")
    os.utime(f"{ROOT}/b.bin.llmkube-tmp.LnK001", (OLD, OLD), follow_symlinks=False)


def test_sweep_selection_by_age_and_name(fs: FakeFilesystem) -> None:
    _debris_tree(fs)
    listed = frozenset({f"{ROOT}/a.bin", f"{ROOT}/keep.tmp"})
    ages = {os.path.relpath(d.path, ROOT): d.age_s for d in debris(ROOT, listed, frozenset(), NOW)}
    assert set(ages) == {
        "a.bin.llmkube-tmp.AbC123",
        "a.bin.llmkube-tmp.AbC124",
        "a.bin.llmkube-size.Xy9Zq1",
        "a.bin.0123456789ab.deadbeef.llmkube-part",
        "deep/" + "d/" * 50 + "x.llmkube-tmp.QwErTy",
        "b.bin.llmkube-tmp.LnK001",
    }
    assert ages["a.bin.llmkube-size.Xy9Zq1"] < 0


def test_sweep_removes_old_debris_keeps_young_and_resets_the_future(fs: FakeFilesystem) -> None:
    _debris_tree(fs)
    listed = frozenset({f"{ROOT}/a.bin", f"{ROOT}/keep.tmp"})
    removed = {os.path.relpath(p, ROOT) for p in sweep(ROOT, listed, frozenset(), NOW)}
    assert removed == {
        "a.bin.llmkube-tmp.AbC123",
        "a.bin.0123456789ab.deadbeef.llmkube-part",
        "deep/" + "d/" * 50 + "x.llmkube-tmp.QwErTy",
        "b.bin.llmkube-tmp.LnK001",
    }
    assert os.path.exists(f"{ROOT}/a.bin.llmkube-tmp.AbC124")
    assert os.path.exists(f"{ROOT}/a.bin.sha256.Ldfhhl")
    assert os.path.exists(f"{ROOT}/keep.tmp")
    assert os.lstat(f"{ROOT}/a.bin.llmkube-size.Xy9Zq1").st_mtime == NOW
    with open("/elsewhere/victim", "rb") as handle:
        assert handle.read() == b"keep"  # the link went, never its target

    later = NOW + DEBRIS_AGE_S
    assert "a.bin.llmkube-size.Xy9Zq1" in {
        os.path.relpath(p, ROOT) for p in sweep(ROOT, listed, frozenset(), later)
    }


def test_the_partials_of_a_file_being_staged_are_not_the_sweeps(fs: FakeFilesystem) -> None:
    _file(fs, f"{ROOT}/a.bin.0123456789ab.tmp", mtime=OLD)
    dest = f"{ROOT}/a.bin"
    assert sweep(ROOT, frozenset({dest}), frozenset({dest}), NOW) == []
    assert sweep(ROOT, frozenset({dest}), frozenset(), NOW) == [f"{ROOT}/a.bin.0123456789ab.tmp"]


# --- inspect of odd trees ------------------------------------------------------------------------


def test_inspect_of_an_odd_tree(fs: FakeFilesystem) -> None:
    fs.create_file(DEST, st_size=TIB_8)
    fs.create_file(DEST + ".llmkube-size", contents=b"garbage")
    fs.create_file(f"{ROOT}/other.bin", contents=b"x")
    fs.create_file(f"{ROOT}/other.bin.llmkube-size", contents=b"1")
    fs.create_dir(f"{ROOT}/dir-named-like-a-file.gguf")
    fs.create_file("/elsewhere/victim", contents=b"keep")
    fs.create_symlink(f"{ROOT}/link.gguf", "/elsewhere/victim")
    _file(fs, f"{ROOT}/x.llmkube-tmp.AbC123", mtime=time.time() + 86400)
    _file(fs, f"{ROOT}/deep/" + "d/" * 200 + "y.bin", b"deep")

    report = inspect_dir(ROOT, time.time())

    files = {f.path: f for f in report.files}
    assert files["model.gguf"].size_bytes == TIB_8
    assert files["model.gguf"].record_bytes is None
    assert "no decimal byte count" in files["model.gguf"].record_problem
    assert files["other.bin"].record_matches is True
    assert "deep/" + "d/" * 200 + "y.bin" in files
    assert {(o.path, o.kind) for o in report.odd} == {("link.gguf", "a symlink")}
    (leftover,) = report.leftovers
    assert leftover.mtime_in_future and not leftover.swept_by_writers
