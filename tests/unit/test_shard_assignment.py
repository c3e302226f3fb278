"""share.py (the pure assignment), the share records (cache/runrecord.py)
and the sharding configuration (#16 item 4)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from llmkube_stager.cache.runrecord import (
    RunRecord,
    read_run_record,
    write_shard_count,
)
from llmkube_stager.config import load_config
from llmkube_stager.errors import ConfigError
from llmkube_stager.share import assign, share_of, view_digest

MULTI = {
    "MODEL_SOURCE": "https://host.example/repo/",
    "CACHE_DIR": "/models/k",
    "MODEL_FILES": "a\nb",
    "LLMKUBE_PREFETCH_STAGER": "true",
}


def diffusers_like(seed: int = 1) -> dict[str, int | None]:
    rng = random.Random(seed)
    sizes: dict[str, int | None] = {
        f"tok/part-{i:04d}.json": rng.randint(4096, 256 * 1024) for i in range(2000)
    }
    sizes.update({f"unet/shard-{k}.safetensors": 5 << 30 for k in range(3)})
    sizes["vae/model.safetensors"] = 300 << 20
    return sizes


def test_every_file_has_exactly_one_share_whatever_the_listing_order() -> None:
    sizes = diffusers_like()
    owner = assign(sizes, 4)
    assert set(owner) == set(sizes)
    shuffled = list(sizes.items())
    random.Random(7).shuffle(shuffled)
    assert assign(dict(shuffled), 4) == owner
    shares = [share_of(sizes, 4, i) for i in range(4)]
    assert set().union(*shares) == set(sizes)
    assert sum(len(s) for s in shares) == len(sizes)  # disjoint


def test_shares_are_balanced_within_the_largest_file() -> None:
    sizes = diffusers_like()
    for shards in (2, 3, 4, 7):
        loads = [0] * shards
        for rel, index in assign(sizes, shards).items():
            loads[index] += sizes[rel] or 0
        # Greedy LPT: no share exceeds another by more than its largest file.
        assert max(loads) - min(loads) <= max(s or 0 for s in sizes.values())
        assert max(loads) <= sum(loads) / shards * 4 / 3 + max(s or 0 for s in sizes.values())


def test_the_largest_files_go_to_different_shares() -> None:
    sizes = diffusers_like()
    owner = assign(sizes, 4)
    assert len({owner[f"unet/shard-{k}.safetensors"] for k in range(3)}) == 3


def test_unknown_sizes_and_more_shares_than_files() -> None:
    sizes: dict[str, int | None] = {"a": None, "b": None, "c": 10}
    owner = assign(sizes, 5)
    assert sorted(owner.values()) == [0, 1, 2]
    assert share_of(sizes, 5, 4) == frozenset()


def test_the_listing_digest_names_what_the_assignment_depends_on() -> None:
    sizes = diffusers_like()
    digest = view_digest(sizes, 4, "c0ffee")
    assert view_digest(dict(reversed(list(sizes.items()))), 4, "c0ffee") == digest
    assert view_digest({**sizes, "tok/part-0001.json": 1}, 4, "c0ffee") != digest
    assert view_digest(sizes, 4, "beef") != digest
    assert view_digest(sizes, 2, "c0ffee") != digest


def _write_record(root: Path, writer: str, doc: dict[str, str]) -> None:
    """A writer's record as it is on disk (the format the scripts' readers share)."""
    name = f".llmkube-validators.{writer}" if writer else ".llmkube-validators"
    (root / name).write_text(json.dumps(doc))


def test_readers_merge_every_share_and_keep_their_run_keys_apart(tmp_path: Path) -> None:
    _write_record(tmp_path, "", {"config.json": '"v0"', "/commit": "aaa"})
    write_shard_count(str(tmp_path), 2)
    intent = json.dumps([{"rel": "b.bin", "partial": "b.bin.x.part", "size": 3}])
    _write_record(tmp_path, "0-of-2", {"a.bin": '"va"', "/commit": "bbb"})
    _write_record(tmp_path, "1-of-2", {"b.bin": '"vb"', "/publishing": intent})

    record = read_run_record(str(tmp_path))

    assert record.validators["config.json"] == '"v0"' and record.validators["a.bin"] == '"va"'
    assert record.validators["b.bin"] == '"vb"'
    assert record.run().commit == "aaa" and record.run("0-of-2").commit == "bbb"
    assert [e.rel for run in record.publishing() for e in run.intent] == ["b.bin"]
    assert record.run().intent == ()  # the unsharded writer's own
    assert [e.rel for e in record.run("1-of-2").intent] == ["b.bin"]


def test_without_shards_the_reader_opens_one_more_name_only(tmp_path: Path) -> None:
    _write_record(tmp_path, "", {"a": '"x"'})
    _write_record(tmp_path, "0-of-2", {"b": '"y"'})  # no count: ignored
    assert read_run_record(str(tmp_path)) == RunRecord({"a": '"x"'})


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"LLMKUBE_SHARDS": "4"}, "JOB_COMPLETION_INDEX"),
        ({"LLMKUBE_SHARDS": "4", "JOB_COMPLETION_INDEX": "4"}, "not a share"),
        ({"LLMKUBE_SHARDS": "4", "JOB_COMPLETION_INDEX": "-1"}, "JOB_COMPLETION_INDEX"),
        ({"LLMKUBE_SHARDS": "0", "JOB_COMPLETION_INDEX": "0"}, "LLMKUBE_SHARDS"),
        ({"LLMKUBE_SHARDS": "x"}, "LLMKUBE_SHARDS"),
        (
            {"LLMKUBE_SHARDS": "2", "JOB_COMPLETION_INDEX": "0", "LLMKUBE_PREFETCH_STAGER": ""},
            "prefetch",
        ),
        ({"LLMKUBE_FILES_IN_FLIGHT": "0"}, "LLMKUBE_FILES_IN_FLIGHT"),
        ({"LLMKUBE_FILES_IN_FLIGHT": "65"}, "LLMKUBE_FILES_IN_FLIGHT"),
    ],
)
def test_bad_sharding_settings_are_configuration_errors(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_config({**MULTI, **env}, {})


def test_an_indexed_job_that_does_not_shard_ignores_its_index() -> None:
    config = load_config({**MULTI, "JOB_COMPLETION_INDEX": "3"}, {})
    assert (config.shards, config.shard_index) == (1, 0)
