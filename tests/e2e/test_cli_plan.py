"""`llmkube-stager plan` end to end: the same decisions as `stage`, printed per
file, with no writes at all and no network unless `--probe` (CONTRACT §2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.harness.disk import record_of, snapshot
from tests.harness.origin import Origin
from tests.harness.pod import Pod, Run
from tests.harness.sample import gguf_like

pytestmark = pytest.mark.e2e

BASE = "/org/repo/resolve/main/"
FILES = {
    "cold.safetensors": gguf_like(40_000, seed=1),
    "warm.safetensors": gguf_like(30_000, seed=2),
    "legacy.safetensors": gguf_like(20_000, seed=3),
    "sub/mismatch.json": b'{"complete": false}\n' * 50,
}
EXPECTED = {
    "cold.safetensors": "fetch",
    "warm.safetensors": "reuse",
    "legacy.safetensors": "keep",
    "sub/mismatch.json": "repair",
}
TABLE_DECISION = {**EXPECTED, "legacy.safetensors": "keep+backfill"}


@pytest.fixture
def mixed_cache(pod: Pod, origin: Origin) -> Path:
    """A multi-file cache with one file in each state: missing, complete
    (size == record), legacy (no record) and mismatch (record != size)."""
    for rel, data in FILES.items():
        origin.put(BASE + rel, data)
    cache_dir = pod.multi(origin.url + BASE, FILES)
    (cache_dir / "sub").mkdir(parents=True)
    warm = cache_dir / "warm.safetensors"
    warm.write_bytes(FILES["warm.safetensors"])
    (cache_dir / "warm.safetensors.llmkube-size").write_text(str(len(FILES["warm.safetensors"])))
    (cache_dir / "legacy.safetensors").write_bytes(FILES["legacy.safetensors"])
    short = FILES["sub/mismatch.json"][:100]
    (cache_dir / "sub" / "mismatch.json").write_bytes(short)
    (cache_dir / "sub" / "mismatch.json.llmkube-size").write_text(
        str(len(FILES["sub/mismatch.json"]))
    )
    return cache_dir


def _table_rows(stdout: str) -> dict[str, list[str]]:
    """FILE -> the other cells of the human table (after the FILE header)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["FILE", "DECISION"])
    rows = {}
    for line in lines[start + 1 :]:
        cells = line.split()
        if not cells or line.startswith("warning:"):
            continue
        rows[cells[0]] = cells[1:]
    return rows


def _plan_json(run: Run) -> dict[str, Any]:
    assert run.returncode == 0, str(run)
    doc = json.loads(run.stdout)  # exactly one document: trailing data would raise
    assert isinstance(doc, dict)
    return doc


def _decisions(doc: dict[str, Any]) -> dict[str, str]:
    return {row["file"]: row["decision"] for row in doc["files"]}


def test_plan_table_shows_each_decision_and_writes_nothing(
    pod: Pod, origin: Origin, mixed_cache: Path
) -> None:
    before = snapshot(pod.tmp)
    run = pod.run("plan")
    assert run.returncode == 0, str(run)
    rows = _table_rows(run.stdout)
    assert {rel: cells[0] for rel, cells in rows.items()} == TABLE_DECISION
    assert snapshot(pod.tmp) == before, "plan changed the disk"
    assert not (mixed_cache / "legacy.safetensors.llmkube-size").exists()
    assert origin.requests() == [], "plan without --probe must not touch the network"
    assert run.term_raw is None, "plan wrote a termination message"


def test_plan_json_is_one_document_and_writes_nothing(
    pod: Pod, origin: Origin, mixed_cache: Path
) -> None:
    before = snapshot(pod.tmp)
    run = pod.run("plan", "--json")
    doc = _plan_json(run)
    assert _decisions(doc) == EXPECTED
    legacy = next(r for r in doc["files"] if r["file"] == "legacy.safetensors")
    assert legacy["backfill_record"] is True
    mismatch = next(r for r in doc["files"] if r["file"] == "sub/mismatch.json")
    assert mismatch["size_bytes"] == 100
    assert mismatch["record_bytes"] == len(FILES["sub/mismatch.json"])
    assert [r["file"] for r in doc["files"]] == list(FILES), "manifest order is kept"
    assert snapshot(pod.tmp) == before
    assert origin.requests() == []


def test_plan_agrees_with_stage(pod: Pod, origin: Origin, mixed_cache: Path) -> None:
    """What plan predicts is what stage then does (fetched/reused/kept counts)."""
    predicted = _decisions(_plan_json(pod.run("plan", "--json")))
    run = pod.run("stage")
    assert run.returncode == 0, str(run)
    stats = run.term["stats"]
    values = list(predicted.values())
    assert stats["fetched"] == values.count("fetch") + values.count("repair")
    assert stats["reused"] == values.count("reuse")
    assert stats["kept"] == values.count("keep")
    assert record_of(mixed_cache / "legacy.safetensors") == str(len(FILES["legacy.safetensors"]))
    assert (mixed_cache / "sub" / "mismatch.json").read_bytes() == FILES["sub/mismatch.json"]
    after = _decisions(_plan_json(pod.run("plan", "--json")))
    assert set(after.values()) == {"reuse"}


def test_plan_single_file_cold_then_warm(pod: Pod, origin: Origin) -> None:
    data = gguf_like(50_000, seed=9)
    origin.put("/m/model.gguf", data)
    dest = pod.single(origin.url + "/m/model.gguf")

    before = snapshot(pod.tmp)
    cold = pod.run("plan")
    assert cold.returncode == 0, str(cold)
    assert _table_rows(cold.stdout)["model.gguf"][0] == "fetch"
    assert snapshot(pod.tmp) == before
    assert not pod.models.exists(), "plan created the cache directory"

    assert pod.run("stage").returncode == 0
    origin.clear_log()
    warm = _plan_json(pod.run("plan", "--json"))
    assert _decisions(warm) == {"model.gguf": "reuse"}
    assert warm["files"][0]["size_bytes"] == len(data) == dest.stat().st_size
    assert origin.requests() == []


def test_plan_probe_sends_only_head(pod: Pod, origin: Origin, mixed_cache: Path) -> None:
    before = snapshot(pod.tmp)
    run = pod.run("plan", "--json", "--probe")
    doc = _plan_json(run)
    assert _decisions(doc) == EXPECTED
    for row in doc["files"]:
        assert row["remote"]["size_bytes"] == len(FILES[row["file"]]), row
    requests = origin.requests()
    assert requests, "--probe asked nothing"
    assert {r.method for r in requests} == {"HEAD"}
    assert sorted(r.path for r in requests) == sorted(BASE + rel for rel in FILES)
    assert snapshot(pod.tmp) == before

    origin.clear_log()
    table = pod.run("plan", "--probe")
    assert table.returncode == 0, str(table)
    rows = _table_rows(table.stdout)
    for rel, data in FILES.items():
        assert str(len(data)) in rows[rel], (rel, rows[rel])
    assert {r.method for r in origin.requests()} == {"HEAD"}
    assert snapshot(pod.tmp) == before


def test_plan_probe_of_a_missing_file_prints_the_plan_and_exits_4(pod: Pod, origin: Origin) -> None:
    # A probe that fails fails the plan (#46 item 6), after the whole plan.
    origin.put(BASE + "config.json", b"{}")
    pod.multi(origin.url + BASE, ["config.json", "gone.safetensors"])
    run = pod.run("plan", "--json", "--probe")
    assert run.returncode == 4, str(run)
    doc = json.loads(run.stdout)
    rows = {row["file"]: row for row in doc["files"]}
    assert rows["config.json"]["remote"]["size_bytes"] == 2
    assert rows["gone.safetensors"]["remote"]["error"] == "ModelSourceNotFound"
    assert not pod.models.exists()


@pytest.mark.parametrize(
    ("overrides", "reason", "var"),
    [
        ({"LLMKUBE_CONNECT_TIMEOUT": "abc"}, "InvalidConfiguration", "LLMKUBE_CONNECT_TIMEOUT"),
        ({"MODEL_SOURCE": None}, "InvalidConfiguration", "MODEL_SOURCE"),
        ({"MODEL_FILES": "config.json\n../escape"}, "InvalidFileSet", "MODEL_FILES"),
    ],
)
def test_plan_config_error_exits_2(
    pod: Pod, origin: Origin, overrides: dict[str, str | None], reason: str, var: str
) -> None:
    origin.put(BASE + "config.json", b"{}")
    pod.multi(origin.url + BASE, ["config.json"])
    before = snapshot(pod.tmp)
    for args in (("plan",), ("plan", "--json", "--probe")):
        run = pod.run(*args, env=overrides)
        assert run.returncode == 2, str(run)
        assert f"ERROR: {reason}:" in run.stderr
        assert var in run.stderr
        assert run.stdout == "", "no plan may be printed for an invalid configuration"
        assert "Traceback" not in run.stderr
    assert snapshot(pod.tmp) == before
    assert origin.requests() == []


def test_plan_usage_error_writes_nothing(pod: Pod, origin: Origin) -> None:
    origin.put(BASE + "config.json", b"{}")
    pod.multi(origin.url + BASE, ["config.json"])
    before = snapshot(pod.tmp)
    run = pod.run("plan", "--no-such-flag")
    assert run.returncode == 2, str(run)
    assert "--no-such-flag" in run.stderr
    assert run.stdout == ""
    assert snapshot(pod.tmp) == before, "plan wrote something (the termination message?)"
