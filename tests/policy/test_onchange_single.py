"""LLMKUBE_REFRESH_POLICY=OnChange, single-file (spec §5.3, §8.3), end to end:
`python -m llmkube_stager stage` against the loopback origin. Evidence: exit
code, termination message, bytes and size record on disk, the requests the
origin received (HEAD vs GET) and the exact log lines of spec §13.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.harness.disk import debris, record_of, seed, snapshot
from tests.harness.features import missing_feature
from tests.harness.origin import Fault, Origin, closed_port_url, methods
from tests.harness.plan_inputs import fuse_fs
from tests.harness.pod import ON_CHANGE, Pod
from tests.harness.sample import payload

pytestmark = pytest.mark.e2e

PATH = "/files/model.gguf"
OLD = payload(48 * 1024, seed=1)
NEW = payload(64 * 1024, seed=2)

REVALIDATING = "Revalidating model against upstream (RefreshPolicy=OnChange)..."
UNCHANGED = "Model revalidated (unchanged, skipped download)"
DOWNLOADED = "Model revalidated (downloaded)"
UNREACHABLE_KEPT = "Revalidation unreachable; kept cached copy"


@pytest.fixture
def warm(pod: Pod, origin: Origin):  # type: ignore[no-untyped-def]
    """OLD cached (with its record) and served by the origin; returns MODEL_PATH."""
    origin.put(PATH, OLD)
    dest = pod.single(origin.url + PATH)
    seed(dest, OLD, record=len(OLD))
    return dest


def test_s88_onchange_single_unchanged_is_skipped_with_one_head(pod: Pod, origin, warm) -> None:
    before = warm.stat()

    run = pod.run(**ON_CHANGE).ok()

    assert methods(origin) == {"HEAD": 1}
    assert REVALIDATING in run.lines[0]
    assert run.line_with(UNCHANGED).startswith(UNCHANGED)
    assert "Downloading model..." not in run.stderr
    assert run.stats == (1, 0, 1, 0)
    after = warm.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert warm.read_bytes() == OLD


def test_s88_onchange_single_changed_downloads_new_bytes_and_record(pod: Pod, origin, warm) -> None:
    origin.put(PATH, NEW)

    run = pod.run(**ON_CHANGE).ok()

    assert warm.read_bytes() == NEW
    assert record_of(warm) == str(len(NEW))
    # The probe's answer is reused by the transfer: one HEAD, one GET.
    assert methods(origin) == {"HEAD": 1, "GET": 1}
    (get,) = origin.requests(PATH, "GET")
    assert (get.status, get.body_bytes) == (200, len(NEW))
    assert run.line_with(DOWNLOADED).startswith(DOWNLOADED)
    assert UNCHANGED not in run.stderr
    assert run.stats == (1, 1, 0, 0)
    assert run.term is not None and run.term["stats"]["bytes"] == len(NEW)
    assert debris(pod.models) == []


def test_s88_onchange_single_no_cache_one_get(pod: Pod, origin: Origin) -> None:
    origin.put(PATH, NEW)
    dest = pod.single(origin.url + PATH)

    run = pod.stage(**ON_CHANGE).ok()

    assert dest.read_bytes() == NEW
    assert record_of(dest) == str(len(NEW))
    assert methods(origin)["GET"] == 1
    assert DOWNLOADED in run.stderr
    assert run.stats == (1, 1, 0, 0)


def test_s88_onchange_stale_partial_of_another_version_is_swept(pod: Pod, origin, warm) -> None:
    # The old scripts' `<dest>.<key>.tmp` of an earlier upstream version.
    stale = seed(warm.parent / "model.gguf.deadbeefcafe.tmp", OLD[:1000], age_s=3600)
    origin.put(PATH, NEW)

    pod.stage(**ON_CHANGE).ok()

    assert not stale.exists()
    assert warm.read_bytes() == NEW
    assert debris(pod.models) == []


@pytest.mark.parametrize(
    "fault",
    [
        Fault(status=500, methods=("GET",)),
        Fault(status=503, methods=("GET",), retry_after="0"),
        Fault(truncate_after=1000, methods=("GET",)),
    ],
    ids=["get-500", "get-503", "get-truncated"],
)
def test_s34_onchange_single_changed_but_download_fails_keeps_cached_copy(
    pod: Pod, origin, warm, fault: Fault
) -> None:
    origin.put(PATH, NEW)
    origin.set_fault(PATH, fault)

    run = pod.stage(**ON_CHANGE).ok()

    assert warm.read_bytes() == OLD
    assert record_of(warm) == str(len(OLD))
    assert methods(origin)["HEAD"] == 1 and methods(origin)["GET"] >= 1
    kept = run.line_with("kept cached copy")
    assert "model.gguf" in kept
    # The origin answered: the log never calls it unreachable (scenario 51).
    assert "unreachable" not in run.stderr.lower()
    assert DOWNLOADED not in run.stderr
    assert run.stats == (1, 0, 0, 1)


def test_s7_onchange_single_offline_keeps_cached_copy(pod: Pod) -> None:
    dest = pod.single(closed_port_url() + PATH)
    seed(dest, OLD, record=len(OLD))

    run = pod.run(**ON_CHANGE, LLMKUBE_RETRIES="0").ok()

    assert run.line_with(UNREACHABLE_KEPT).startswith(UNREACHABLE_KEPT)
    assert dest.read_bytes() == OLD
    assert run.stats == (1, 0, 0, 1)
    assert run.warnings == [w for w in run.warnings if "retrying the probe" in w]


def test_onchange_single_missing_and_get_fails(pod: Pod) -> None:
    dest = pod.single(closed_port_url() + PATH)

    run = pod.run(**ON_CHANGE, LLMKUBE_RETRIES="0").failed("ModelSourceUnreachable")

    assert "model missing and revalidation failed" in run.term["message"]  # type: ignore[index]
    assert run.term["retryable"] is True  # type: ignore[index]
    assert not dest.exists()


def test_onchange_single_missing_and_get_404(pod: Pod, origin: Origin) -> None:
    dest = pod.single(origin.url + PATH)

    run = pod.stage(**ON_CHANGE).failed("ModelSourceNotFound")

    assert "model missing and revalidation failed" in run.term["message"]  # type: ignore[index]
    assert not dest.exists()


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(Fault(no_content_length=True, methods=("HEAD",)), id="nocl"),
        pytest.param(Fault(head_content_length_zero=True, methods=("HEAD",)), id="cl0"),
        pytest.param(Fault(status=405, methods=("HEAD",)), id="head-405"),
        pytest.param(Fault(status=503, methods=("HEAD",)), id="head-503"),
        pytest.param(
            Fault(status=429, methods=("HEAD",), retry_after="0"),
            id="head-429",
        ),
    ],
)
def test_s37_onchange_single_unknown_size_is_never_unchanged(
    pod: Pod, origin, warm, fault: Fault
) -> None:
    # Absent / 0 Content-Length or an error status is "unknown": try the GET
    # even though the cached copy has the same size (L0 quirk kept).
    origin.set_fault(PATH, fault)

    run = pod.stage(**ON_CHANGE).ok()

    assert UNCHANGED not in run.stderr
    assert DOWNLOADED in run.stderr
    assert methods(origin, PATH)["GET"] == 1
    assert warm.read_bytes() == OLD  # the same bytes, downloaded again
    assert record_of(warm) == str(len(OLD))
    assert run.stats == (1, 1, 0, 0)


@pytest.mark.parametrize("has_record", [True, False], ids=["record", "legacy"])
def test_s45_onchange_single_changed_get_500_keeps_with_or_without_record(
    pod: Pod, origin: Origin, has_record: bool
) -> None:
    origin.put(PATH, NEW)
    origin.set_fault(PATH, Fault(status=500, methods=("GET",)))
    dest = pod.single(origin.url + PATH)
    seed(dest, OLD, record=len(OLD) if has_record else None)

    run = pod.stage(**ON_CHANGE).ok()

    assert dest.read_bytes() == OLD
    assert record_of(dest) == (str(len(OLD)) if has_record else None)
    assert "kept cached copy" in run.stderr
    assert "unreachable" not in run.stderr.lower()
    assert run.stats == (1, 0, 0, 1)


@pytest.mark.parametrize(
    ("fault", "answered"),
    [
        (Fault(status=503), True),
        (Fault(status=429, retry_after="0"), True),
        # HEAD without a usable size, then a GET that stalls after its headers.
        (Fault(no_content_length=True, stall_after=0), False),
        (Fault(head_content_length_zero=True, stall_after=0), False),
    ],
    ids=["503", "429", "nocl-then-stall", "cl0-then-stall"],
)
def test_onchange_single_unknown_size_and_get_fails_keeps(
    pod: Pod, origin, warm, fault: Fault, answered: bool
) -> None:
    # §8.1 last column: NOCL / CL0 / 5xx / 429 -> try GET; GET fails -> keep.
    origin.put(PATH, NEW)
    origin.set_fault(PATH, fault)

    run = pod.stage(**ON_CHANGE, LLMKUBE_RETRIES="0", LLMKUBE_STALL_TIMEOUT="0.3").ok()

    assert warm.read_bytes() == OLD
    assert record_of(warm) == str(len(OLD))
    if not answered:
        assert methods(origin, PATH)["GET"] == 1
    assert "kept cached copy" in run.stderr
    if answered:
        assert "unreachable" not in run.stderr.lower()
    assert run.stats == (1, 0, 0, 1)


def test_onchange_single_nocl_asks_on_every_start_and_keeps_the_copy(
    pod: Pod, origin, warm
) -> None:
    # spec §5.3 note: with no Content-Length OnChange downloads on every
    # start. A close-delimited body of unknown size cannot be proven
    # complete (#10 defect 8): it is not published, the copy keeps serving.
    origin.set_fault(PATH, Fault(no_content_length=True))

    for _ in range(2):
        run = pod.stage(**ON_CHANGE).ok()
        assert DOWNLOADED not in run.stderr
        assert "kept cached copy" in run.stderr
    assert methods(origin, PATH) == {"HEAD": 2, "GET": 2}
    assert warm.read_bytes() == OLD


def test_s28_onchange_single_offline_file_shorter_than_its_record_fails(pod: Pod) -> None:
    dest = pod.single(closed_port_url() + PATH)
    seed(dest, b"12345", record=23)

    run = pod.run(**ON_CHANGE, LLMKUBE_RETRIES="0").failed("ModelCacheTruncated")

    assert run.term["file"] == "model.gguf"  # type: ignore[index]
    assert "kept cached copy" not in run.stderr
    assert dest.read_bytes() == b"12345"  # left on disk
    assert record_of(dest) == "23"


def test_s31_onchange_single_truncated_is_repaired_when_the_origin_is_up(
    pod: Pod, origin: Origin
) -> None:
    origin.put(PATH, OLD)
    dest = pod.single(origin.url + PATH)
    seed(dest, OLD[:100], record=len(OLD))

    run = pod.stage(**ON_CHANGE).ok()

    assert dest.read_bytes() == OLD
    assert record_of(dest) == str(len(OLD))
    assert run.stats == (1, 1, 0, 0)


def test_s46_onchange_single_truncated_and_download_fails_fails(pod: Pod, origin: Origin) -> None:
    origin.put(PATH, NEW)
    origin.set_fault(PATH, Fault(status=500, methods=("GET",)))
    dest = pod.single(origin.url + PATH)
    seed(dest, OLD[:100], record=len(OLD))

    run = pod.stage(**ON_CHANGE)

    assert run.returncode == 1, str(run)
    assert run.term is not None and run.term["outcome"] == "failed"
    assert "kept cached copy" not in run.stderr
    assert dest.read_bytes() == OLD[:100]


def test_s95_onchange_refresh_never_exposes_a_partial_file(pod: Pod, origin, warm) -> None:
    # While the new version is being received, MODEL_PATH still holds the
    # whole old file: publish is a rename (LLMKube #1428).
    big = payload(1 << 20, seed=3)
    origin.put(PATH, big)
    origin.set_fault(PATH, Fault(rate_bytes_per_s=2 << 20, methods=("GET",)))
    proc = pod.popen(**ON_CHANGE)
    try:
        seen_old_mid_transfer = False
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            gets = origin.requests(PATH, "GET")
            if gets and 0 < gets[0].body_bytes < len(big):
                assert warm.read_bytes() == OLD
                seen_old_mid_transfer = True
            time.sleep(0.02)
        run = pod.finish(proc, timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert run.returncode == 0, str(run)
    assert seen_old_mid_transfer, "never observed the transfer in progress"
    assert warm.read_bytes() == big
    assert DOWNLOADED in run.stderr


@pytest.mark.parametrize("state", ["changed", "offline", "missing"])
def test_s35_onchange_single_fuse_serving_pod_never_transfers(
    pod: Pod, origin: Origin, state: str
) -> None:
    origin.put(PATH, NEW)
    dest = pod.single((closed_port_url() if state == "offline" else origin.url) + PATH)
    if state != "missing":
        seed(dest, OLD, record=len(OLD))
    else:
        dest.parent.mkdir(parents=True)
    before = snapshot(pod.models)

    run = pod.stage(fs=fuse_fs, **ON_CHANGE, LLMKUBE_RETRIES="0")

    assert snapshot(pod.models) == before
    assert methods(origin)["GET"] == 0
    assert "Downloading model..." not in run.stderr
    if state == "missing":
        run.failed("ModelCacheLockUnsupported")
        return
    run.ok()
    expected = (
        "Upstream changed for model.gguf; a serving pod does not stage on a FUSE cache, "
        "so it kept the cached copy"
        if state == "changed"
        else UNREACHABLE_KEPT
    )
    assert run.line_with(expected).startswith(expected)
    assert run.stats == (1, 0, 0, 1)


HUGE = 1 << 43  # 8 TiB, sparse: the origin announces more than the cache can hold


@pytest.fixture
def huge_upstream(pod: Pod, origin: Origin, tmp_path: Path):  # type: ignore[no-untyped-def]
    """OLD cached; upstream "changed" to a sparse file of at least 8 TiB and
    always larger than the cache's free space, so the refresh fails on the
    free-space preflight (disk pressure) after an answered HEAD."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    size = max(HUGE, shutil.disk_usage(tmp_path).free + (1 << 40))
    with open(upstream / "model.gguf", "wb") as handle:
        try:
            handle.truncate(size)
        except OSError as exc:
            missing_feature(f"a sparse file of {size} bytes on {tmp_path} ({exc.strerror})")
    origin.serve_directory(str(upstream), "/big")
    dest = pod.single(origin.url + "/big/model.gguf")
    seed(dest, OLD, record=len(OLD))
    yield dest
    os.unlink(upstream / "model.gguf")


def test_s34_onchange_changed_but_no_space_keeps_the_cached_copy(
    pod: Pod, origin: Origin, huge_upstream: Path
) -> None:
    # "download fails (network blip, 5xx, disk pressure): cached copy kept".
    run = pod.stage(**ON_CHANGE).ok()

    assert huge_upstream.read_bytes() == OLD
    assert record_of(huge_upstream) == str(len(OLD))
    assert "kept cached copy" in run.stderr
    assert methods(origin) == {"HEAD": 1}
    assert run.stats == (1, 0, 0, 1)


def test_s34_onchange_no_space_is_not_called_unreachable(
    pod: Pod, origin: Origin, huge_upstream: Path
) -> None:
    run = pod.stage(**ON_CHANGE).ok()

    assert "unreachable" not in run.stderr.lower(), run.stderr
    assert "space" in run.line_with("kept cached copy"), run.stderr
