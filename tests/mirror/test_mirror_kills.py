"""Kills and races (docs/mirror.md "The seeder"): a seeder killed during
its multipart upload resumes it without sending a stored part again; two
seeders of one version at once end with one manifest and whole objects; a
reader killed during a transfer from the mirror resumes from it, and the
origin sends no byte."""

from __future__ import annotations

import signal
import threading

import pytest

from llmkube_stager.mirror.layout import decode_manifest
from llmkube_stager.mirror.seed import PART_BYTES
from tests.harness.disk import partials_of
from tests.harness.pod import SOURCE_BUDGET, wait_for
from tests.harness.s3front import S3Request
from tests.harness.seaweed import S3Fault
from tests.mirror.mirrorkit import (
    FILES,
    PREFIX,
    REPO,
    hf_place,
    hf_pod_env,
    mirror_env,
    mirror_keys,
    mirror_object,
    new_pod,
    origin_hits,
    repo_files,
    seed_hf,
    seeder_env,
)

pytestmark = pytest.mark.floors

BIG = 2 * PART_BYTES + 3 * 1024 * 1024  # three parts, the last short


def part_puts(s3, number: int) -> list[S3Request]:
    return [
        r
        for r in s3.requests("PUT")
        if r.params.get("partNumber") == [str(number)] and r.path.endswith(FILES[0])
    ]


def test_a_killed_seeder_resumes_its_upload_without_sending_a_part_twice(
    tmp_path, hub, s3, bucket
) -> None:
    files = repo_files(seed=21, big_bytes=BIG)
    commit = hub.add_repo(REPO, files)
    seeder = new_pod(tmp_path, "seeder", SOURCE_BUDGET)
    env = hf_pod_env(seeder, hub, **seeder_env(s3, bucket))
    proc = seeder.popen(env=env)
    killed = threading.Event()

    def kill_at_the_second_part(request: S3Request) -> None:
        second = request.method == "PUT" and request.params.get("partNumber") == ["2"]
        if second and not killed.is_set():
            killed.set()
            proc.send_signal(signal.SIGKILL)

    s3.front.on_request(kill_at_the_second_part)
    try:
        assert seeder.finish(proc, timeout=120).returncode == -signal.SIGKILL
    finally:
        s3.front.on_request(None)
    place = hf_place()
    assert f"{PREFIX}/{place.manifest(commit)}" not in mirror_keys(s3, bucket)
    assert len(part_puts(s3, 1)) == 1

    seeder.run(env=env, timeout=120).ok(files=len(FILES), fetched=0, reused=len(FILES))

    assert len(part_puts(s3, 1)) == 1, "a stored part was sent again"
    assert len(part_puts(s3, 3)) == 1
    assert mirror_object(s3, bucket, place.file(commit, FILES[0])) == files[FILES[0]]
    manifest = decode_manifest(mirror_object(s3, bucket, place.manifest(commit)))
    assert sorted(manifest.files) == sorted(FILES)


def test_two_seeders_at_once_end_with_one_manifest_and_whole_objects(
    tmp_path, hub, s3, bucket
) -> None:
    files = repo_files(seed=22)
    commit = hub.add_repo(REPO, files)
    pods = [new_pod(tmp_path, f"seeder-{i}", SOURCE_BUDGET) for i in range(2)]
    procs = [p.popen(env=hf_pod_env(p, hub, **seeder_env(s3, bucket))) for p in pods]
    runs = [p.finish(proc, timeout=120) for p, proc in zip(pods, procs, strict=True)]

    for run in runs:
        run.ok(files=len(FILES), fetched=len(FILES))
    place = hf_place()
    manifest_key = f"/{bucket}/{PREFIX}/{place.manifest(commit)}"
    written = [r.status for r in s3.requests("PUT") if r.path == manifest_key]
    # One wrote it; the other found it there, or was refused by If-None-Match.
    assert written.count(200) == 1, written
    assert set(written) <= {200, 412}, written
    manifest = decode_manifest(mirror_object(s3, bucket, place.manifest(commit)))
    for rel in FILES:
        assert mirror_object(s3, bucket, place.file(commit, rel)) == files[rel], rel
        assert manifest.files[rel].size_bytes == len(files[rel])


def test_a_killed_reader_resumes_from_the_mirror(tmp_path, hub, s3, bucket) -> None:
    files = repo_files(seed=23, big_bytes=8 * 1024 * 1024)
    commit = seed_hf(tmp_path, hub, s3, bucket, files)
    big = f"/{bucket}/{PREFIX}/{hf_place().file(commit, FILES[0])}"
    s3.set_fault(big, S3Fault(methods=("GET",), rate_bytes_per_s=2 * 1024 * 1024))
    reader = new_pod(tmp_path, "reader", SOURCE_BUDGET)
    env = hf_pod_env(reader, hub, LLMKUBE_CONNECTIONS="1", **mirror_env(s3, bucket))
    proc = reader.popen(env=env)

    def halfway() -> bool:
        found = partials_of(reader.dest(FILES[0]))
        return bool(found) and found[0].stat().st_size > 2 * 1024 * 1024

    wait_for(halfway, 60, "a partial from the mirror", proc)
    proc.send_signal(signal.SIGKILL)
    assert reader.finish(proc).returncode == -signal.SIGKILL
    s3.clear()

    run = reader.run(env=env, timeout=120)

    # The small files were in place before the kill; the big one resumed.
    run.ok(files=len(FILES), fetched=1, reused=len(FILES) - 1)
    for rel in FILES:
        assert reader.dest(rel).read_bytes() == files[rel], rel
    gets = [r for r in s3.requests("GET") if r.path == big]
    assert gets and gets[0].headers.get("range", "").startswith("bytes="), gets[0].headers
    assert sum(r.body_bytes for r in gets) < len(files[FILES[0]])
    assert origin_hits(hub)[1:] == (0, 0)


def test_a_seeder_never_publishes_bytes_it_did_not_verify(tmp_path, hub, s3, bucket) -> None:
    """A byte of the seeder's cache flipped after staging (a bad disk, a
    hand edit): the upload is refused, nothing of the version is published."""
    files = repo_files(seed=24)
    commit = hub.add_repo(REPO, files)
    seeder = new_pod(tmp_path, "seeder", SOURCE_BUDGET)
    seeder.run(env=hf_pod_env(seeder, hub)).ok(files=len(FILES), fetched=len(FILES))
    flipped = bytearray(files[FILES[1]])
    flipped[100] ^= 0x01
    seeder.dest(FILES[1]).write_bytes(bytes(flipped))

    run = seeder.run(env=hf_pod_env(seeder, hub, **seeder_env(s3, bucket)))

    run.failed("ModelTransferChecksumMismatch")
    assert FILES[1] in run.term["message"]
    keys = mirror_keys(s3, bucket)
    place = hf_place()
    assert f"{PREFIX}/{place.file(commit, FILES[1])}" not in keys, keys
    assert f"{PREFIX}/{place.manifest(commit)}" not in keys, keys


def test_a_busy_mirror_costs_the_seeder_a_retry_not_the_seed(tmp_path, hub, s3, bucket) -> None:
    """Every first write the store answers 503 SlowDown (a busy store):
    each is asked again within the request's budget."""
    files = repo_files(seed=25)
    commit = hub.add_repo(REPO, files)
    s3.set_fault("*", S3Fault(methods=("PUT",), status=503, code="SlowDown", times=1))
    seeder = new_pod(tmp_path, "seeder", SOURCE_BUDGET)

    run = seeder.run(env=hf_pod_env(seeder, hub, **seeder_env(s3, bucket)))

    run.ok(files=len(FILES), fetched=len(FILES))
    assert 503 in [r.status for r in s3.requests("PUT")]
    manifest = decode_manifest(mirror_object(s3, bucket, hf_place().manifest(commit)))
    assert sorted(manifest.files) == sorted(FILES)
