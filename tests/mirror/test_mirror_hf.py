"""A Hugging Face model through an S3 mirror on SeaweedFS (docs/mirror.md):
one seeder fills it, readers stage from it and ask the hub one model-info
call (none with LLMKUBE_MIRROR_ONLY=true); the origin's validators are
recorded as if the bytes came from the hub."""

from __future__ import annotations

import pytest

from llmkube_stager.mirror.layout import decode_manifest
from tests.harness.canary import HF_TOKEN, leaks
from tests.harness.disk import debris, tree
from tests.harness.hub import FakeHub
from tests.harness.pod import SOURCE_BUDGET
from tests.harness.seaweed import WRITER, SeaweedS3
from tests.mirror.mirrorkit import (
    FILES,
    REPO,
    hf_place,
    hf_pod_env,
    mirror_env,
    mirror_keys,
    mirror_object,
    new_pod,
    origin_hits,
    repo_files,
    seeder_env,
)

pytestmark = pytest.mark.floors


def seeded(tmp_path, hub: FakeHub, s3: SeaweedS3, bucket: str, files: dict[str, bytes]):
    seeder = new_pod(tmp_path, "seeder", SOURCE_BUDGET)
    run = seeder.run(env=hf_pod_env(seeder, hub, **seeder_env(s3, bucket)))
    run.ok(files=len(FILES), fetched=len(FILES))
    return seeder, run


def test_a_seeded_mirror_serves_readers_with_one_hub_call(tmp_path, hub, s3, bucket) -> None:
    files = repo_files()
    commit = hub.add_repo(REPO, files)
    seeder, seed_run = seeded(tmp_path, hub, s3, bucket, files)

    place = hf_place()
    keys = mirror_keys(s3, bucket)
    assert f"mirror/{place.manifest(commit)}" in keys, keys
    assert f"mirror/{place.ref('main')}" in keys, keys
    manifest = decode_manifest(mirror_object(s3, bucket, place.manifest(commit)))
    assert manifest.version == commit
    for rel in FILES:
        assert mirror_object(s3, bucket, place.file(commit, rel)) == files[rel], rel
        assert manifest.files[rel].sha256 == hub.file(REPO, rel).sha256, rel
    # The seeder's secret key (a canary) is nowhere.
    written = [d.decode("latin-1") for d in tree(seeder.tmp).values()]
    assert leaks(WRITER[1], seed_run.outputs, *written) == []

    hub.clear_log()
    hub.cdn.clear_log()
    reader = new_pod(tmp_path, "reader", SOURCE_BUDGET)
    run = reader.run(env=hf_pod_env(reader, hub, **mirror_env(s3, bucket)))

    run.ok(files=len(FILES), fetched=len(FILES))
    for rel in FILES:
        assert reader.dest(rel).read_bytes() == files[rel], rel
    assert debris(reader.cache_dir, markers=True) == []
    # One model-info call named the commit; no byte came from the hub or its CDN.
    assert origin_hits(hub) == (1, 0, 0)
    assert run.has_line("comes from the mirror")
    assert leaks(HF_TOKEN, *[r.headers.get("authorization", "") for r in s3.requests()]) == []

    # A warm IfNotPresent start asks neither the hub nor the mirror.
    hub.clear_log()
    s3.clear()
    warm = reader.run(env=hf_pod_env(reader, hub, **mirror_env(s3, bucket)))
    warm.ok(files=len(FILES), fetched=0, reused=len(FILES))
    assert origin_hits(hub) == (0, 0, 0)
    assert s3.requests() == []

    # The origin's validators were recorded: OnChange finds nothing changed.
    again = reader.run(
        env=hf_pod_env(reader, hub, LLMKUBE_REFRESH_POLICY="OnChange", **mirror_env(s3, bucket))
    )
    again.ok(files=len(FILES), fetched=0, reused=len(FILES))
    assert origin_hits(hub)[1:] == (0, 0)


def test_mirror_only_asks_the_hub_nothing(tmp_path, hub, s3, bucket) -> None:
    files = repo_files(seed=5)
    hub.add_repo(REPO, files)
    seeded(tmp_path, hub, s3, bucket, files)
    hub.clear_log()
    hub.cdn.clear_log()

    reader = new_pod(tmp_path, "reader", SOURCE_BUDGET)
    run = reader.run(
        env=hf_pod_env(reader, hub, **mirror_env(s3, bucket, LLMKUBE_MIRROR_ONLY="true"))
    )

    run.ok(files=len(FILES), fetched=len(FILES))
    for rel in FILES:
        assert reader.dest(rel).read_bytes() == files[rel], rel
    assert origin_hits(hub) == (0, 0, 0)


def test_mirror_only_without_the_version_says_how_to_seed(tmp_path, hub, s3, bucket) -> None:
    hub.add_repo(REPO, repo_files(seed=6))
    reader = new_pod(tmp_path, "reader", SOURCE_BUDGET)

    run = reader.run(
        env=hf_pod_env(reader, hub, **mirror_env(s3, bucket, LLMKUBE_MIRROR_ONLY="true"))
    )

    run.failed("ModelSourceNotFound", exit_code=4)
    assert "LLMKUBE_MIRROR_PUBLISH=true" in run.term["remedy"]
    assert origin_hits(hub) == (0, 0, 0)
    assert not any(reader.dest(rel).exists() for rel in FILES)


def test_readers_at_once_cost_the_origin_one_copy_in_all(tmp_path, hub, s3, bucket) -> None:
    """Fan-out: one seeder's copy, then four nodes at once; the hub's CDN
    serves the LFS bytes once, each reader costs one model-info call."""
    files = repo_files(seed=7, big_bytes=2 * 1024 * 1024)
    hub.add_repo(REPO, files)
    seeded(tmp_path, hub, s3, bucket, files)
    lfs = sum(len(files[rel]) for rel in FILES[:2])
    # The seeder's one copy of the LFS files.
    assert sum(r.body_bytes for r in hub.cdn.requests(method="GET")) == lfs
    hub.clear_log()
    hub.cdn.clear_log()

    readers = [new_pod(tmp_path, f"node-{i}", SOURCE_BUDGET) for i in range(4)]
    procs = [r.popen(env=hf_pod_env(r, hub, **mirror_env(s3, bucket))) for r in readers]
    runs = [r.finish(p, timeout=120) for r, p in zip(readers, procs, strict=True)]

    for reader, run in zip(readers, runs, strict=True):
        run.ok(files=len(FILES), fetched=len(FILES))
        for rel in FILES:
            assert reader.dest(rel).read_bytes() == files[rel], rel
    assert origin_hits(hub) == (len(readers), 0, 0)


def test_mirror_only_at_a_commit_needs_no_ref(tmp_path, hub, s3, bucket) -> None:
    files = repo_files(seed=8)
    commit = hub.add_repo(REPO, files)
    seeded(tmp_path, hub, s3, bucket, files)
    s3.admin().delete_object(Bucket=bucket, Key=f"mirror/{hf_place().ref('main')}")
    hub.clear_log()
    hub.cdn.clear_log()
    reader = new_pod(tmp_path, "reader", SOURCE_BUDGET)
    env = reader.multi_env(
        f"hf://{REPO}@{commit}",
        FILES,
        HF_ENDPOINT=hub.url,
        **mirror_env(s3, bucket, LLMKUBE_MIRROR_ONLY="true"),
    )

    run = reader.run(env=env)

    run.ok(files=len(FILES), fetched=len(FILES))
    for rel in FILES:
        assert reader.dest(rel).read_bytes() == files[rel], rel
    assert origin_hits(hub) == (0, 0, 0)
