"""#34 and a sharded prefetch (#16 item 4): two shares of an Indexed Job
(LLMKUBE_SHARDS=2, JOB_COMPLETION_INDEX) stage a signed model through a
real bindfs mount, one after the other so that a serving pod on the mount
(a reader: it never writes there) can look between them.

What a share guarantees: it verifies the bundle, and the WHOLE listing
(not its share) must equal the signed set, else it publishes nothing; it
stages only its own files, each pinned to its signed digest. What a reader
guarantees: it accepts the set only when every file of it is there and
answers the recorded signed digests, so a set one share has not finished,
or has finished against another version, is refused whoever wrote the
record.
"""

from __future__ import annotations

import json
from pathlib import Path

from llmkube_stager.share import assign
from tests.harness.disk import snapshot
from tests.harness.mounts import FuseCache
from tests.harness.origin import Origin
from tests.harness.pod import Pod, Run, multi_env
from tests.harness.sample import payload
from tests.harness.signing import Signer

SHARDS = 2
KEY = "sharded"
RECORD = ".llmkube-validators.signature"
REASON = "ModelSignatureInvalid"
FILES = {
    "model-00001-of-00002.safetensors": payload(96 * 1024, 1),
    "model-00002-of-00002.safetensors": payload(80 * 1024, 2),
    "config.json": b'{"model_type": "llama"}',
    "tokenizer.json": b'{"version": "1.0"}',
}


def _owner(files: dict[str, bytes]) -> dict[str, int]:
    return assign({rel: len(data) for rel, data in files.items()}, SHARDS)


def _serve(origin: Origin, files: dict[str, bytes], bundle: bytes) -> None:
    for rel, data in files.items():
        origin.put(f"/repo/{rel}", data)
    origin.put("/repo/model.sig", bundle)


def _env(origin: Origin, cache: FuseCache, files: dict[str, bytes]) -> dict[str, str]:
    return multi_env(origin.url + "/repo/", cache.mnt / KEY, files)


def _share(tmp: Path, env: dict[str, str], signer: Signer, index: int, **extra: str) -> Pod:
    return Pod(
        tmp / f"share-{index}",
        {
            **env,
            **signer.anchor_env,
            "LLMKUBE_SHARDS": str(SHARDS),
            "JOB_COMPLETION_INDEX": str(index),
            **extra,
        },
        stager=True,
    )


def _serving(tmp: Path, env: dict[str, str], signer: Signer) -> Pod:
    return Pod(tmp / "serving", {**env, **signer.anchor_env})


def _refused_by_a_reader(run: Run) -> None:
    """A serving pod on FUSE may not write: a signed file missing, or not
    answering its recorded signed digest, is a file it would have to stage,
    refused as any reader of an unfinished prefetch refuses (#10); never a
    success."""
    assert run.returncode == 4, str(run)
    assert run.term["outcome"] == "failed"
    assert run.term["reason"] in ("ModelCacheLockUnsupported", REASON), run.term


def test_a_reader_accepts_the_signed_set_only_once_every_share_is_whole(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    signer = Signer(tmp_path / "publisher")
    _serve(origin, FILES, signer.sign(FILES))
    env = _env(origin, fuse_cache, FILES)
    owner = _owner(FILES)
    mine = [sum(1 for o in owner.values() if o == i) for i in range(SHARDS)]
    assert all(mine), owner  # both shares have files

    _share(tmp_path, env, signer, 0).run().ok(files=mine[0], fetched=mine[0])

    # Half the set is there (and the record, naming the whole set): a
    # serving pod refuses it, asking nothing of the origin.
    origin.clear_log()
    before = snapshot(fuse_cache.backing)
    half = _serving(tmp_path, env, signer).run()
    _refused_by_a_reader(half)
    assert origin.requests() == []
    assert snapshot(fuse_cache.backing) == before

    _share(tmp_path, env, signer, 1).run().ok(files=mine[1], fetched=mine[1])

    origin.clear_log()
    whole = _serving(tmp_path, env, signer).run()
    whole.ok(files=len(FILES), fetched=0, reused=len(FILES))
    assert origin.requests() == []
    record = json.loads((fuse_cache.backing / KEY / RECORD).read_text())
    assert sorted(record["files"]) == sorted(FILES)


def test_every_share_judges_the_whole_listing_against_the_signed_set(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    """An unsigned file added to the model: whichever share it falls to,
    both shares refuse before fetching anything, and nothing is published."""
    signer = Signer(tmp_path / "publisher")
    served = {**FILES, "backdoor.py": b"import os\n"}
    _serve(origin, served, signer.sign(FILES))
    env = _env(origin, fuse_cache, served)

    for index in range(SHARDS):
        run = _share(tmp_path, env, signer, index).run()
        run.failed(REASON)
        assert run.returncode == 4
        assert "'backdoor.py' is staged but not signed" in run.term["message"]
    assert [r for r in origin.requests(method="GET") if "model.sig" not in r.path] == []
    for rel in served:
        assert not (fuse_cache.backing / KEY / rel).exists(), rel


def test_a_share_refused_leaves_a_set_no_reader_accepts(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    """A byte changed in a file of share 1: share 0 publishes its own files
    (each its signed bytes) and records the verification; share 1 refuses;
    the serving pod refuses the set (a signed file is missing)."""
    signer = Signer(tmp_path / "publisher")
    owner = _owner(FILES)
    victim = next(rel for rel in sorted(FILES) if owner[rel] == 1 and len(FILES[rel]) > 100)
    bad = bytearray(FILES[victim])
    bad[len(bad) // 2] ^= 0x01
    _serve(origin, {**FILES, victim: bytes(bad)}, signer.sign(FILES))
    env = _env(origin, fuse_cache, FILES)

    _share(tmp_path, env, signer, 0).run().ok()
    refused = _share(tmp_path, env, signer, 1).run()
    refused.failed(REASON)
    assert not (fuse_cache.backing / KEY / victim).exists()

    _refused_by_a_reader(_serving(tmp_path, env, signer).run())


def test_a_new_version_half_staged_by_its_shares_is_refused_by_a_reader(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    """Version 1 staged whole by both shares. The publisher signs version 2
    (a file of each share changed); an OnChange Job's share 0 publishes its
    new file and records version 2's verification; share 1 has not run. The
    set on disk is half version 1: a serving pod refuses it, whoever's
    record is there, and serves it once share 1 is done."""
    signer = Signer(tmp_path / "publisher")
    owner = _owner(FILES)
    _serve(origin, FILES, signer.sign(FILES))
    env = _env(origin, fuse_cache, FILES)
    for index in range(SHARDS):
        _share(tmp_path / "v1", env, signer, index).run().ok()

    release = dict(FILES)
    for index in range(SHARDS):
        rel = next(r for r in sorted(FILES) if owner[r] == index and len(FILES[r]) > 100)
        release[rel] = payload(len(FILES[rel]), 50 + index)
    _serve(origin, release, signer.sign(release))
    _share(tmp_path / "v2", env, signer, 0, LLMKUBE_REFRESH_POLICY="OnChange").run().ok()

    origin.clear_log()
    half = _serving(tmp_path, env, signer).run()
    _refused_by_a_reader(half)
    assert origin.requests() == []

    _share(tmp_path / "v2", env, signer, 1, LLMKUBE_REFRESH_POLICY="OnChange").run().ok()
    _serving(tmp_path / "after", env, signer).run().ok(
        files=len(FILES), fetched=0, reused=len(FILES)
    )
    for rel, data in release.items():
        assert (fuse_cache.backing / KEY / rel).read_bytes() == data, rel
