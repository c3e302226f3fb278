"""Offline warm-start guarantees (spec §8.4) and the IfNotPresent scenarios of
§15.1, for both policies, against a down origin (closed port), blackholes
(`Blackhole("accept")`: connects, never answers; `Blackhole("syn-drop")`:
connects hang) and an origin that answers badly (503, 429, no or zero
Content-Length).

IfNotPresent on a warm cache makes zero connections whatever the origin does.
OnChange on a warm cache asks the origin within the configured timeouts, at
most once per origin (the circuit breaker, scenario 38), and keeps every copy
that passes its local checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.harness.disk import record_of, seed, snapshot
from tests.harness.origin import Blackhole, Fault, Origin, closed_port_url, methods, serve_repo
from tests.harness.plan_inputs import fuse_fs, read_only_fs
from tests.harness.pod import ON_CHANGE, Pod
from tests.harness.sample import payload

pytestmark = pytest.mark.e2e

PATH = "/files/model.gguf"
DATA = payload(32 * 1024, seed=51)
SHARDS = [f"model-{i:05d}-of-00020.safetensors" for i in range(1, 21)]
FILES = {"config.json": b'{"model_type": "llama"}', "model.safetensors": payload(24 * 1024, 52)}
REPO = "/org/repo/resolve/main/"
# Long enough that a single connection attempt would show in the wall time.
SLOW = {"LLMKUBE_CONNECT_TIMEOUT": "5", "LLMKUBE_STALL_TIMEOUT": "5"}
TIGHT = {
    "LLMKUBE_CONNECT_TIMEOUT": "0.5",
    "LLMKUBE_STALL_TIMEOUT": "0.5",
    "LLMKUBE_RETRIES": "1",
    "LLMKUBE_MAX_RETRY_WAIT": "1",
}


@contextmanager
def dead_origin(kind: str) -> Iterator[str]:
    """The base URL of an origin that is down or blackholed."""
    if kind == "closed":
        yield closed_port_url()
        return
    with Blackhole(kind) as hole:  # type: ignore[arg-type]
        yield hole.url


DEAD = ["closed", "accept", "syn-drop"]


def warm_single(pod: Pod, base: str, records: bool = True) -> Path:
    dest = pod.single(base + PATH)
    seed(dest, DATA, record=len(DATA) if records else None)
    return dest


def warm_multi(pod: Pod, base: str, files: dict[str, bytes] = FILES, records: bool = True) -> Path:
    cache = pod.multi(base + REPO, files)
    for rel, data in files.items():
        seed(cache / rel, data, record=len(data) if records else None)
    return cache


# --- §8.4 items 1-2: IfNotPresent warm starts make zero connections ------------------------------


@pytest.mark.parametrize("kind", DEAD)
@pytest.mark.parametrize("shape", ["single", "multi"])
def test_s1_s21_if_not_present_warm_start_never_connects(pod: Pod, kind: str, shape: str) -> None:
    with dead_origin(kind) as base:
        if shape == "single":
            warm_single(pod, base)
        else:
            warm_multi(pod, base)
        before = snapshot(pod.models)

        run = pod.run(**SLOW).ok()

    # One connection attempt to a blackhole would cost the 5 s timeout.
    assert run.seconds < 3, str(run)
    assert run.stats[1:] == ((0, 1, 0) if shape == "single" else (0, 2, 0))
    assert snapshot(pod.models) == before  # no lock file, nothing written
    assert run.warnings == []


@pytest.mark.parametrize("shape", ["single", "multi"])
@pytest.mark.parametrize("policy", ["IfNotPresent", "default"])
def test_s23_if_not_present_warm_start_opens_zero_connections(
    pod: Pod, shape: str, policy: str
) -> None:
    with Blackhole("accept") as listener:
        if shape == "single":
            warm_single(pod, listener.url)
        else:
            warm_multi(pod, listener.url)
        env = {} if policy == "default" else {"LLMKUBE_REFRESH_POLICY": policy}

        pod.run(**SLOW, **env).ok()

        assert listener.connections == 0


@pytest.mark.parametrize(
    "fault",
    [
        Fault(status=503),
        Fault(status=429, retry_after="3600"),
        Fault(no_content_length=True),
        Fault(head_content_length_zero=True),
        Fault(status=404),
    ],
    ids=["503", "429", "nocl", "cl0", "404"],
)
@pytest.mark.parametrize("shape", ["single", "multi"])
def test_s3_s9_s21_s37_if_not_present_warm_start_ignores_the_origin(
    pod: Pod, origin: Origin, fault: Fault, shape: str
) -> None:
    if shape == "single":
        origin.put(PATH, DATA)
        origin.set_fault(PATH, fault)
        dest = warm_single(pod, origin.url)
        paths = [dest]
    else:
        serve_repo(origin, FILES)
        for rel in FILES:
            origin.set_fault(REPO + rel, fault)
        cache = warm_multi(pod, origin.url)
        paths = [cache / rel for rel in FILES]

    for _ in range(2):  # scenario 8: two starts must not make two full GETs
        run = pod.stage().ok()
        assert "ERROR" not in run.stderr

    assert origin.requests() == []
    assert all(p.stat().st_size > 0 for p in paths)


def test_s4_hf_token_warm_start_with_a_failing_origin(pod: Pod, origin: Origin) -> None:
    token = "hf_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"
    serve_repo(origin, FILES)
    for rel in FILES:
        origin.set_fault(REPO + rel, Fault(status=503))
    warm_multi(pod, origin.url)

    run = pod.run(HF_TOKEN=token).ok()

    assert origin.requests() == []
    assert token not in run.stderr and token not in str(run.term)


def test_s24_restart_after_a_fresh_multi_file_download_makes_zero_requests(
    pod: Pod, origin: Origin
) -> None:
    cache = pod.multi(serve_repo(origin, FILES), FILES)
    pod.stage().ok()
    origin.clear_log()

    run = pod.run().ok()

    assert origin.requests() == []
    assert run.stats == (2, 0, 2, 0)
    assert all(record_of(cache / rel) == str(len(data)) for rel, data in FILES.items())


# --- legacy caches (§8.4 item 3; scenarios 32, 33, 44, 53) ---------------------------------------


def test_s32_s44_legacy_cache_is_backfilled_once_with_zero_requests(
    pod: Pod, origin: Origin
) -> None:
    serve_repo(origin, {rel: data + b"upstream moved" for rel, data in FILES.items()})
    cache = warm_multi(pod, origin.url, records=False)

    first = pod.run().ok()

    assert origin.requests() == []
    for rel, data in FILES.items():
        assert (cache / rel).read_bytes() == data  # s33/s44: not re-downloaded
        assert record_of(cache / rel) == str(len(data))
        assert f"Model artifact {rel} already cached, skipping download" in first.stderr
    second = pod.run().ok()
    assert second.warnings == []
    assert "Backfilled" not in second.stderr
    assert origin.requests() == []


def test_s53_legacy_truncated_file_is_recorded_as_is(pod: Pod, origin: Origin) -> None:
    # Accepted limitation: a legacy file cannot be proven complete.
    serve_repo(origin, FILES)
    cache = warm_multi(pod, origin.url, records=False)
    seed(cache / "model.safetensors", FILES["model.safetensors"][:100])

    pod.stage().ok()

    assert record_of(cache / "model.safetensors") == "100"
    assert origin.requests() == []


# --- record mismatch under IfNotPresent (scenarios 22, 47) ---------------------------------------


def test_s22_s47_if_not_present_short_file_is_repaired_when_the_origin_is_up(
    pod: Pod, origin: Origin
) -> None:
    cache = pod.multi(serve_repo(origin, FILES), FILES)
    for rel, data in FILES.items():
        seed(cache / rel, data, record=len(data))
    seed(cache / "model.safetensors", b"x" * 10, record=len(FILES["model.safetensors"]))

    run = pod.stage().ok()

    assert (cache / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    assert record_of(cache / "model.safetensors") == str(len(FILES["model.safetensors"]))
    assert methods(origin, REPO + "model.safetensors")["GET"] == 1
    assert methods(origin, REPO + "config.json") == {}
    assert run.stats == (2, 1, 1, 0)


@pytest.mark.parametrize("kind", ["closed", "accept"])
def test_s47_if_not_present_short_file_fails_when_the_origin_is_down(pod: Pod, kind: str) -> None:
    with dead_origin(kind) as base:
        cache = warm_multi(pod, base)
        seed(cache / "model.safetensors", b"x" * 10, record=len(FILES["model.safetensors"]))

        run = pod.stage(**TIGHT)

    assert run.returncode == 1, str(run)
    assert run.term is not None and run.term["file"] == "model.safetensors"
    assert (cache / "model.safetensors").read_bytes() == b"x" * 10


# --- §8.4 item 4: OnChange keeps what passes its local checks, within the timeouts ----------------


@pytest.mark.parametrize("kind", DEAD)
@pytest.mark.parametrize("shape", ["single", "multi"])
def test_s7_onchange_warm_start_offline_keeps_within_the_timeouts(
    pod: Pod, kind: str, shape: str
) -> None:
    with dead_origin(kind) as base:
        if shape == "single":
            warm_single(pod, base)
            expected = ["Revalidation unreachable; kept cached copy"]
        else:
            warm_multi(pod, base)
            expected = [f"Revalidation unreachable for {rel}; kept cached copy" for rel in FILES]
        before = snapshot(pod.models)

        run = pod.stage(**ON_CHANGE, **TIGHT).ok()

    for line in expected:
        assert run.line_with(line).startswith(line)
    assert run.stats[3] == len(expected)
    assert snapshot(pod.models) == before
    # Two attempts of at most 0.5 s each (sleeps are not slept in-process).
    assert run.seconds < 3, str(run)


@pytest.mark.parametrize("kind", ["accept", "syn-drop"])
def test_s38_onchange_blackholed_origin_does_not_stall_per_shard(pod: Pod, kind: str) -> None:
    files = {rel: payload(1024, seed=i) for i, rel in enumerate(SHARDS)}
    with dead_origin(kind) as base:
        warm_multi(pod, base, files)

        run = pod.run(**ON_CHANGE, **TIGHT).ok()

    # 20 shards x (2 attempts x 0.5 s) would be 20 s; one origin is asked once.
    assert run.seconds < 10, str(run)
    assert run.stats == (20, 0, 0, 20)
    for rel in SHARDS:
        assert f"Revalidation unreachable for {rel}; kept cached copy" in run.stderr


def test_s38_onchange_asks_a_silent_origin_once_for_all_shards(pod: Pod) -> None:
    files = {rel: payload(1024, seed=i) for i, rel in enumerate(SHARDS)}
    with Blackhole("accept") as listener:
        warm_multi(pod, listener.url, files)

        run = pod.stage(**ON_CHANGE, **TIGHT).ok()

        # The first shard's probe and its one retry; no other shard connects.
        assert listener.connections <= 2
    assert run.stats == (20, 0, 0, 20)


def test_onchange_offline_missing_file_fails_the_run(pod: Pod) -> None:
    with dead_origin("closed") as base:
        cache = warm_multi(pod, base)
        (cache / "config.json").unlink()

        run = pod.stage(**ON_CHANGE, **TIGHT).failed("ModelSourceUnreachable")

    assert "model artifact config.json missing and revalidation failed" in run.term["message"]  # type: ignore[index]
    assert not (cache / "config.json").exists()


# --- read-only and FUSE warm caches (§8.4 item 5; scenarios 5, 10, 25, 48, 52) --------------------


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
@pytest.mark.parametrize("fs", [read_only_fs, fuse_fs], ids=["read-only", "fuse-serving"])
def test_s5_s10_s25_warm_cache_starts_offline_without_lock_or_writes(
    pod: Pod, policy: str, fs: object
) -> None:
    with dead_origin("closed") as base:
        warm_multi(pod, base)
        before = snapshot(pod.models)

        run = pod.stage(fs=fs, LLMKUBE_REFRESH_POLICY=policy, **TIGHT).ok()  # type: ignore[arg-type]

    assert snapshot(pod.models) == before
    assert run.stats[1] == 0
    assert run.warnings == [w for w in run.warnings if "retrying" in w]


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
def test_s48_fuse_serving_pod_starts_from_a_legacy_cache_and_writes_nothing(
    pod: Pod, policy: str
) -> None:
    with dead_origin("closed") as base:
        cache = warm_multi(pod, base, records=False)
        before = snapshot(pod.models)

        run = pod.stage(fs=fuse_fs, LLMKUBE_REFRESH_POLICY=policy, **TIGHT).ok()

    assert snapshot(pod.models) == before
    for rel in FILES:
        assert any("no valid size record" in w and rel in w for w in run.warnings), str(run)
        assert record_of(cache / rel) is None


def test_s52_fuse_stager_backfills_the_record_so_readers_stop_warning(pod: Pod) -> None:
    with dead_origin("closed") as base:
        cache = warm_multi(pod, base, records=False)

        pod.stage(fs=fuse_fs, LLMKUBE_PREFETCH_STAGER="true", **TIGHT).ok()
        reader = pod.stage(fs=fuse_fs, **TIGHT).ok()

    assert all(record_of(cache / rel) == str(len(data)) for rel, data in FILES.items())
    assert not (cache / ".llmkube.lock").exists()  # a FUSE stager takes no flock
    assert reader.warnings == []


def test_s26_fuse_serving_pod_missing_file_is_refused_without_network(pod: Pod) -> None:
    with Blackhole("accept") as listener:
        cache = warm_multi(pod, listener.url)
        (cache / "model.safetensors").unlink()
        before = snapshot(pod.models)

        run = pod.stage(fs=fuse_fs).failed("ModelCacheLockUnsupported")

        assert listener.connections == 0
    assert snapshot(pod.models) == before
    assert "model.safetensors" in run.term["message"]  # type: ignore[index]


def test_s6_cache_written_by_the_shell_scripts_starts_offline(pod: Pod) -> None:
    # Operator upgrade (Recreate): the new agent starts from the old cache offline.
    with dead_origin("syn-drop") as base:
        cache = warm_multi(pod, base)
        seed(cache / "model.safetensors.0123456789ab.tmp", b"partial")  # shell partial
        before = snapshot(pod.models)

        for policy in ("IfNotPresent", "OnChange"):
            run = pod.stage(LLMKUBE_REFRESH_POLICY=policy, **TIGHT).ok()
            assert run.stats[1] == 0

    assert snapshot(pod.models) == before
