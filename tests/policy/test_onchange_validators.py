"""#46 item 1: OnChange over http(s) compares the origin's validators, not
the size alone. `python -m llmkube_stager stage` against the loopback
origin; evidence: the bytes on disk, the requests the origin received, the
log lines, the termination message.

The rule (docs/reliability.md "What OnChange compares"): a staging run
records the validator the bytes came with, a strong ETag, else
Last-Modified (a weak ETag never: RFC 9110 §8.8.1, it does not name the
bytes), beside the size record; OnChange re-stages a copy whose recorded
validator differs from the origin's. Where there is nothing to compare (the
origin sends neither, or the copy was staged by the scripts, which record
none) the size decides, as in the scripts, and the log says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.disk import record_of, seed
from tests.harness.origin import Origin, methods
from tests.harness.pod import ON_CHANGE, Pod
from tests.harness.sample import payload

pytestmark = pytest.mark.e2e

PATH = "/files/model.gguf"
BASE = payload(48 * 1024, seed=1)
# A fine-tune of the same shape: the base model's size exactly.
TUNED = payload(48 * 1024, seed=2)
T1 = 1_700_000_000.0
T2 = T1 + 3600

UNCHANGED = "Model revalidated (unchanged, skipped download)"
DOWNLOADED = "Model revalidated (downloaded)"
SIZE_ONLY = "by its size only"


def _staged(pod: Pod, origin: Origin, **put: object) -> Path:
    """BASE staged by this agent from the origin (IfNotPresent), the log cleared."""
    origin.put(PATH, BASE, **put)  # type: ignore[arg-type]
    dest = pod.single(origin.url + PATH)
    pod.run().ok()
    assert dest.read_bytes() == BASE
    origin.clear_log()
    return dest


def test_same_size_replacement_with_new_etag_is_staged(pod: Pod, origin: Origin) -> None:
    dest = _staged(pod, origin, last_modified=T1)
    origin.put(PATH, TUNED, last_modified=T1)  # a new ETag; Last-Modified alike

    run = pod.run(**ON_CHANGE).ok()

    assert dest.read_bytes() == TUNED
    assert record_of(dest) == str(len(TUNED))
    assert methods(origin) == {"HEAD": 1, "GET": 1}
    assert run.line_with(DOWNLOADED).startswith(DOWNLOADED)
    assert UNCHANGED not in run.stderr
    assert run.stats == (1, 1, 0, 0)


def test_unchanged_validator_makes_no_get_and_claims_no_size_only(pod: Pod, origin: Origin) -> None:
    dest = _staged(pod, origin)

    run = pod.run(**ON_CHANGE).ok()

    assert methods(origin) == {"HEAD": 1}
    assert run.line_with(UNCHANGED).startswith(UNCHANGED)
    assert SIZE_ONLY not in run.stderr
    assert dest.read_bytes() == BASE


def test_weak_etag_is_not_compared_last_modified_is(pod: Pod, origin: Origin) -> None:
    # The same weak ETag for other bytes (RFC 9110: "semantically
    # equivalent"): Last-Modified says the file was replaced.
    dest = _staged(pod, origin, etag='W/"model"', last_modified=T1)
    origin.put(PATH, TUNED, etag='W/"model"', last_modified=T2)

    run = pod.run(**ON_CHANGE).ok()

    assert dest.read_bytes() == TUNED
    assert methods(origin) == {"HEAD": 1, "GET": 1}
    assert DOWNLOADED in run.stderr


def test_weak_etag_change_alone_downloads_nothing(pod: Pod, origin: Origin) -> None:
    # A replica (or a compressing front) that names the same bytes with
    # another weak ETag is not a change: a model is not downloaded again.
    dest = _staged(pod, origin, etag='W/"replica-a"', last_modified=T1)
    origin.put(PATH, BASE, etag='W/"replica-b"', last_modified=T1)

    run = pod.run(**ON_CHANGE).ok()

    assert methods(origin) == {"HEAD": 1}
    assert UNCHANGED in run.stderr
    assert dest.read_bytes() == BASE


def test_last_modified_alone_shows_a_replacement(pod: Pod, origin: Origin) -> None:
    dest = _staged(pod, origin, etag=None, last_modified=T1)
    origin.put(PATH, TUNED, etag=None, last_modified=T2)

    pod.run(**ON_CHANGE).ok()

    assert dest.read_bytes() == TUNED
    assert methods(origin) == {"HEAD": 1, "GET": 1}


def test_origin_without_validators_is_judged_by_size_and_says_so(pod: Pod, origin: Origin) -> None:
    dest = _staged(pod, origin, etag=None, last_modified=None)
    origin.put(PATH, TUNED, etag=None, last_modified=None)

    run = pod.run(**ON_CHANGE).ok()

    assert methods(origin) == {"HEAD": 1}
    assert run.line_with(UNCHANGED).startswith(UNCHANGED)
    line = run.line_with(SIZE_ONLY)
    assert "model.gguf" in line and "no strong ETag or Last-Modified" in line
    assert dest.read_bytes() == BASE  # nothing else can tell


def test_a_scripts_cache_keeps_the_size_only_rule(pod: Pod, origin: Origin) -> None:
    # Staged by the shell scripts: the file and its size record, no
    # validator. Judged as the scripts judged it (spec §5.3 item 4).
    origin.put(PATH, TUNED)
    dest = pod.single(origin.url + PATH)
    seed(dest, BASE, record=len(BASE))

    run = pod.run(**ON_CHANGE).ok()

    assert methods(origin) == {"HEAD": 1}
    assert run.line_with(UNCHANGED).startswith(UNCHANGED)
    assert "no validator was recorded" in run.line_with(SIZE_ONLY)
    assert dest.read_bytes() == BASE


def test_multi_file_same_size_change_restages_that_file(pod: Pod, origin: Origin) -> None:
    origin.put("/repo/a.bin", BASE)
    origin.put("/repo/b.bin", BASE)
    root = pod.multi(origin.url + "/repo/", ["a.bin", "b.bin"])
    pod.run().ok()
    origin.clear_log()
    origin.put("/repo/b.bin", TUNED)

    run = pod.run(**ON_CHANGE).ok()

    assert (root / "a.bin").read_bytes() == BASE
    assert (root / "b.bin").read_bytes() == TUNED
    assert methods(origin, "/repo/b.bin")["GET"] == 1
    assert methods(origin, "/repo/a.bin").get("GET", 0) == 0
    assert "Model artifact b.bin revalidated (downloaded)" in run.stderr
