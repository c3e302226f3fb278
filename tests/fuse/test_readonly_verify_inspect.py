"""Read-only caches on a real read-only bind mount, `verify` and `inspect`
(spec/behavior.md §8.4 item 5, §14.3; CONTRACT §2; scenario 5).

A read-only mount is `mount --bind SRC DST` + `mount -o remount,bind,ro DST`:
writes through DST fail with EROFS while SRC stays writable, so the test
can prepare SRC and prove that nothing changed there.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.harness.disk import LOCK_NAME, make_old, names, seed, snapshot
from tests.harness.mounts import FuseCache, ReadOnlyCache
from tests.harness.origin import Origin, closed_port_url
from tests.harness.pod import Pod, Run, multi_env, single_env
from tests.harness.sample import payload

CONFIG = b'{"architectures": ["LlamaForCausalLM"]}\n'
WEIGHTS = payload(48 * 1024, 21)
FILES = ["config.json", "model.safetensors"]
REMEDY_UNWRITABLE = (
    "the cache must be written but is read-only or not permitted for this uid; check the "
    "volume's access mode, fsGroup and the model-cache-prep container"
)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _warm(root: Path, *, records: bool = True) -> None:
    seed(root / "config.json", CONFIG, record=len(CONFIG) if records else None)
    seed(root / "model.safetensors", WEIGHTS, record=len(WEIGHTS) if records else None)


# -- read-only warm and cold caches --------------------------------------------------


@pytest.mark.parametrize("stager", [False, True], ids=["serving", "stager"])
def test_read_only_warm_cache_starts_offline_and_writes_nothing(
    tmp_path: Path, ro_cache: ReadOnlyCache, stager: bool
) -> None:
    """Scenario 5 (TestModelDownloadLock_ReadOnlyWarmCache): the origin is
    deliberately unreachable; a warm read-only cache starts with exit 0,
    no lock, no write attempt."""
    _warm(ro_cache.backing / "k")
    seed(ro_cache.backing / "k" / "old.llmkube-tmp.AbC123", b"1", age_s=86400)
    before = snapshot(ro_cache.backing)
    env = multi_env(closed_port_url() + "/repo/", ro_cache.mnt / "k", FILES)
    run = Pod(tmp_path, env, stager=stager).run("stage")
    doc = run.ok().term
    assert doc["stats"]["reused"] == 2
    assert snapshot(ro_cache.backing) == before
    assert not (ro_cache.backing / "k" / LOCK_NAME).exists()
    assert "could not update records" not in run.stderr
    assert "Read-only file system" not in run.stderr


def test_read_only_warm_cache_without_records_starts_with_a_warning(
    tmp_path: Path, ro_cache: ReadOnlyCache
) -> None:
    _warm(ro_cache.backing / "k", records=False)
    before = snapshot(ro_cache.backing)
    env = multi_env(closed_port_url() + "/repo/", ro_cache.mnt / "k", FILES)
    run = Pod(tmp_path, env, stager=True).run("stage")  # even a stager cannot backfill here
    run.ok()
    assert "no valid size record" in run.stderr
    assert "could not update records" not in run.stderr
    assert snapshot(ro_cache.backing) == before


def test_read_only_single_file_warm_cache(tmp_path: Path, ro_cache: ReadOnlyCache) -> None:
    seed(ro_cache.backing / "k" / "model.gguf", WEIGHTS, record=len(WEIGHTS))
    before = snapshot(ro_cache.backing)
    run = Pod(tmp_path, single_env(closed_port_url() + "/m.gguf", ro_cache.mnt / "k")).run("stage")
    run.ok()
    assert "Model already cached, skipping download" in run.stderr
    assert snapshot(ro_cache.backing) == before


@pytest.mark.parametrize("stager", [False, True], ids=["serving", "stager"])
def test_read_only_cold_cache_fails_with_model_cache_unwritable(
    tmp_path: Path, origin: Origin, ro_cache: ReadOnlyCache, stager: bool
) -> None:
    origin.put("/repo/config.json", CONFIG)
    origin.put("/repo/model.safetensors", WEIGHTS)
    seed(ro_cache.backing / "k" / "config.json", CONFIG, record=len(CONFIG))
    before = snapshot(ro_cache.backing)
    env = multi_env(origin.url + "/repo/", ro_cache.mnt / "k", FILES)
    run = Pod(tmp_path, env, stager=stager).run("stage")
    doc = run.failed("ModelCacheUnwritable").term
    assert doc["remedy"] == REMEDY_UNWRITABLE
    assert doc["file"] == "model.safetensors"
    assert "read-only" in doc["message"]
    assert origin.requests() == [], "never fall back to downloading into a read-only mount"
    assert snapshot(ro_cache.backing) == before


def test_read_only_missing_cache_directory_fails_with_model_cache_unwritable(
    tmp_path: Path, origin: Origin, ro_cache: ReadOnlyCache
) -> None:
    origin.put("/m.gguf", WEIGHTS)
    run = Pod(tmp_path, single_env(origin.url + "/m.gguf", ro_cache.mnt / "absent")).run("stage")
    run.failed("ModelCacheUnwritable")
    assert names(ro_cache.backing) == []
    assert origin.requests() == []


# -- verify ------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["missing-dir", "empty-dir", "only-furniture"])
def test_verify_empty_cache(tmp_path: Path, layout: str) -> None:
    root = tmp_path / "models" / "k"
    if layout != "missing-dir":
        root.mkdir(parents=True)
    if layout == "only-furniture":
        (root / "lost+found").mkdir()
        (root / ".snapshot").mkdir()
        (root / LOCK_NAME).write_text("")
    before = snapshot(tmp_path / "models")
    run = Pod(tmp_path, multi_env(closed_port_url() + "/", root, FILES)).run("verify")
    doc = run.failed("ModelCacheEmpty").term
    assert "reader volume may not be the writer's volume" in doc["remedy"]
    assert snapshot(tmp_path / "models") == before


def test_verify_names_missing_and_short_files(tmp_path: Path) -> None:
    root = tmp_path / "models" / "k"
    seed(root / "config.json", CONFIG, record=len(CONFIG))
    seed(root / "model.safetensors", WEIGHTS[:1000], record=len(WEIGHTS))  # truncated
    files = [*FILES, "tokenizer.json"]
    run = Pod(tmp_path, multi_env(closed_port_url() + "/", root, files)).run("verify")
    doc = run.failed("ModelCacheIncomplete").term
    assert "missing: tokenizer.json" in doc["message"]
    assert f"model.safetensors (size 1000, record {len(WEIGHTS)})" in doc["message"]
    assert doc["file"] == "tokenizer.json"

    (root / "tokenizer.json").write_text("{}")
    Path(str(root / "tokenizer.json") + ".llmkube-size").write_text("2")
    run = Pod(tmp_path, multi_env(closed_port_url() + "/", root, files)).run("verify")
    doc = run.failed("ModelCacheIncomplete").term
    assert doc["file"] == "model.safetensors"
    assert "missing:" not in doc["message"]
    assert "not matching their size records: model.safetensors" in doc["message"]


def _verify_pinned(tmp_path: Path, origin: Origin, weights: bytes) -> tuple[Path, Any, Run]:
    """`verify` of the warm multi-file cache, config.json pinned to its
    digest and model.safetensors to that of `weights`; returns the cache,
    its snapshot before the run, and the run."""
    root = tmp_path / "models" / "k"
    _warm(root)
    pins = f"{_sha(CONFIG)} config.json\n{_sha(weights)} model.safetensors"
    env = {**multi_env(origin.url + "/repo/", root, FILES), "MODEL_FILE_SHA256": pins}
    before = snapshot(root)
    return root, before, Pod(tmp_path, env).run("verify")


def test_verify_checksum_mismatch_multi_file(tmp_path: Path, origin: Origin) -> None:
    root, before, run = _verify_pinned(tmp_path, origin, b"other bytes")
    doc = run.failed("ModelTransferChecksumMismatch").term
    assert doc["file"] == "model.safetensors"
    assert "mismatch for model.safetensors" in doc["message"]
    assert snapshot(root) == before, "verify writes no stamp and no marker"
    assert origin.requests() == []


def test_verify_checksum_single_file_pin(tmp_path: Path, origin: Origin) -> None:
    root = tmp_path / "models" / "k"
    seed(root / "model.gguf", WEIGHTS, record=len(WEIGHTS))
    env = single_env(origin.url + "/m.gguf", root)
    bad = Pod(tmp_path, {**env, "MODEL_SHA256": _sha(b"not it")}).run("verify")
    bad.failed("ModelTransferChecksumMismatch")
    good = Pod(tmp_path, {**env, "MODEL_SHA256": _sha(WEIGHTS)}).run("verify")
    good.ok()
    assert not (root / "model.gguf.sha256").exists(), "verify never writes a stamp"
    assert origin.requests() == []


def test_verify_ok_only_when_everything_is_present_and_complete(
    tmp_path: Path, origin: Origin
) -> None:
    root, before, run = _verify_pinned(tmp_path, origin, WEIGHTS)
    doc = run.ok().term
    assert doc["stats"]["files"] == 2
    assert "verified" in doc["message"]
    assert snapshot(root) == before
    assert origin.requests() == [], "verify is offline"


def test_verify_file_without_record_passes_with_warning_unless_strict(tmp_path: Path) -> None:
    root = tmp_path / "models" / "k"
    seed(root / "config.json", CONFIG, record=len(CONFIG))
    seed(root / "model.safetensors", WEIGHTS)  # legacy: no record
    env = multi_env(closed_port_url() + "/", root, FILES)
    lenient = Pod(tmp_path, env).run("verify")
    lenient.ok()
    assert "no valid size record for model.safetensors" in lenient.stderr
    strict = Pod(tmp_path, env).run("verify", "--strict")
    doc = strict.failed("ModelCacheIncomplete").term
    assert "without a size record: model.safetensors" in doc["message"]


def test_verify_on_the_read_only_bind_mount(tmp_path: Path, ro_cache: ReadOnlyCache) -> None:
    root = ro_cache.backing / "k"
    _warm(root)
    before = snapshot(ro_cache.backing)
    env = multi_env(closed_port_url() + "/", ro_cache.mnt / "k", FILES)
    Pod(tmp_path, env).run("verify").ok()
    assert snapshot(ro_cache.backing) == before

    missing = Pod(
        tmp_path, multi_env(closed_port_url() + "/", ro_cache.mnt / "k", [*FILES, "tokenizer.json"])
    ).run("verify")
    missing.failed("ModelCacheIncomplete")
    empty = Pod(tmp_path, multi_env(closed_port_url() + "/", ro_cache.mnt / "nope", FILES)).run(
        "verify"
    )
    empty.failed("ModelCacheEmpty")
    assert snapshot(ro_cache.backing) == before


# -- inspect -------------------------------------------------------------------------


def _inspect_fixture(root: Path) -> None:
    """Files with a matching and a mismatching record, a stamp, a rejection
    marker, an old and a young partial, old and young temp debris, a stamp
    temp that is never swept."""
    _warm(root)
    short = root / "shard-2.safetensors"
    seed(short, WEIGHTS[:100], record=len(WEIGHTS))
    dest = root / "model.safetensors"
    st = os.stat(dest)
    Path(str(dest) + ".sha256").write_text(f"{_sha(WEIGHTS)} {st.st_size} {int(st.st_mtime)}")
    Path(str(dest) + f".{'ab' * 32}.sha256-rejected").write_text(_sha(b"x"))
    seed(root / "shard-2.safetensors.0123456789ab.deadbeef.llmkube-part", b"p" * 10, age_s=3600)
    seed(root / "shard-2.safetensors.0123456789ab.feedface.llmkube-part", b"q" * 20)
    seed(root / "config.json.llmkube-tmp.AbC123", b"5", age_s=3600)
    seed(root / "config.json.llmkube-tmp.AbC124", b"5", age_s=60)
    seed(root / "model.safetensors.sha256.Ldfhhl", b"?", age_s=86400)


def test_inspect_json_on_the_fuse_mount(tmp_path: Path, fuse_cache: FuseCache) -> None:
    root = fuse_cache.backing / "k"
    _inspect_fixture(root)
    before = snapshot(fuse_cache.backing)
    run = Pod(tmp_path, {}).run("inspect", "--json", str(fuse_cache.mnt / "k"))
    assert run.returncode == 0, str(run)
    report = json.loads(run.stdout)
    assert snapshot(fuse_cache.backing) == before, "inspect writes nothing"

    fs = report["fs"]
    assert fs["is_fuse"] is True and fs["driver"] == "bindfs"
    assert fs["lock_scope"] == "node-local" and fs["read_only"] is False
    assert isinstance(fs["free_bytes"], int) and fs["free_bytes"] > 0
    assert report["lock_file"] is False

    files = {f["path"]: f for f in report["files"]}
    assert set(files) == {"config.json", "model.safetensors", "shard-2.safetensors"}
    assert files["config.json"]["record_matches"] is True
    assert files["config.json"]["stamp"] == "absent"
    assert files["model.safetensors"]["record_bytes"] == len(WEIGHTS)
    assert files["model.safetensors"]["stamp"] == "matches"
    assert files["model.safetensors"]["markers"] == ["ab" * 32]
    assert files["shard-2.safetensors"]["size_bytes"] == 100
    assert files["shard-2.safetensors"]["record_matches"] is False

    left = {item["path"]: item for item in report["leftovers"]}
    old_part = left["shard-2.safetensors.0123456789ab.deadbeef.llmkube-part"]
    assert old_part["kind"] == "partial" and old_part["swept_by_writers"] is True
    assert 3500 <= old_part["age_s"] <= 3700 and old_part["size_bytes"] == 10
    young_part = left["shard-2.safetensors.0123456789ab.feedface.llmkube-part"]
    assert young_part["swept_by_writers"] is False and young_part["age_s"] < 600
    assert left["config.json.llmkube-tmp.AbC123"]["kind"] == "atomic-temp"
    assert left["config.json.llmkube-tmp.AbC123"]["swept_by_writers"] is True
    assert left["config.json.llmkube-tmp.AbC124"]["swept_by_writers"] is False
    stamp_temp = left["model.safetensors.sha256.Ldfhhl"]
    assert stamp_temp["kind"].startswith("stamp-temp") and stamp_temp["swept_by_writers"] is False


def test_inspect_text_report(tmp_path: Path, fuse_cache: FuseCache) -> None:
    root = fuse_cache.backing / "k"
    _inspect_fixture(root)
    run = Pod(tmp_path, {}).run("inspect", str(fuse_cache.mnt / "k"))
    assert run.returncode == 0, str(run)
    text = run.stdout
    assert "fuse.bindfs (driver bindfs), fuse=True" in text
    assert "lock scope node-local" in text and "lock file absent" in text
    assert (
        f"model.safetensors  {len(WEIGHTS)} bytes, record {len(WEIGHTS)} (ok), "
        "stamp matches, REJECTED for 1 pin(s)" in text
    )
    assert f"shard-2.safetensors  100 bytes, record {len(WEIGHTS)} (MISMATCH)" in text
    assert "config.json.llmkube-tmp.AbC123  atomic-temp" in text
    assert "(swept by the next writer)" in text and "(kept)" in text
    assert "stamp-temp (never swept: delete by hand)" in text


def test_inspect_off_fuse_after_a_stage_and_on_the_read_only_mount(
    tmp_path: Path, origin: Origin, ro_cache: ReadOnlyCache
) -> None:
    origin.put("/m.gguf", WEIGHTS)
    root = ro_cache.backing / "k"
    Pod(tmp_path, single_env(origin.url + "/m.gguf", root)).run("stage").ok()
    make_old(root / "model.gguf", 10)

    rw = json.loads(Pod(tmp_path, {}).run("inspect", "--json", str(root)).stdout)
    assert rw["fs"]["is_fuse"] is False and rw["fs"]["lock_scope"] == "cross-node"
    assert rw["fs"]["read_only"] is False and rw["lock_file"] is True
    assert [(f["path"], f["record_matches"]) for f in rw["files"]] == [("model.gguf", True)]
    assert rw["leftovers"] == []

    ro = json.loads(Pod(tmp_path, {}).run("inspect", "--json", str(ro_cache.mnt / "k")).stdout)
    assert ro["fs"]["read_only"] is True
    assert ro["files"] == rw["files"]
