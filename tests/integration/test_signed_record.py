"""#40 item 3: the warm start checks the kept bundle's signature against
the anchor; the record is a cache of the bundle's statement, never its
authority. Bundles made by model-signing's own signing API; the cache is
tampered with as another pod with write access would: a shard's bytes, its
stamp rewritten, the record's digest or ignore list edited, the kept bundle
replaced or removed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.harness.disk import write_stamp
from tests.harness.origin import Origin
from tests.harness.pod import Pod, as_fuse
from tests.harness.signing import FILES, REASON, RECORD, Signer

PATH = "/org/repo"
SHARD = "model-00002-of-00002.safetensors"
KEPT = RECORD + ".bundle"


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    return Signer(tmp_path / "publisher")


def _staged(pod: Pod, origin: Origin, signer: Signer) -> Path:
    for rel, data in FILES.items():
        origin.put(f"{PATH}/{rel}", data)
    origin.put(f"{PATH}/model.sig", signer.sign(FILES))
    cache_dir = pod.multi(origin.url + PATH + "/", FILES)
    pod.run(env=signer.anchor_env).ok(files=len(FILES), fetched=len(FILES))
    origin.clear_log()
    return cache_dir


def _forge_shard(cache_dir: Path) -> bytes:
    """Another writer changes a byte of a shard in place and rewrites its
    stamp and the record's digest to match: every record agrees."""
    dest = cache_dir / SHARD
    bad = bytearray(dest.read_bytes())
    bad[len(bad) // 2] ^= 0x01
    dest.write_bytes(bytes(bad))
    for evidence in cache_dir.glob(SHARD + ".llmkube-evidence*"):
        evidence.unlink()
    digest = hashlib.sha256(bad).hexdigest()
    write_stamp(dest, digest)
    record = json.loads((cache_dir / RECORD).read_text())
    record["files"][SHARD] = digest
    (cache_dir / RECORD).write_text(json.dumps(record))
    return bytes(bad)


def _refused_offline(run_term: dict[str, object], origin: Origin) -> None:
    assert origin.requests() == []
    assert "signature" in str(run_term["message"]), run_term["message"]


def test_the_bundle_is_kept_beside_the_record(pod: Pod, origin: Origin, signer: Signer) -> None:
    cache_dir = _staged(pod, origin, signer)
    record = json.loads((cache_dir / RECORD).read_text())
    kept = (cache_dir / KEPT).read_bytes()
    assert hashlib.sha256(kept).hexdigest() == record["bundle_sha256"]


def test_a_forged_digest_in_the_record_is_refused_by_the_warm_start_and_verify(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    cache_dir = _staged(pod, origin, signer)
    _forge_shard(cache_dir)

    warm = pod.run(env=signer.anchor_env)
    warm.failed(REASON)
    assert warm.returncode == 4
    _refused_offline(warm.term, origin)

    check = pod.run("verify", env=signer.anchor_env)
    check.failed(REASON)
    assert check.returncode == 4

    reader = pod.stage(signer.anchor_env, fs=as_fuse)
    reader.failed(REASON)
    assert origin.requests() == []


def test_a_path_added_to_the_records_ignore_list_is_refused(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    cache_dir = _staged(pod, origin, signer)
    record = json.loads((cache_dir / RECORD).read_text())
    record["ignore_paths"] = [*record["ignore_paths"], "tokenizer"]
    del record["files"]["tokenizer/tokenizer.json"]
    (cache_dir / RECORD).write_text(json.dumps(record))
    (cache_dir / "tokenizer" / "tokenizer.json").write_bytes(b'{"evil": 1}')

    warm = pod.run(env=signer.anchor_env)

    warm.failed(REASON)
    _refused_offline(warm.term, origin)


def test_a_kept_bundle_replaced_by_another_keys_is_refused(
    pod: Pod, origin: Origin, signer: Signer, tmp_path: Path
) -> None:
    cache_dir = _staged(pod, origin, signer)
    bad = _forge_shard(cache_dir)
    forged = {**FILES, SHARD: bad}
    other = Signer(tmp_path / "impostor").sign(forged)
    (cache_dir / KEPT).write_bytes(other)
    record = json.loads((cache_dir / RECORD).read_text())
    record["bundle_sha256"] = hashlib.sha256(other).hexdigest()
    (cache_dir / RECORD).write_text(json.dumps(record))

    warm = pod.run(env=signer.anchor_env)

    warm.failed(REASON)
    _refused_offline(warm.term, origin)
    check = pod.run("verify", env=signer.anchor_env)
    assert check.returncode == 4


def test_a_removed_kept_bundle_is_verified_again_by_a_writer_and_refused_by_a_reader(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    cache_dir = _staged(pod, origin, signer)
    (cache_dir / KEPT).unlink()

    reader = pod.stage(signer.anchor_env, fs=as_fuse)
    reader.failed(REASON)
    assert origin.requests() == []

    writer = pod.run(env=signer.anchor_env, LLMKUBE_PREFETCH_STAGER="true")
    writer.ok(files=len(FILES), fetched=0, reused=len(FILES))
    assert origin.requests(f"{PATH}/model.sig", "GET")
    assert (cache_dir / KEPT).is_file()
