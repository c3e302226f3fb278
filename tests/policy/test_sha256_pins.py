"""sha256 pins, end to end (spec §4.2, §5.3 item 9, §6.2, §6.4, §7; scenarios 91, 92):
MODEL_SHA256 / MODEL_FILE_SHA256, their fail-closed prechecks, stamps
`<digest> <size> <mtime>`, rejection markers `<file>.<expected>.sha256-rejected`
and the co-tenant rules of a cache directory keyed on the source alone.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.harness.disk import (
    debris,
    markers,
    record_of,
    seed,
    sha256,
    snapshot,
    stamp,
    stamp_triple,
    write_stamp,
)
from tests.harness.origin import Fault, Origin, closed_port_url, methods, serve_repo
from tests.harness.pod import ON_CHANGE, Pod
from tests.harness.sample import payload

pytestmark = pytest.mark.e2e

PATH = "/files/model.gguf"
DATA = payload(64 * 1024, seed=41)
MOVED = payload(70 * 1024, seed=42)
GOOD = sha256(DATA)
WRONG = sha256(b"not the model")

SHARD = "model.safetensors"
CONFIG = "config.json"
REPO_FILES = {SHARD: payload(48 * 1024, seed=43), CONFIG: b'{"model_type": "llama"}'}


def served(pod: Pod, origin: Origin, data: bytes = DATA) -> Path:
    origin.put(PATH, data)
    return pod.single(origin.url + PATH)


def file_pins(*lines: tuple[str, str]) -> str:
    return "\n".join(f"{digest} {rel}" for digest, rel in lines)


# --- fail-closed prechecks (§6.4, §7): exit 2, zero requests, nothing created -------------------


PRECHECKS = [
    pytest.param("single", {"MODEL_SHA256": ""}, "refusing to transfer unchecked", id="sha-empty"),
    pytest.param(
        "single", {"MODEL_SHA256": "  "}, "refusing to transfer unchecked", id="sha-blank"
    ),
    pytest.param(
        "multi", {"MODEL_FILE_SHA256": ""}, "refusing to transfer unchecked", id="file-sha-empty"
    ),
    pytest.param(
        "multi",
        {"MODEL_FILE_SHA256": file_pins((GOOD, SHARD), (GOOD, "tokenizer.json"))},
        "not staged files",
        id="orphan-key",
    ),
    pytest.param(
        "multi",
        {"MODEL_FILE_SHA256": file_pins((GOOD, SHARD + " "))},
        "whitespace",
        id="trailing-whitespace-key",
    ),
    pytest.param(
        "multi",
        {"MODEL_FILE_SHA256": file_pins((GOOD, " " + SHARD))},
        "whitespace",
        id="leading-whitespace-key",
    ),
]


@pytest.mark.parametrize(("shape", "env", "text"), PRECHECKS)
def test_pin_precheck_fails_closed_before_any_io(
    pod: Pod, origin: Origin, shape: str, env: dict[str, str], text: str
) -> None:
    if shape == "single":
        served(pod, origin)
    else:
        pod.multi(serve_repo(origin, REPO_FILES), [SHARD, CONFIG])

    run = pod.run(**env).failed("InvalidConfiguration", exit_code=2)

    assert run.term is not None and text in run.term["message"]
    assert run.term["retryable"] is False
    assert origin.requests() == []
    assert not pod.models.exists(), "a failed precheck created files"


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
def test_pin_precheck_runs_before_the_sweep_on_a_warm_cache(
    pod: Pod, origin: Origin, policy: str
) -> None:
    cache = pod.multi(serve_repo(origin, REPO_FILES), [SHARD, CONFIG])
    for rel, data in REPO_FILES.items():
        seed(cache / rel, data, record=len(data))
    seed(cache / (SHARD + ".llmkube-size.AbC123"), b"12", age_s=3600)  # old debris
    before = snapshot(pod.models)

    pod.run(MODEL_FILE_SHA256="", LLMKUBE_REFRESH_POLICY=policy).failed(
        "InvalidConfiguration", exit_code=2
    )

    assert snapshot(pod.models) == before
    assert origin.requests() == []


# --- stamps (§4.2, §7) ----------------------------------------------------------------------------


def test_s91_download_publishes_the_stamp_triple(pod: Pod, origin: Origin) -> None:
    dest = served(pod, origin)

    run = pod.run(MODEL_SHA256=GOOD).ok()

    assert dest.read_bytes() == DATA
    assert record_of(dest) == str(len(DATA))
    # Hashed while downloading: the stamp names the received bytes' digest.
    assert stamp(dest) == stamp_triple(dest, GOOD)
    assert "Model downloaded successfully" in run.stderr
    assert "stamp hit" not in run.stderr
    assert methods(origin) == {"HEAD": 1, "GET": 1}
    assert markers(dest) == []


def test_s91_resumed_download_is_hashed_over_the_whole_file(pod: Pod, origin: Origin) -> None:
    # A matching partial is resumed with a Range request; the digest must
    # cover the resumed prefix too, or the pin would reject a good file.
    dest = served(pod, origin)
    etag = '"' + sha256(DATA)[:16] + '"'
    key = sha256(f"CL{len(DATA)}ET{etag}".encode())[:12]
    seed(Path(f"{dest}.{key}.tmp"), DATA[:20000], age_s=3600)

    pod.stage(MODEL_SHA256=GOOD).ok()

    (get,) = origin.requests(PATH, "GET")
    assert get.headers.get("range") == "bytes=20000-"
    assert get.body_bytes == len(DATA) - 20000
    assert dest.read_bytes() == DATA
    assert stamp(dest) == stamp_triple(dest, GOOD)
    assert markers(dest) == []


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
def test_s91_warm_cache_is_hashed_once_and_stamped_with_zero_gets(
    pod: Pod, origin: Origin, policy: str
) -> None:
    dest = served(pod, origin)
    seed(dest, DATA, record=len(DATA))

    first = pod.run(MODEL_SHA256=GOOD, LLMKUBE_REFRESH_POLICY=policy).ok()

    assert stamp(dest) == stamp_triple(dest, GOOD)
    assert "stamp hit" not in first.stderr
    assert methods(origin)["GET"] == 0
    second = pod.run(MODEL_SHA256=GOOD, LLMKUBE_REFRESH_POLICY=policy).ok()
    assert "stamp hit" in second.stderr
    assert methods(origin)["GET"] == 0
    if policy == "IfNotPresent":
        assert origin.requests() == []
        assert "Model already cached, skipping download" in second.lines
        assert second.line_with("stamp hit").startswith("model.gguf matches its sha256 pin")
    assert second.stats == (1, 0, 1, 0)


def test_s91_stamp_hit_accepts_the_file_without_reading_it(pod: Pod, origin: Origin) -> None:
    # Trust semantics: a stamp whose size and mtime still match is accepted
    # without hashing. Proof: different bytes with the same size and mtime
    # pass. The stamp is put in place after its file last changed: one older
    # than its file's change time is no longer trusted (#29 item 2,
    # tests/storage/test_stamp_binding.py).
    dest = served(pod, origin)
    seed(dest, bytes(len(DATA)), record=len(DATA))
    write_stamp(dest, GOOD)

    run = pod.stage(MODEL_SHA256=GOOD).ok()

    assert "stamp hit" in run.stderr
    assert origin.requests() == []
    assert dest.read_bytes() == bytes(len(DATA))


def test_s91_legacy_bare_digest_stamp_is_rehashed_once_and_rewritten(
    pod: Pod, origin: Origin
) -> None:
    dest = served(pod, origin)
    seed(dest, DATA, record=len(DATA))
    Path(str(dest) + ".sha256").write_text(GOOD)

    first = pod.stage(MODEL_SHA256=GOOD).ok()

    assert "stamp hit" not in first.stderr
    assert stamp(dest) == stamp_triple(dest, GOOD)
    second = pod.stage(MODEL_SHA256=GOOD).ok()
    assert "stamp hit" in second.stderr
    assert origin.requests() == []


def test_s91_stamp_of_a_changed_file_is_a_miss(pod: Pod, origin: Origin) -> None:
    # The stamp's size/mtime no longer match: the file is hashed (and repaired).
    dest = served(pod, origin)
    seed(dest, DATA, record=len(DATA))
    write_stamp(dest, GOOD)
    dest.write_bytes(DATA[:-1] + b"\0")
    os.utime(dest, (1, 1))

    run = pod.stage(MODEL_SHA256=GOOD).ok()

    assert "stamp hit" not in run.stderr
    assert dest.read_bytes() == DATA
    assert stamp(dest) == stamp_triple(dest, GOOD)


# --- mismatches and rejection markers ---------------------------------------------------------


def test_s91_mismatch_discards_the_download_and_records_a_rejection(
    pod: Pod, origin: Origin
) -> None:
    dest = served(pod, origin)

    run = pod.run(MODEL_SHA256=WRONG).failed("ModelTransferChecksumMismatch")

    message = run.term["message"]  # type: ignore[index]
    assert "spec.sha256 mismatch" in message and "discarded" in message
    assert run.term["retryable"] is False  # type: ignore[index]
    assert markers(dest) == [WRONG]
    assert not dest.exists()
    assert stamp(dest) is None
    assert debris(pod.models) == []
    assert methods(origin)["GET"] == 1


def test_s91_marker_bounds_re_downloads_zero_requests(pod: Pod, origin: Origin) -> None:
    dest = served(pod, origin)
    pod.stage(MODEL_SHA256=WRONG).failed("ModelTransferChecksumMismatch")
    origin.clear_log()

    for _ in range(2):
        run = pod.run(MODEL_SHA256=WRONG).failed("ModelTransferChecksumMismatch")
        assert "spec.sha256 mismatch for model.gguf" in run.term["message"]  # type: ignore[index]
        assert "sha256-rejected" in run.term["message"]  # type: ignore[index]
    assert origin.requests() == []
    assert not dest.exists()


def test_s92_marker_failure_text_matches_the_scripts(pod: Pod, origin: Origin) -> None:
    cache = pod.multi(serve_repo(origin, REPO_FILES), [SHARD, CONFIG])
    pins = file_pins((WRONG, SHARD))
    pod.stage(MODEL_FILE_SHA256=pins).failed("ModelTransferChecksumMismatch")

    run = pod.stage(MODEL_FILE_SHA256=pins).failed("ModelTransferChecksumMismatch")

    message = run.term["message"]  # type: ignore[index]
    assert f"spec.fileSha256 mismatch for {SHARD}" in message
    assert "sha256-rejected to retry" in message
    assert f"{SHARD}.{WRONG}.sha256-rejected" in message
    assert (cache / f"{SHARD}.{WRONG}.sha256-rejected").exists()


def test_s91_corrected_pin_retries_cleanly_and_the_old_marker_is_inert(
    pod: Pod, origin: Origin
) -> None:
    dest = served(pod, origin)
    pod.stage(MODEL_SHA256=WRONG).failed("ModelTransferChecksumMismatch")

    fixed = pod.run(MODEL_SHA256=GOOD).ok()

    assert dest.read_bytes() == DATA
    assert stamp(dest) == stamp_triple(dest, GOOD)
    assert markers(dest) == [WRONG]  # left for a human; keyed on the old pin
    assert fixed.stats == (1, 1, 0, 0)
    origin.clear_log()
    pod.stage(MODEL_SHA256=GOOD).ok()
    assert origin.requests() == []


def test_s91_co_tenant_publish_never_clears_another_pins_marker(pod: Pod, origin: Origin) -> None:
    # Two Models on one source share MODEL_PATH (spec §4.1): A's pin is wrong, B's right.
    dest = served(pod, origin)
    pod.stage(MODEL_SHA256=WRONG).failed("ModelTransferChecksumMismatch")

    pod.stage(MODEL_SHA256=GOOD).ok()  # B publishes

    assert markers(dest) == [WRONG]
    b_file, b_stamp = dest.stat(), stamp(dest)
    origin.clear_log()
    again = pod.stage(MODEL_SHA256=WRONG).failed("ModelTransferChecksumMismatch")
    assert methods(origin)["GET"] == 0
    assert "sha256-rejected" in again.term["message"]  # type: ignore[index]
    after = dest.stat()
    assert (after.st_ino, after.st_mtime_ns) == (b_file.st_ino, b_file.st_mtime_ns)
    assert stamp(dest) == b_stamp


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
def test_s91_wrong_pin_never_deletes_a_co_tenants_file_or_stamp(
    pod: Pod, origin: Origin, policy: str
) -> None:
    dest = served(pod, origin)
    pod.stage(MODEL_SHA256=GOOD).ok()  # B
    before = snapshot(pod.models)
    b_stamp = stamp(dest)

    run = pod.stage(MODEL_SHA256=WRONG, LLMKUBE_REFRESH_POLICY=policy)  # A

    assert run.returncode == 4, str(run)
    assert run.reason == "ModelTransferChecksumMismatch"
    assert dest.read_bytes() == DATA
    assert stamp(dest) == b_stamp
    assert record_of(dest) == str(len(DATA))
    after = snapshot(pod.models)
    for name in ("k1/model.gguf", "k1/model.gguf.sha256", "k1/model.gguf.llmkube-size"):
        assert after[name] == before[name], name
    assert markers(dest) == [WRONG]


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
def test_s91_corrupt_warm_copy_is_replaced_in_the_same_start_without_a_marker(
    pod: Pod, origin: Origin, policy: str
) -> None:
    # OnChange: the origin still announces the cached size (size-match corrupt).
    dest = served(pod, origin)
    seed(dest, bytes(len(DATA)), record=len(DATA))

    run = pod.stage(MODEL_SHA256=GOOD, LLMKUBE_REFRESH_POLICY=policy).ok()

    assert dest.read_bytes() == DATA
    assert stamp(dest) == stamp_triple(dest, GOOD)
    assert markers(dest) == []  # the marker accuses the origin, not the disk
    assert methods(origin)["GET"] == 1
    assert run.stats == (1, 1, 0, 0)


def test_s91_onchange_download_mismatch_is_rejected_before_publish(
    pod: Pod, origin: Origin
) -> None:
    dest = served(pod, origin)

    run = pod.stage(MODEL_SHA256=WRONG, **ON_CHANGE).failed("ModelTransferChecksumMismatch")

    assert "discarded" in run.term["message"]  # type: ignore[index]
    assert not dest.exists()
    assert markers(dest) == [WRONG]
    assert debris(pod.models) == []


def test_s91_onchange_moved_upstream_keeps_the_pinned_copy_then_stops_asking(
    pod: Pod, origin: Origin
) -> None:
    dest = served(pod, origin)
    pod.stage(MODEL_SHA256=GOOD).ok()
    origin.put(PATH, MOVED)  # upstream moved: new bytes, no longer the pinned digest
    origin.clear_log()

    first = pod.run(MODEL_SHA256=GOOD, **ON_CHANGE).ok()

    assert "kept the pinned cached copy" in first.stderr
    assert "spec.sha256" in first.line_with("kept the pinned cached copy")
    assert "unreachable" not in first.stderr.lower()
    assert first.stats == (1, 0, 0, 1)
    assert markers(dest) == [GOOD]
    assert dest.read_bytes() == DATA
    assert stamp(dest) == stamp_triple(dest, GOOD)
    assert methods(origin) == {"HEAD": 1, "GET": 1}
    assert debris(pod.models) == []

    origin.clear_log()
    for _ in range(2):
        later = pod.run(MODEL_SHA256=GOOD, **ON_CHANGE).ok()
        assert "kept the pinned cached copy" in later.stderr
        assert later.stats == (1, 0, 0, 1)
    assert origin.requests() == [], "the marker must stop the HEAD and the GET"
    assert dest.read_bytes() == DATA


def test_s91_onchange_offline_keeps_a_copy_that_verifies_and_stamps_it(pod: Pod) -> None:
    dest = pod.single(closed_port_url() + PATH)
    seed(dest, DATA, record=len(DATA))

    run = pod.stage(MODEL_SHA256=GOOD, **ON_CHANGE).ok()

    assert "Revalidation unreachable; kept cached copy" in run.stderr
    assert stamp(dest) == stamp_triple(dest, GOOD)
    assert run.stats == (1, 0, 0, 1)


def test_s91_onchange_offline_rejects_a_corrupt_copy_and_leaves_it(pod: Pod) -> None:
    dest = pod.single(closed_port_url() + PATH)
    seed(dest, bytes(len(DATA)), record=len(DATA))
    before = snapshot(pod.models)

    run = pod.stage(MODEL_SHA256=GOOD, **ON_CHANGE)

    # Reported as the pin not met (next test), so exit 4 like every checksum
    # failure, although the origin's return could repair it.
    assert run.returncode == 4, str(run)
    assert "kept cached copy" not in run.stderr
    assert snapshot(pod.models) == before  # left on disk, no marker, no stamp
    assert markers(dest) == []


def test_s91_onchange_offline_corrupt_copy_is_reported_as_a_checksum_mismatch(pod: Pod) -> None:
    dest = pod.single(closed_port_url() + PATH)
    seed(dest, bytes(len(DATA)), record=len(DATA))

    run = pod.stage(MODEL_SHA256=GOOD, **ON_CHANGE)

    assert run.reason == "ModelTransferChecksumMismatch", str(run)


# --- multi-file pins (§6.2, §6.3; scenario 92) ----------------------------------------------------


@pytest.fixture
def repo(pod: Pod, origin: Origin) -> Path:
    return pod.multi(serve_repo(origin, REPO_FILES), [SHARD, CONFIG])


def test_s92_pinned_file_verified_and_unpinned_file_staged(pod: Pod, origin, repo) -> None:
    run = pod.run(MODEL_FILE_SHA256=file_pins((sha256(REPO_FILES[SHARD]), SHARD))).ok()

    for rel, data in REPO_FILES.items():
        assert (repo / rel).read_bytes() == data
        assert record_of(repo / rel) == str(len(data))
    assert stamp(repo / SHARD) == stamp_triple(repo / SHARD, sha256(REPO_FILES[SHARD]))
    assert stamp(repo / CONFIG) is None  # unpinned: no protection, no stamp
    assert run.stats == (2, 2, 0, 0)


def test_s92_warm_pinned_file_is_a_stamp_hit_with_zero_requests(pod: Pod, origin, repo) -> None:
    pins = file_pins((sha256(REPO_FILES[SHARD]), SHARD))
    pod.stage(MODEL_FILE_SHA256=pins).ok()
    origin.clear_log()

    run = pod.run(MODEL_FILE_SHA256=pins).ok()

    assert origin.requests() == []
    line = f"Model artifact {SHARD} already cached, skipping download"
    assert line in run.lines  # whole: the stamp hit is said on its own line
    assert run.line_with("stamp hit").startswith(f"{SHARD} matches its sha256 pin")
    assert run.stats == (2, 0, 2, 0)


def test_s92_mismatch_rejects_the_pinned_file_only(pod: Pod, origin, repo) -> None:
    run = pod.run(MODEL_FILE_SHA256=file_pins((WRONG, SHARD))).failed(
        "ModelTransferChecksumMismatch"
    )

    message = run.term["message"]  # type: ignore[index]
    assert "spec.fileSha256 mismatch" in message and "discarded" in message
    assert run.term["file"] == SHARD  # type: ignore[index]
    assert not (repo / SHARD).exists()
    assert markers(repo / SHARD) == [WRONG]
    assert debris(repo) == []


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
def test_s92_marker_bounds_retries_under_both_policies(pod: Pod, origin, repo, policy: str) -> None:
    pins = file_pins((WRONG, SHARD))
    pod.stage(MODEL_FILE_SHA256=pins).failed("ModelTransferChecksumMismatch")
    origin.clear_log()

    run = pod.stage(MODEL_FILE_SHA256=pins, LLMKUBE_REFRESH_POLICY=policy)

    assert run.returncode == 4 and run.reason == "ModelTransferChecksumMismatch", str(run)
    assert f"spec.fileSha256 mismatch for {SHARD}" in run.term["message"]  # type: ignore[index]
    assert methods(origin)["GET"] == 0
    assert origin.requests(f"/org/repo/resolve/main/{SHARD}") == []


def test_s92_onchange_moved_upstream_keeps_the_pinned_shard(pod: Pod, origin, repo) -> None:
    pins = file_pins((sha256(REPO_FILES[SHARD]), SHARD))
    pod.stage(MODEL_FILE_SHA256=pins).ok()
    origin.put(f"/org/repo/resolve/main/{SHARD}", MOVED)

    run = pod.stage(MODEL_FILE_SHA256=pins, **ON_CHANGE).ok()

    line = (
        f"Model artifact {SHARD}: the origin served bytes that do not match the pinned "
        "spec.fileSha256; kept the pinned cached copy"
    )
    assert run.line_with(line).startswith(("WARNING: " + line, line))
    assert f"Model artifact {CONFIG} revalidated (unchanged, skipped download)" in run.stderr
    assert (repo / SHARD).read_bytes() == REPO_FILES[SHARD]
    assert markers(repo / SHARD) == [sha256(REPO_FILES[SHARD])]
    origin.clear_log()
    again = pod.stage(MODEL_FILE_SHA256=pins, **ON_CHANGE).ok()
    assert line in again.stderr
    assert origin.requests(f"/org/repo/resolve/main/{SHARD}") == []


def test_without_pins_nothing_of_the_digest_machinery_shows(pod: Pod, origin: Origin) -> None:
    # A partially pinned set stages its unpinned file exactly as the unpinned path does.
    base = serve_repo(origin, REPO_FILES)
    plain = pod.multi(base, [SHARD, CONFIG], key="plain")
    unpinned_run = pod.stage().ok()
    mixed = pod.multi(base, [SHARD, CONFIG], key="mixed")
    mixed_run = pod.stage(MODEL_FILE_SHA256=file_pins((sha256(REPO_FILES[SHARD]), SHARD))).ok()

    assert sorted(p.name for p in plain.iterdir()) == sorted(
        [
            *(SHARD, CONFIG, SHARD + ".llmkube-size", CONFIG + ".llmkube-size", ".llmkube.lock"),
            ".llmkube-validators",  # every source's validators (#46 item 1)
        ]
    )
    assert "sha256" not in unpinned_run.stderr and "stamp" not in unpinned_run.stderr
    assert _untimed(unpinned_run.lines, CONFIG) == _untimed(mixed_run.lines, CONFIG)
    assert stamp(mixed / CONFIG) is None and markers(mixed / CONFIG) == []
    assert (mixed / CONFIG).read_bytes() == (plain / CONFIG).read_bytes()
    assert record_of(mixed / CONFIG) == record_of(plain / CONFIG)


def _untimed(lines: list[str], rel: str) -> list[str]:
    """A file's lines without what the clock decides: the seconds and rate
    of its `received` line differ between any two runs."""
    return [re.sub(r" in [0-9.]+ s, [^;]* on average", "", line) for line in lines if rel in line]


def test_s92_onchange_pinned_unchanged_is_a_stamp_hit(pod: Pod, origin, repo) -> None:
    pins = file_pins((sha256(REPO_FILES[SHARD]), SHARD))
    pod.stage(MODEL_FILE_SHA256=pins).ok()
    origin.clear_log()

    run = pod.stage(MODEL_FILE_SHA256=pins, **ON_CHANGE).ok()

    line = f"Model artifact {SHARD} revalidated (unchanged, skipped download)"
    assert line in run.lines
    assert run.line_with("stamp hit").startswith(f"{SHARD} matches its sha256 pin")
    assert methods(origin) == {"HEAD": 2}


def test_s92_onchange_offline_pinned_shard_kept_when_it_verifies(pod: Pod) -> None:
    cache = pod.multi(closed_port_url() + "/org/repo/resolve/main/", [SHARD, CONFIG])
    for rel, data in REPO_FILES.items():
        seed(cache / rel, data, record=len(data))

    run = pod.stage(MODEL_FILE_SHA256=file_pins((sha256(REPO_FILES[SHARD]), SHARD)), **ON_CHANGE)

    run.ok()
    assert f"Revalidation unreachable for {SHARD}; kept cached copy" in run.stderr
    assert stamp(cache / SHARD) == stamp_triple(cache / SHARD, sha256(REPO_FILES[SHARD]))


def test_s92_fault_during_pinned_download_never_publishes_unverified_bytes(
    pod: Pod, origin, repo
) -> None:
    # A truncated body is resumed and the digest still covers every byte.
    origin.set_fault(
        f"/org/repo/resolve/main/{SHARD}", Fault(truncate_after=10000, times=1, methods=("GET",))
    )

    pod.stage(MODEL_FILE_SHA256=file_pins((sha256(REPO_FILES[SHARD]), SHARD))).ok()

    assert (repo / SHARD).read_bytes() == REPO_FILES[SHARD]
    assert stamp(repo / SHARD) == stamp_triple(repo / SHARD, sha256(REPO_FILES[SHARD]))
    gets = origin.requests(f"/org/repo/resolve/main/{SHARD}", "GET")
    assert len(gets) == 2 and gets[1].headers.get("range") == "bytes=10000-"


def test_s92_a_resume_into_other_bytes_is_caught_by_the_pin(pod: Pod, origin: Origin) -> None:
    # The adversary's form of the test above (#32 item 7): the first GET is cut
    # at 10000 bytes and the resume's tail is another model's under the same
    # ETag and size (an origin that lies), so only a digest over every byte,
    # the resumed ones included, can refuse it. With the pin check deleted the
    # test above still passed; this one publishes the wrong bytes.
    good = REPO_FILES[SHARD]
    liar = good[:10000] + payload(len(good) - 10000, seed=97)
    base = serve_repo(origin, {**REPO_FILES, SHARD: liar})
    path = f"/org/repo/resolve/main/{SHARD}"
    origin.put(path, liar, etag='"' + sha256(good)[:16] + '"')
    origin.set_fault(path, Fault(truncate_after=10000, times=1, methods=("GET",)))
    repo = pod.multi(base, [SHARD, CONFIG])

    run = pod.stage(MODEL_FILE_SHA256=file_pins((sha256(good), SHARD)))

    run.failed("ModelTransferChecksumMismatch")
    assert not (repo / SHARD).exists()
    assert markers(repo / SHARD) == [sha256(good)]
    gets = origin.requests(path, "GET")
    assert any(g.headers.get("range") == "bytes=10000-" for g in gets), "no resume happened"
