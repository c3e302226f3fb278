"""LLMKUBE_REFRESH_POLICY=OnChange, multi-file (spec §6.3, §8.1, §8.2, §8.5),
end to end against the loopback origin.

No mixed revisions (§8.5, scenarios 18/33): under OnChange every changed file
is staged into a complete partial first and published only when all of them
succeeded; otherwise the previous set keeps serving.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from llmkube_stager.errors import REMEDY_LOCK_UNSUPPORTED_PREFETCH
from tests.harness.disk import debris, record_of, seed, snapshot
from tests.harness.origin import Fault, Origin, closed_port_url, methods, serve_repo
from tests.harness.plan_inputs import fuse_fs, read_only_fs
from tests.harness.pod import ON_CHANGE, Pod
from tests.harness.sample import payload

pytestmark = pytest.mark.e2e

CONFIG = "config.json"
SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"
TOKENIZER = "tokenizer/tokenizer.json"
FILES = [SHARD1, SHARD2, CONFIG, TOKENIZER]
OLD = {
    SHARD1: payload(40 * 1024, seed=11),
    SHARD2: payload(36 * 1024, seed=12),
    CONFIG: b'{"architectures": ["LlamaForCausalLM"]}',
    TOKENIZER: payload(3 * 1024, seed=13),
}
# The upstream re-upload: both shards change size.
NEW = {SHARD1: payload(41 * 1024, seed=21), SHARD2: payload(37 * 1024, seed=22)}


def unchanged(rel: str) -> str:
    return f"Model artifact {rel} revalidated (unchanged, skipped download)"


def downloaded(rel: str) -> str:
    return f"Model artifact {rel} revalidated (downloaded)"


def unreachable_kept(rel: str) -> str:
    return f"Revalidation unreachable for {rel}; kept cached copy"


def repo_path(rel: str) -> str:
    return f"/org/repo/resolve/main/{rel}"


def warm_cache(pod: Pod, base: str, files: dict[str, bytes] = OLD, records: bool = True) -> Path:
    cache = pod.multi(base, files)
    for rel, data in files.items():
        seed(cache / rel, data, record=len(data) if records else None)
    return cache


def assert_holds(cache: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        assert (cache / rel).read_bytes() == data, rel
        assert record_of(cache / rel) == str(len(data)), rel


@pytest.fixture
def base(origin: Origin) -> str:
    return serve_repo(origin, OLD)


# --- UP-same / UP-changed ----------------------------------------------------------------------


def test_s88_onchange_multi_unchanged_is_skipped_with_heads_only(pod: Pod, origin, base) -> None:
    cache = warm_cache(pod, base)
    before = snapshot(cache)

    run = pod.run(**ON_CHANGE).ok()

    assert methods(origin) == {"HEAD": len(FILES)}
    for rel in FILES:
        assert run.line_with(unchanged(rel)).startswith(unchanged(rel))
    assert "Downloading model artifact" not in run.stderr
    assert run.stats == (4, 0, 4, 0)
    assert run.warnings == []
    assert snapshot(cache) == before  # no lock, no record rewritten


def test_s88_onchange_multi_one_changed_file_is_downloaded_and_recorded(
    pod: Pod, origin, base
) -> None:
    cache = warm_cache(pod, base)
    origin.put(repo_path(SHARD2), NEW[SHARD2])

    run = pod.stage(**ON_CHANGE).ok()

    assert_holds(cache, {**OLD, SHARD2: NEW[SHARD2]})
    assert methods(origin, repo_path(SHARD2)) == {"HEAD": 1, "GET": 1}
    assert methods(origin)["GET"] == 1
    assert downloaded(SHARD2) in run.stderr
    for rel in (SHARD1, CONFIG, TOKENIZER):
        assert unchanged(rel) in run.stderr
    assert run.stats == (4, 1, 3, 0)
    assert debris(cache) == []


def test_onchange_legacy_file_changed_upstream_is_refreshed_and_recorded(
    pod: Pod, origin, base
) -> None:
    cache = warm_cache(pod, base, records=False)
    origin.put(repo_path(SHARD1), NEW[SHARD1])

    run = pod.stage(**ON_CHANGE).ok()

    assert (cache / SHARD1).read_bytes() == NEW[SHARD1]
    assert record_of(cache / SHARD1) == str(len(NEW[SHARD1]))
    for rel in (SHARD2, CONFIG, TOKENIZER):  # unchanged: skipped, record backfilled
        assert unchanged(rel) in run.stderr
        assert record_of(cache / rel) == str(len(OLD[rel]))
    assert run.stats == (4, 1, 3, 0)


def test_s88_onchange_multi_cold_cache_one_get_per_file(pod: Pod, origin, base) -> None:
    cache = pod.multi(base, FILES)

    run = pod.stage(**ON_CHANGE).ok()

    assert_holds(cache, OLD)
    assert methods(origin)["GET"] == len(FILES)
    assert run.stats == (4, 4, 0, 0)


# --- §8.5 no mixed revisions -------------------------------------------------------------------


def test_s18_no_mixed_revisions_when_the_second_changed_file_fails_then_recovers(
    pod: Pod, origin, base
) -> None:
    cache = warm_cache(pod, base)
    origin.put(repo_path(SHARD1), NEW[SHARD1])
    origin.put(repo_path(SHARD2), NEW[SHARD2])
    origin.set_fault(repo_path(SHARD2), Fault(status=500, methods=("GET",)))

    first = pod.run(**ON_CHANGE, LLMKUBE_RETRIES="0").ok()

    # SHARD1's new bytes arrived but were not published: the old set serves.
    assert_holds(cache, OLD)
    assert methods(origin, repo_path(SHARD1))["GET"] == 1
    assert "kept cached copy" in first.line_with(f"Not publishing the new {SHARD1}")
    assert "kept cached copy" in first.line_with(f"Revalidation failed for {SHARD2}")
    assert downloaded(SHARD1) not in first.stderr and downloaded(SHARD2) not in first.stderr
    assert "unreachable" not in first.stderr.lower()
    assert first.stats == (4, 0, 2, 2)

    origin.set_fault(repo_path(SHARD2), None)
    origin.clear_log()
    second = pod.run(**ON_CHANGE).ok()

    assert_holds(cache, {**OLD, **NEW})
    assert downloaded(SHARD1) in second.stderr and downloaded(SHARD2) in second.stderr
    assert second.stats == (4, 2, 2, 0)
    # SHARD1's complete partial of the first run is published without its body again.
    assert second.term is not None and second.term["stats"]["bytes"] == len(NEW[SHARD2])
    assert debris(cache) == []


def test_s18_no_mixed_revisions_when_the_first_changed_file_fails(pod: Pod, origin, base) -> None:
    cache = warm_cache(pod, base)
    origin.put(repo_path(SHARD1), NEW[SHARD1])
    origin.put(repo_path(SHARD2), NEW[SHARD2])
    origin.set_fault(repo_path(SHARD1), Fault(truncate_after=100, methods=("GET",)))

    run = pod.stage(**ON_CHANGE).ok()

    assert_holds(cache, OLD)
    assert methods(origin, repo_path(SHARD2))["GET"] == 1
    assert "kept cached copy" in run.line_with(f"Not publishing the new {SHARD2}")
    assert run.stats == (4, 0, 2, 2)


def test_s18_if_not_present_never_refetches_a_shard_that_changed_upstream(
    pod: Pod, origin, base
) -> None:
    cache = warm_cache(pod, base)
    origin.put(repo_path(SHARD1), NEW[SHARD1])

    run = pod.run().ok()

    assert origin.requests() == []
    assert_holds(cache, OLD)
    assert run.stats == (4, 0, 4, 0)


def _servable(cache: Path, files: list[str]) -> list[str]:
    """Files that a server could not load: missing or not matching their record."""
    bad = []
    for rel in files:
        dest = cache / rel
        if not dest.is_file() or record_of(dest) != str(dest.stat().st_size):
            bad.append(rel)
    return bad


@pytest.mark.parametrize("broken", ["missing", "truncated"])
def test_onchange_failed_refresh_never_hides_a_missing_or_truncated_file(
    pod: Pod, origin, base, broken: str
) -> None:
    cache = warm_cache(pod, base)
    origin.put(repo_path(SHARD1), NEW[SHARD1])
    origin.set_fault(repo_path(SHARD1), Fault(status=500, methods=("GET",)))
    if broken == "missing":
        (cache / TOKENIZER).unlink()
    else:
        seed(cache / TOKENIZER, OLD[TOKENIZER][:10], record=len(OLD[TOKENIZER]))

    run = pod.stage(**ON_CHANGE)

    # Exit 0 promises a servable model (CONTRACT §2).
    assert run.returncode != 0 or _servable(cache, FILES) == [], str(run)


# --- origin unreachable (§8.4 item 4) ----------------------------------------------------------


def test_s28_onchange_offline_truncated_file_fails(pod: Pod) -> None:
    cache = pod.multi(closed_port_url() + "/org/repo/resolve/main/", [CONFIG, "model.safetensors"])
    seed(cache / CONFIG, OLD[CONFIG], record=len(OLD[CONFIG]))
    seed(cache / "model.safetensors", b"12345", record=23)

    run = pod.run(**ON_CHANGE, LLMKUBE_RETRIES="0").failed("ModelCacheTruncated")

    assert run.term is not None
    assert run.term["file"] == "model.safetensors"
    assert "kept cached copy" not in run.stderr
    assert (cache / "model.safetensors").read_bytes() == b"12345"
    assert record_of(cache / "model.safetensors") == "23"


def test_s16_onchange_offline_failure_names_the_truncated_shard(pod: Pod) -> None:
    # config.json is cached too, so the failure is the shard's, not a missing file's.
    cache = warm_cache(pod, closed_port_url() + "/org/repo/resolve/main/")
    seed(cache / SHARD2, OLD[SHARD2][:999], record=len(OLD[SHARD2]))

    run = pod.stage(**ON_CHANGE).failed("ModelCacheTruncated")

    assert run.term is not None and run.term["file"] == SHARD2
    assert "999" in run.term["message"] and str(len(OLD[SHARD2])) in run.term["message"]


def test_s20_s29_onchange_offline_complete_files_are_kept_without_warning(pod: Pod) -> None:
    cache = warm_cache(pod, closed_port_url() + "/org/repo/resolve/main/")
    before = snapshot(cache)

    run = pod.stage(**ON_CHANGE, LLMKUBE_RETRIES="0").ok()

    for rel in FILES:
        assert run.line_with(unreachable_kept(rel)).startswith(unreachable_kept(rel))
    assert run.warnings == []
    assert run.stats == (4, 0, 0, 4)
    assert snapshot(cache) == before


def test_s30_onchange_offline_file_without_record_is_kept_with_a_warning(pod: Pod) -> None:
    cache = warm_cache(pod, closed_port_url() + "/org/repo/resolve/main/", records=False)

    run = pod.stage(**ON_CHANGE, LLMKUBE_RETRIES="0").ok()

    assert all((cache / rel).read_bytes() == OLD[rel] for rel in FILES)
    for rel in FILES:
        assert unreachable_kept(rel) in run.stderr
        assert any(rel in w for w in run.warnings), f"no warning names {rel}\n{run}"


def test_s30_onchange_offline_file_without_record_is_kept_and_backfilled(pod: Pod) -> None:
    cache = warm_cache(pod, closed_port_url() + "/org/repo/resolve/main/", records=False)

    run = pod.stage(**ON_CHANGE, LLMKUBE_RETRIES="0").ok()

    assert run.stats == (4, 0, 0, 4)
    for rel in FILES:
        assert unreachable_kept(rel) in run.stderr
    assert_holds(cache, OLD)  # records backfilled from the local sizes


# --- UP-changed, the download fails: judge the copy against its own record ----------------------


@pytest.mark.parametrize("has_record", [True, False], ids=["record", "legacy"])
def test_s34_s45_onchange_changed_but_download_fails_keeps_the_copy(
    pod: Pod, origin, base, has_record: bool
) -> None:
    cache = warm_cache(pod, base, records=has_record)
    origin.put(repo_path(SHARD1), NEW[SHARD1])
    origin.set_fault(repo_path(SHARD1), Fault(status=500, methods=("GET",)))

    run = pod.stage(**ON_CHANGE).ok()

    assert (cache / SHARD1).read_bytes() == OLD[SHARD1]
    assert record_of(cache / SHARD1) == (str(len(OLD[SHARD1])) if has_record else None)
    kept = run.line_with(f"Revalidation failed for {SHARD1}")
    assert kept.startswith("WARNING: ") and "kept cached copy" in kept
    assert "unreachable" not in run.stderr.lower()
    assert run.stats == (4, 0, 3, 1)


@pytest.mark.parametrize("how", ["offline", "download-fails", "head-5xx"])
@pytest.mark.parametrize("wrong", ["shorter", "longer"])
def test_s46_onchange_file_not_matching_its_own_record_fails(
    pod: Pod, origin, base, how: str, wrong: str
) -> None:
    source = closed_port_url() + "/org/repo/resolve/main/" if how == "offline" else base
    cache = warm_cache(pod, source)
    bad = OLD[SHARD1][:100] if wrong == "shorter" else OLD[SHARD1] + b"trailing junk"
    seed(cache / SHARD1, bad, record=len(OLD[SHARD1]))
    origin.put(repo_path(SHARD1), NEW[SHARD1])
    if how == "download-fails":
        origin.set_fault(repo_path(SHARD1), Fault(status=500, methods=("GET",)))
    elif how == "head-5xx":
        origin.set_fault(repo_path(SHARD1), Fault(status=503))

    run = pod.stage(**ON_CHANGE)

    assert run.returncode == 1, str(run)
    assert run.term is not None and run.term["file"] == SHARD1
    assert "kept cached copy" not in run.line_with(SHARD1)
    assert (cache / SHARD1).read_bytes() == bad
    assert record_of(cache / SHARD1) == str(len(OLD[SHARD1]))


def test_s31_onchange_truncated_file_is_repaired_when_the_origin_is_up(
    pod: Pod, origin, base
) -> None:
    cache = warm_cache(pod, base)
    seed(cache / SHARD2, OLD[SHARD2][:100], record=len(OLD[SHARD2]))

    run = pod.stage(**ON_CHANGE).ok()

    assert_holds(cache, OLD)
    assert methods(origin)["GET"] == 1
    assert run.stats == (4, 1, 3, 0)


def test_onchange_stale_record_confirmed_by_the_origin_is_skipped_and_rewritten(
    pod: Pod, origin, base
) -> None:
    # §8.1 row 3, UP-same: "skip only if local size equals the origin's size".
    cache = warm_cache(pod, base)
    seed(cache / SHARD1, OLD[SHARD1], record=99999)

    run = pod.stage(**ON_CHANGE).ok()

    assert unchanged(SHARD1) in run.stderr
    assert methods(origin)["GET"] == 0
    assert_holds(cache, OLD)  # the record now says the size the origin confirmed
    assert run.stats == (4, 0, 4, 0)


@pytest.mark.parametrize(
    "fault",
    [
        Fault(no_content_length=True, methods=("HEAD",)),
        Fault(head_content_length_zero=True, methods=("HEAD",)),
    ],
    ids=["nocl", "cl0"],
)
def test_s37_onchange_multi_unknown_size_is_not_authoritative(
    pod: Pod, origin, base, fault: Fault
) -> None:
    cache = warm_cache(pod, base)
    origin.set_fault(repo_path(CONFIG), fault)

    run = pod.stage(**ON_CHANGE).ok()

    assert downloaded(CONFIG) in run.stderr and unchanged(CONFIG) not in run.stderr
    assert methods(origin, repo_path(CONFIG))["GET"] == 1
    assert methods(origin)["GET"] == 1
    assert_holds(cache, OLD)


def test_s37_onchange_empty_file_with_content_length_0_is_never_unchanged(
    pod: Pod, origin: Origin
) -> None:
    # CL 0 is "unavailable", never authoritative, even when it is the truth.
    files = {**OLD, "added_tokens.json": b""}
    cache = warm_cache(pod, serve_repo(origin, files), files)

    run = pod.stage(**ON_CHANGE).ok()

    assert unchanged("added_tokens.json") not in run.stderr
    assert downloaded("added_tokens.json") in run.stderr
    assert methods(origin, repo_path("added_tokens.json")) == {"HEAD": 1, "GET": 1}
    assert_holds(cache, files)


def test_onchange_missing_file_that_cannot_be_fetched_fails(pod: Pod, origin, base) -> None:
    cache = warm_cache(pod, base)
    (cache / CONFIG).unlink()
    origin.set_fault(repo_path(CONFIG), Fault(status=500, methods=("GET",)))

    run = pod.stage(**ON_CHANGE).failed("ModelSourceUnavailable")

    assert run.term is not None
    assert f"model artifact {CONFIG} missing and revalidation failed" in run.term["message"]
    # spec §6.3 step 5: the scripts' OnChange line, whole (#14 item 4).
    line = f"ERROR: model artifact {CONFIG} missing and revalidation failed"
    assert line in run.lines, run.stderr
    assert not (cache / CONFIG).exists()


# --- scenario 87: a failed loop keeps partials, both policies -------------------------------------


def shell_partial(dest: Path, data: bytes) -> Path:
    """The old scripts' resumable partial `<dest>.<key>.tmp` for the origin's
    current version of `data` (validator `CL<size>ET<etag>`, spec §4.2)."""
    etag = '"' + hashlib.sha256(data).hexdigest()[:16] + '"'
    key = hashlib.sha256(f"CL{len(data)}ET{etag}".encode()).hexdigest()[:12]
    return Path(f"{dest}.{key}.tmp")


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
def test_s87_failed_loop_keeps_partials_then_the_next_start_completes(
    pod: Pod, origin: Origin, policy: str
) -> None:
    files = {"a.bin": payload(20 * 1024, 31), "sub/b.bin": payload(30 * 1024, 32)}
    base = serve_repo(origin, files)
    cache = pod.multi(base, ["a.bin", "missing.gguf", "sub/b.bin"])
    partial = seed(
        shell_partial(cache / "sub/b.bin", files["sub/b.bin"]),
        files["sub/b.bin"][:10000],
        age_s=3600,
    )

    # One file at a time, as the scripts' loop (with files in flight, b.bin
    # would be fetched beside missing.gguf: tests/integration/test_many_files.py).
    failed = pod.stage(LLMKUBE_REFRESH_POLICY=policy, LLMKUBE_FILES_IN_FLIGHT="1").failed(
        "ModelSourceNotFound"
    )

    assert failed.term is not None and failed.term["file"] == "missing.gguf"
    expected = {
        "IfNotPresent": "ERROR: failed to download missing.gguf",  # spec §6.2
        "OnChange": "ERROR: model artifact missing.gguf missing and revalidation failed",  # §6.3
    }[policy]
    assert expected in failed.lines, failed.stderr
    assert not (cache / "missing.gguf").exists()
    assert not (cache / "sub/b.bin").exists()
    if policy == "IfNotPresent":
        # Published file by file; the loop stopped at missing.gguf: b's partial is untouched.
        assert (cache / "a.bin").read_bytes() == files["a.bin"]
        assert partial.read_bytes() == files["sub/b.bin"][:10000]
        assert debris(cache) == [str(partial.relative_to(cache))]
    else:
        # Nothing of a failed OnChange run is published; the complete partials stay.
        assert not (cache / "a.bin").exists()
        kept = debris(cache)
        assert len(kept) == 2 and {k.split(".")[0] for k in kept} == {"a", "sub/b"}
        sizes = sorted((cache / k).stat().st_size for k in kept)
        assert sizes == sorted(len(d) for d in files.values())

    orphan = seed(cache / "sub/b.bin.deadbeefcafe.tmp", b"old version", age_s=3600)
    origin.put(repo_path("missing.gguf"), payload(5000, 33))
    origin.clear_log()
    done = pod.stage(LLMKUBE_REFRESH_POLICY=policy).ok()

    assert_holds(cache, {**files, "missing.gguf": payload(5000, 33)})
    assert not orphan.exists()
    assert debris(cache) == []
    assert done.stats[0] == 3
    received = sum(r.body_bytes for r in origin.requests(method="GET"))
    if policy == "IfNotPresent":
        assert received == 5000 + len(files["sub/b.bin"]) - 10000  # b resumed
    else:
        assert received == 5000  # a and b published from their complete partials


# --- FUSE serving pod and read-only caches (§8.2; a real FUSE mount is tested elsewhere) ----------


@pytest.mark.parametrize(
    ("how", "line"),
    [
        (
            "changed",
            "Upstream changed for {rel}; a serving pod does not stage on a FUSE cache, "
            "so it kept the cached copy",
        ),
        ("offline", "Revalidation unreachable for {rel}; kept cached copy"),
    ],
)
def test_s35_s51_s59_fuse_serving_pod_keeps_its_copy_and_writes_nothing(
    pod: Pod, origin, base, how: str, line: str
) -> None:
    source = closed_port_url() + "/org/repo/resolve/main/" if how == "offline" else base
    warm_cache(pod, source)
    origin.put(repo_path(SHARD1), NEW[SHARD1])
    origin.put(repo_path(SHARD2), NEW[SHARD2])
    before = snapshot(pod.models)

    run = pod.stage(fs=fuse_fs, **ON_CHANGE, LLMKUBE_RETRIES="0").ok()

    assert snapshot(pod.models) == before  # no lock file, no record, no partial
    assert methods(origin)["GET"] == 0
    for rel in (SHARD1, SHARD2):
        assert run.line_with(line.format(rel=rel)).startswith(line.format(rel=rel))
    if how == "changed":
        assert "unreachable" not in run.stderr.lower()
        assert unchanged(CONFIG) in run.stderr
        assert run.stats == (4, 0, 2, 2)
    else:
        assert run.stats == (4, 0, 0, 4)
    assert "ERROR" not in run.stderr


@pytest.mark.parametrize(
    "fault",
    [Fault(status=503), Fault(head_content_length_zero=True), Fault(no_content_length=True)],
    ids=["503", "cl0", "nocl"],
)
def test_s37_s59_fuse_serving_pod_origin_answering_without_size_is_not_unreachable(
    pod: Pod, origin, base, fault: Fault
) -> None:
    warm_cache(pod, base)
    origin.set_fault(repo_path(SHARD1), fault)
    before = snapshot(pod.models)

    run = pod.stage(fs=fuse_fs, **ON_CHANGE, LLMKUBE_RETRIES="0").ok()

    assert snapshot(pod.models) == before
    assert methods(origin)["GET"] == 0
    assert "unreachable" not in run.stderr.lower()
    line = run.line_with(f"for {SHARD1};")
    assert "kept the cached copy" in line
    # The origin gave no usable size: it cannot be said to have changed.
    assert not line.startswith("Upstream changed"), line


@pytest.mark.parametrize("broken", ["missing", "truncated"])
def test_s26_fuse_serving_pod_refuses_to_stage_under_onchange(
    pod: Pod, origin, base, broken: str
) -> None:
    cache = warm_cache(pod, base)
    if broken == "missing":
        (cache / SHARD2).unlink()
    else:
        seed(cache / SHARD2, OLD[SHARD2][:10], record=len(OLD[SHARD2]))
    origin.put(repo_path(SHARD2), NEW[SHARD2])
    before = snapshot(pod.models)

    run = pod.stage(fs=fuse_fs, **ON_CHANGE).failed("ModelCacheLockUnsupported")

    assert run.term is not None
    assert run.term["message"] == (
        "ERROR: ModelCacheLockUnsupported: FUSE cache cannot guarantee cross-node file locking "
        f"for staging {SHARD2}; {REMEDY_LOCK_UNSUPPORTED_PREFETCH}"
    )
    assert run.term["remedy"] == REMEDY_LOCK_UNSUPPORTED_PREFETCH
    assert methods(origin)["GET"] == 0
    assert snapshot(pod.models) == before


def test_s26_fuse_stager_refreshes_without_a_lock_file(pod: Pod, origin, base) -> None:
    cache = warm_cache(pod, base)
    origin.put(repo_path(SHARD1), NEW[SHARD1])
    origin.put(repo_path(SHARD2), NEW[SHARD2])

    run = pod.stage(fs=fuse_fs, LLMKUBE_PREFETCH_STAGER="true", **ON_CHANGE).ok()

    assert_holds(cache, {**OLD, **NEW})
    assert run.stats == (4, 2, 2, 0)
    assert not (cache / ".llmkube.lock").exists()


def test_s5_read_only_cache_onchange_upstream_changed_keeps_and_writes_nothing(
    pod: Pod, origin, base
) -> None:
    warm_cache(pod, base)
    origin.put(repo_path(SHARD1), NEW[SHARD1])
    before = snapshot(pod.models)

    run = pod.stage(fs=read_only_fs, **ON_CHANGE).ok()

    assert snapshot(pod.models) == before
    assert methods(origin)["GET"] == 0
    assert (
        f"Upstream changed for {SHARD1}; the cache is read-only for this pod, so it kept the "
        "cached copy"
    ) in run.stderr
