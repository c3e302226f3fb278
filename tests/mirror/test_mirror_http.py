"""The other shapes of docs/mirror.md: an http(s) origin (its validators
name the version) behind an S3 mirror, and an http(s) mirror (any server,
here the suite's loopback origin) in front of the hub."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.canary import HF_TOKEN, leaks
from tests.harness.origin import Origin
from tests.harness.pod import SOURCE_BUDGET
from tests.harness.sample import payload
from tests.mirror.mirrorkit import (
    FILES,
    PREFIX,
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

HTTP_FILES = ["weights.bin", "config.json"]


@pytest.fixture
def http_mirror() -> Iterator[Origin]:
    with Origin() as server:
        yield server


def seed_http(tmp_path, origin: Origin, s3, bucket: str, data: dict[str, bytes]) -> str:
    """`data` served by the http origin and seeded into the mirror; the
    origin's log cleared. Returns the base URL."""
    for rel, body in data.items():
        origin.put(f"/models/{rel}", body)
    base = f"{origin.url}/models/"
    seeder = new_pod(tmp_path, "seeder", SOURCE_BUDGET)
    seeder.run(env=seeder.multi_env(base, HTTP_FILES, **seeder_env(s3, bucket))).ok(
        files=2, fetched=2
    )
    origin.clear_log()
    return base


def test_an_http_origin_is_read_from_the_mirror_without_a_request(
    tmp_path, origin, s3, bucket
) -> None:
    data = {"weights.bin": payload(300 * 1024, 31), "config.json": b'{"a": 1}'}
    base = seed_http(tmp_path, origin, s3, bucket, data)

    reader = new_pod(tmp_path, "reader", SOURCE_BUDGET)
    run = reader.run(env=reader.multi_env(base, HTTP_FILES, **mirror_env(s3, bucket)))

    run.ok(files=2, fetched=2)
    for rel, body in data.items():
        assert reader.dest(rel).read_bytes() == body, rel
    assert origin.requests() == [], "a reader asked the origin"

    # OnChange asks the origin for its validators only: the ones recorded
    # are the origin's, so nothing is fetched again.
    again = reader.run(
        env=reader.multi_env(
            base, HTTP_FILES, LLMKUBE_REFRESH_POLICY="OnChange", **mirror_env(s3, bucket)
        )
    )
    again.ok(files=2, fetched=0, reused=2)
    assert {r.method for r in origin.requests()} <= {"HEAD"}, origin.requests()


def test_an_http_origin_that_changed_is_not_served_the_mirrors_old_copy(
    tmp_path, origin, s3, bucket
) -> None:
    origin.put("/models/weights.bin", payload(64 * 1024, 41))
    origin.put("/models/config.json", b'{"a": 1}')
    base = f"{origin.url}/models/"
    seeder = new_pod(tmp_path, "seeder", SOURCE_BUDGET)
    seeder.run(env=seeder.multi_env(base, HTTP_FILES, **seeder_env(s3, bucket))).ok(
        files=2, fetched=2
    )
    new = payload(64 * 1024, 42)
    origin.put("/models/weights.bin", new)
    origin.clear_log()

    reader = new_pod(tmp_path, "reader", SOURCE_BUDGET)
    env = reader.multi_env(
        base, HTTP_FILES, LLMKUBE_REFRESH_POLICY="OnChange", **mirror_env(s3, bucket)
    )
    run = reader.run(env=env)

    run.ok(files=2, fetched=2)
    assert reader.dest("weights.bin").read_bytes() == new
    assert [r.method for r in origin.requests("/models/weights.bin", "GET")] == ["GET"]


def seed_and_copy(tmp_path, hub, s3, bucket, http_mirror: Origin, files) -> str:
    commit = seed_hf(tmp_path, hub, s3, bucket, files)
    for key in mirror_keys(s3, bucket):
        rel = key.removeprefix(f"{PREFIX}/")
        http_mirror.put(f"/m/{rel}", mirror_object(s3, bucket, rel))
    return commit


def test_an_http_mirror_serves_the_hubs_model(tmp_path, hub, s3, bucket, http_mirror) -> None:
    files = repo_files(seed=33)
    seed_and_copy(tmp_path, hub, s3, bucket, http_mirror, files)

    reader = new_pod(tmp_path, "reader", SOURCE_BUDGET)
    run = reader.run(env=hf_pod_env(reader, hub, LLMKUBE_MIRROR=f"{http_mirror.url}/m/"))

    run.ok(files=len(FILES), fetched=len(FILES))
    for rel in FILES:
        assert reader.dest(rel).read_bytes() == files[rel], rel
    assert origin_hits(hub) == (1, 0, 0)
    assert http_mirror.requests(method="GET")
    sent = [str(r.headers) for r in http_mirror.requests()]
    assert leaks(HF_TOKEN, *sent) == [], "the hub's token went to the mirror"


def test_a_wrong_byte_in_an_http_mirror_is_named_and_fetched_from_the_hub(
    tmp_path, hub, s3, bucket, http_mirror
) -> None:
    files = repo_files(seed=34)
    commit = seed_and_copy(tmp_path, hub, s3, bucket, http_mirror, files)
    key = hf_place().file(commit, FILES[1])
    flipped = bytearray(files[FILES[1]])
    flipped[1000] ^= 0x01
    http_mirror.put(f"/m/{key}", bytes(flipped))

    reader = new_pod(tmp_path, "reader", SOURCE_BUDGET)
    run = reader.run(env=hf_pod_env(reader, hub, LLMKUBE_MIRROR=f"{http_mirror.url}/m/"))

    run.ok(files=len(FILES), fetched=len(FILES))
    for rel in FILES:
        assert reader.dest(rel).read_bytes() == files[rel], rel
    assert f"{http_mirror.url}/m/{key}" in run.line_with("does not hold the bytes")


def test_an_air_gapped_reader_of_an_http_origin_reads_the_mirrors_latest(
    tmp_path, origin, s3, bucket
) -> None:
    data = {"weights.bin": payload(128 * 1024, 51), "config.json": b'{"b": 2}'}
    base = seed_http(tmp_path, origin, s3, bucket, data)

    reader = new_pod(tmp_path, "reader", SOURCE_BUDGET)
    env = reader.multi_env(base, HTTP_FILES, **mirror_env(s3, bucket, LLMKUBE_MIRROR_ONLY="true"))
    run = reader.run(env=env, LLMKUBE_REFRESH_POLICY="OnChange")

    run.ok(files=2, fetched=2)
    for rel, body in data.items():
        assert reader.dest(rel).read_bytes() == body, rel
    assert origin.requests() == [], "an air-gapped reader asked the origin"
