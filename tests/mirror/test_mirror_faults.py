"""A mirror that is down, slow, refuses, or holds a wrong byte: readers
fall back to the origin with a log line; a wrong byte is never published
and the bad object is named; when the origin fails too, the termination
message gives both (docs/mirror.md "Fallback")."""

from __future__ import annotations

import pytest

from tests.harness.canary import canary, leaks
from tests.harness.disk import debris, tree
from tests.harness.hub import HubFault
from tests.harness.origin import Fault, closed_port_url
from tests.harness.pod import SOURCE_BUDGET
from tests.harness.seaweed import S3Fault
from tests.mirror.mirrorkit import (
    FILES,
    PREFIX,
    REPO,
    hf_place,
    hf_pod_env,
    mirror_env,
    new_pod,
    origin_hits,
    repo_files,
    seed_hf,
)

pytestmark = pytest.mark.floors


@pytest.fixture
def seeded(tmp_path, hub, s3, bucket):
    files = repo_files(seed=11)
    commit = seed_hf(tmp_path, hub, s3, bucket, files)
    s3.clear()
    return files, commit


def read(tmp_path, hub, **env: str):
    reader = new_pod(tmp_path, "reader", SOURCE_BUDGET)
    return reader, reader.run(env=hf_pod_env(reader, hub, **env))


def assert_staged_right(reader, files, partials: int = 0) -> None:
    for rel in FILES:
        assert reader.dest(rel).read_bytes() == files[rel], rel
    left = debris(reader.cache_dir, markers=True)
    # A mirror transfer that failed keeps its partial, as any failed
    # transfer does (a later writer's sweep takes it): never published.
    assert len(left) == partials and all(p.endswith(".llmkube-part.tmp") for p in left), left


def test_a_wrong_byte_in_the_mirror_is_refused_named_and_fetched_from_the_origin(
    tmp_path, hub, s3, bucket, seeded
) -> None:
    files, commit = seeded
    bad = f"{PREFIX}/{hf_place().file(commit, FILES[0])}"
    s3.set_fault(f"/{bucket}/{bad}", S3Fault(methods=("GET",), corrupt=True))

    reader, run = read(tmp_path, hub, **mirror_env(s3, bucket))

    run.ok(files=len(FILES), fetched=len(FILES))
    assert_staged_right(reader, files)
    line = run.line_with("does not hold the bytes its manifest names")
    assert f"s3://{bucket}/{bad}" in line, line
    # Only the bad file came from the origin.
    assert [r.path.split("?")[0] for r in hub.cdn.requests()] == [hub.cdn_path_of(REPO, FILES[0])]


def test_a_wrong_byte_with_mirror_only_is_never_published(
    tmp_path, hub, s3, bucket, seeded
) -> None:
    _, commit = seeded
    bad = f"{PREFIX}/{hf_place().file(commit, FILES[0])}"
    s3.set_fault(f"/{bucket}/{bad}", S3Fault(methods=("GET",), corrupt=True))

    reader, run = read(tmp_path, hub, **mirror_env(s3, bucket, LLMKUBE_MIRROR_ONLY="true"))

    run.failed("ModelTransferChecksumMismatch")
    assert not reader.dest(FILES[0]).exists()
    assert origin_hits(hub) == (0, 0, 0)


def test_a_mirror_that_is_down_falls_back_to_the_origin(tmp_path, hub, s3, bucket, seeded) -> None:
    files, _ = seeded

    reader, run = read(
        tmp_path, hub, **mirror_env(s3, bucket, LLMKUBE_MIRROR_ENDPOINT=closed_port_url())
    )

    run.ok(files=len(FILES), fetched=len(FILES))
    assert_staged_right(reader, files)
    assert run.line_with("the mirror failed")
    assert origin_hits(hub)[0] == 1


def test_a_mirror_that_refuses_falls_back_to_the_origin(tmp_path, hub, s3, bucket, seeded) -> None:
    files, _ = seeded
    s3.set_fault("*", S3Fault(methods=("GET", "HEAD"), status=403, code="AccessDenied"))

    reader, run = read(tmp_path, hub, **mirror_env(s3, bucket))

    run.ok(files=len(FILES), fetched=len(FILES))
    assert_staged_right(reader, files)
    assert run.line_with("the mirror failed")
    # Once failed, the mirror is not asked again for every file.
    assert len(s3.requests()) <= 2, [(r.method, r.path) for r in s3.requests()]


def test_a_mirror_slower_than_the_stall_timeout_falls_back_at_once(
    tmp_path, hub, s3, bucket, seeded
) -> None:
    files, commit = seeded
    # The HEAD answers; the GET only after the stall timeout (2 s here).
    slow = f"/{bucket}/{PREFIX}/{hf_place().file(commit, FILES[0])}"
    s3.set_fault(slow, S3Fault(methods=("GET",), delay_s=6))

    reader, run = read(tmp_path, hub, **mirror_env(s3, bucket), LLMKUBE_CONNECTIONS="1")

    run.ok(files=len(FILES), fetched=len(FILES))
    assert_staged_right(reader, files, partials=1)
    assert run.line_with("the mirror failed serving")
    # At once: not after the retries a lone origin gets.
    assert run.seconds < 15, run.seconds


def test_both_failing_gives_both_reasons(tmp_path, hub, s3, bucket) -> None:
    hub.add_repo(REPO, repo_files(seed=12))
    hub.set_fault("api", HubFault(503))

    reader, run = read(
        tmp_path, hub, **mirror_env(s3, bucket, LLMKUBE_MIRROR_ENDPOINT=closed_port_url())
    )

    run.failed()
    message = run.term["message"]
    assert "the mirror" in message, message
    assert not any(reader.dest(rel).exists() for rel in FILES)


def test_a_wrong_mirror_secret_is_named_never_shown(tmp_path, hub, s3, bucket, seeded) -> None:
    """A canary as the mirror's secret key: the reader is refused by the
    mirror and falls back; the seeder fails; neither shows the secret."""
    files, _ = seeded
    secret = canary("mirror-secret-")
    env = mirror_env(s3, bucket, LLMKUBE_MIRROR_SECRET_ACCESS_KEY=secret)

    reader, run = read(tmp_path, hub, **env)

    run.ok(files=len(FILES), fetched=len(FILES))
    assert_staged_right(reader, files)
    assert run.line_with("the mirror failed")
    seeder = new_pod(tmp_path, "bad-seeder", SOURCE_BUDGET)
    seed_run = seeder.run(
        env=hf_pod_env(seeder, hub, **env, LLMKUBE_MIRROR_PUBLISH="true"),
    )
    seed_run.failed("ModelSourceUnauthorized")
    # The remedy is the mirror's, not the hub's.
    assert "LLMKUBE_MIRROR_SECRET_ACCESS_KEY" in seed_run.term["remedy"]
    for pod, done in ((reader, run), (seeder, seed_run)):
        written = [d.decode("latin-1") for d in tree(pod.tmp).values()]
        assert leaks(secret, done.outputs, *written) == []


def test_a_wrong_byte_then_a_failing_origin_gives_both(tmp_path, hub, s3, bucket, seeded) -> None:
    _, commit = seeded
    bad = f"{PREFIX}/{hf_place().file(commit, FILES[0])}"
    s3.set_fault(f"/{bucket}/{bad}", S3Fault(methods=("GET",), corrupt=True))
    hub.cdn.set_fault(hub.cdn_path_of(REPO, FILES[0]), Fault(status=500))

    reader, run = read(tmp_path, hub, **mirror_env(s3, bucket))

    run.failed()
    message = run.term["message"]
    assert "the mirror failed first" in message and "sha256" in message, message
    assert not reader.dest(FILES[0]).exists()
