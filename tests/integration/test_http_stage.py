"""HTTP staging end to end, in-process: cold fetch, warm starts, multi-file
layout, size records (spec §5.2, §8.1, §8.3, §8.4) and progress (§5.4).

Real sockets to the loopback origin, real files under tmp_path; the origin's
request log is the evidence of what went over the wire.
"""

from __future__ import annotations

import hashlib
import re

import pytest

from llmkube_stager.model import Decision
from tests.harness.disk import cached_files, partials, record_of, seed, shell_partial, write_record
from tests.harness.origin import Fault, closed_port_url
from tests.harness.plan_inputs import unknown_fs
from tests.harness.relay import CountingRelay
from tests.harness.sample import payload

PATH = "/files/model.gguf"
REPO = "/org/repo/resolve/main"
KIB = 1024
MIB = 1024 * KIB


def test_s83_single_file_cold_fetch(origin, pod) -> None:
    data = payload(256 * KIB)
    origin.put(PATH, data, etag='"vA"')

    run = pod.stage(pod.single_env(origin.url + PATH)).ok()

    dest = pod.dest()
    assert dest.read_bytes() == data
    assert record_of(dest) == str(len(data))  # decimal, no newline
    head, get = origin.requests(PATH)
    assert (head.method, head.status) == ("HEAD", 200)
    assert (get.method, get.status, get.body_bytes) == ("GET", 200, len(data))
    assert "range" not in get.headers and "if-range" not in get.headers
    assert len(origin.requests()) == 2
    lines = run.lines
    start = next(i for i, line in enumerate(lines) if "Downloading model..." in line)
    done = next(i for i, line in enumerate(lines) if "Model downloaded successfully" in line)
    assert start < done
    assert partials(dest) == {}
    assert run.outcome is not None and run.outcome.count(Decision.FETCH) == 1


def test_s24_restart_after_fresh_download_makes_zero_requests(origin, pod) -> None:
    data = payload(64 * KIB)
    origin.put(PATH, data)
    env = pod.single_env(origin.url + PATH)
    pod.stage(env).ok()
    origin.clear_log()

    run = pod.stage(env).ok()

    assert origin.requests() == []
    assert run.has_line("Model already cached, skipping download")
    assert not run.has_line("Downloading model")
    assert pod.dest().read_bytes() == data


@pytest.mark.parametrize(
    "upstream",
    ["removed", "503", "429", "no-content-length", "content-length-0", "closed-port"],
)
def test_warm_start_single_file_makes_zero_requests(origin, pod, upstream: str) -> None:
    """§8.4.1: IfNotPresent + present file: exit 0, zero requests, whatever the origin does."""
    data = payload(64 * KIB)
    dest = seed(pod.dest(), data, age_s=3600)
    write_record(dest, len(data))
    origin.put(PATH, payload(80 * KIB, seed=9))  # upstream moved on: irrelevant
    source = origin.url + PATH
    if upstream == "removed":
        origin.remove(PATH)
    elif upstream == "503":
        origin.set_fault(PATH, Fault(status=503))
    elif upstream == "429":
        origin.set_fault(PATH, Fault(status=429, retry_after="3600"))
    elif upstream == "no-content-length":
        origin.set_fault(PATH, Fault(no_content_length=True))
    elif upstream == "content-length-0":
        origin.set_fault(PATH, Fault(head_content_length_zero=True))
    else:
        source = closed_port_url() + PATH

    run = pod.stage(pod.single_env(source)).ok()

    assert origin.requests() == []
    assert run.sleeps == []
    assert run.has_line("Model already cached, skipping download")
    assert dest.read_bytes() == data
    assert record_of(dest) == str(len(data))
    assert run.outcome is not None and run.outcome.count(Decision.REUSE) == 1


def test_warm_start_multi_file_makes_zero_requests(origin, pod) -> None:
    files = ["model.safetensors", "tokenizer/tokenizer.json"]
    for i, rel in enumerate(files):
        data = payload(32 * KIB, seed=i)
        seed(pod.dest(rel), data, age_s=3600)
        write_record(pod.dest(rel), len(data))
        origin.put(f"{REPO}/{rel}", data)
        origin.set_fault(f"{REPO}/{rel}", Fault(status=503))

    run = pod.stage(pod.multi_env(origin.url + REPO + "/", files)).ok()

    assert origin.requests() == []
    for rel in files:
        assert run.has_line(f"Model artifact {rel} already cached, skipping download")
    assert not run.has_line("no valid size record")


def test_multi_file_subdirectories_and_percent_encoded_names(origin, pod) -> None:
    files = ["model.safetensors", "tokenizer/tokenizer.json", "my model/part 1.bin", "a%20b.bin"]
    blobs = {rel: payload((64 + 16 * i) * KIB, seed=i) for i, rel in enumerate(files)}
    for rel, data in blobs.items():
        origin.put(f"{REPO}/{rel}", data)  # the origin routes on the decoded path

    run = pod.stage(pod.multi_env(origin.url + REPO + "/", files)).ok()

    for rel, data in blobs.items():
        dest = pod.dest(rel)
        assert dest.read_bytes() == data, rel
        assert record_of(dest) == str(len(data)), rel
        assert [r.method for r in origin.requests(f"{REPO}/{rel}")] == ["HEAD", "GET"], rel
        assert run.has_line(f"Downloading model artifact {rel}...")
        assert run.has_line(f"Model artifact {rel} downloaded")
    raw = {r.path for r in origin.requests()}
    # Spaces and '%' are percent-encoded on the request line, each exactly once.
    assert f"{REPO}/my%20model/part%201.bin" in raw
    assert f"{REPO}/a%2520b.bin" in raw
    assert not any(" " in p for p in raw)
    records = {f + ".llmkube-size" for f in files} | {".llmkube-validators"}  # #46
    assert cached_files(pod.cache_dir) == set(files) | records
    assert run.outcome is not None and run.outcome.count(Decision.FETCH) == len(files)


def test_s47_record_mismatch_is_repaired_when_origin_is_up(origin, pod) -> None:
    files = ["model.safetensors", "config.json"]
    model, config = payload(256 * KIB, seed=1), payload(4 * KIB, seed=2)
    origin.put(f"{REPO}/model.safetensors", model)
    origin.put(f"{REPO}/config.json", config)
    # Truncated by LLMKube #2158: shorter than its own record.
    seed(pod.dest("model.safetensors"), model[: 100 * KIB], age_s=3600)
    write_record(pod.dest("model.safetensors"), len(model))
    seed(pod.dest("config.json"), config, age_s=3600)
    write_record(pod.dest("config.json"), len(config))

    run = pod.stage(pod.multi_env(origin.url + REPO + "/", files)).ok()

    assert pod.dest("model.safetensors").read_bytes() == model
    assert record_of(pod.dest("model.safetensors")) == str(len(model))
    assert origin.requests(f"{REPO}/config.json") == []  # the healthy file is not touched
    gets = origin.requests(f"{REPO}/model.safetensors", "GET")
    assert len(gets) == 1 and gets[0].body_bytes == len(model)
    assert run.outcome is not None and run.outcome.count(Decision.REPAIR) == 1


def test_s47_record_mismatch_with_origin_down_fails_and_keeps_the_file(pod) -> None:
    model = payload(256 * KIB)
    short = model[: 100 * KIB]
    dest = seed(pod.dest("model.safetensors"), short, age_s=3600)
    write_record(dest, len(model))

    run = pod.stage(pod.multi_env(closed_port_url() + REPO + "/", ["model.safetensors"])).failed()

    # CONTRACT §5: "shorter/longer than its own size record and cannot be
    # repaired now", the same reason the OnChange planner gives this state.
    assert run.reason == "ModelCacheTruncated"
    assert dest.read_bytes() == short  # not deleted: it is all the cache has
    assert record_of(dest) == str(len(model))


@pytest.mark.parametrize("mode", ["single", "multi"])
def test_s44_legacy_file_kept_offline_and_record_backfilled(origin, pod, mode: str) -> None:
    local = payload(48 * KIB, seed=1)
    origin.put(f"{REPO}/model.safetensors", payload(96 * KIB, seed=2))  # upstream grew
    if mode == "single":
        dest = seed(pod.dest("model.safetensors"), local, age_s=3600)
        env = pod.single_env(origin.url + f"{REPO}/model.safetensors", "model.safetensors")
        hit = "Model already cached, skipping download"
    else:
        dest = seed(pod.dest("model.safetensors"), local, age_s=3600)
        env = pod.multi_env(origin.url + REPO + "/", ["model.safetensors"])
        hit = "Model artifact model.safetensors already cached, skipping download"

    first = pod.stage(env).ok()

    assert origin.requests() == []
    assert dest.read_bytes() == local
    assert record_of(dest) == str(len(local))  # the local size, as-is (scenario 53)
    assert first.has_line(hit)

    second = pod.stage(env).ok()

    assert origin.requests() == []
    assert second.has_line(hit)
    assert not second.has_line("no valid size record")
    assert not any(line.startswith("WARNING") for line in second.lines)


def test_s89_progress_lines_during_a_slow_transfer(origin, pod) -> None:
    data = payload(2 * MIB)
    origin.put(PATH, data)
    origin.set_fault(PATH, Fault(rate_bytes_per_s=2 * MIB, methods=("GET",)))

    run = pod.stage(pod.single_env(origin.url + PATH, PROGRESS_INTERVAL="0.2")).ok()

    assert pod.dest().read_bytes() == data
    pattern = re.compile(r"Downloaded (\d+) MiB of (\d+) MiB \((\d+)%\)")
    progress = [m for line in run.lines if (m := pattern.search(line))]
    assert len(progress) >= 2, run.stderr
    assert all(m.group(2) == "2" for m in progress)
    percents = [int(m.group(3)) for m in progress]
    assert percents == sorted(percents) and all(0 <= p <= 100 for p in percents)
    assert "\r" not in run.stderr


def test_s89_progress_without_a_known_total(origin, pod) -> None:
    data = payload(MIB)
    origin.put(PATH, data)
    origin.set_fault(PATH, Fault(rate_bytes_per_s=MIB, no_content_length=True))
    # Pinned: a close-delimited body of unknown length is complete only by
    # its digest (#10 defect 8).
    pin = hashlib.sha256(data).hexdigest()

    run = pod.stage(
        pod.single_env(origin.url + PATH, PROGRESS_INTERVAL="0.2", MODEL_SHA256=pin)
    ).ok()

    assert pod.dest().read_bytes() == data
    progress = [line for line in run.lines if "Downloaded " in line and " MiB" in line]
    assert len(progress) >= 2, run.stderr
    assert all(re.search(r"Downloaded \d+ MiB(?! of)", line) for line in progress)
    assert not any("%" in line for line in progress)
    assert "\r" not in run.stderr


def test_multi_file_stage_reuses_keep_alive_connections(origin, pod) -> None:
    files = [f"model-0000{i}-of-00005.safetensors" for i in range(1, 6)]
    blobs = {rel: payload(64 * KIB, seed=i) for i, rel in enumerate(files)}
    for rel, data in blobs.items():
        origin.put(f"{REPO}/{rel}", data)
    relay = CountingRelay(origin.url)
    try:
        # One file at a time; with files in flight, tests/integration/test_many_files.py.
        env = pod.multi_env(relay.url + REPO + "/", files, LLMKUBE_FILES_IN_FLIGHT="1")
        pod.stage(env).ok()
    finally:
        relay.close()

    for rel, data in blobs.items():
        assert pod.dest(rel).read_bytes() == data, rel
    assert len(origin.requests()) == 2 * len(files)  # a HEAD and a GET each
    # One connection for the probes and one for the bodies would do; a new
    # connection per request would be 10.
    assert relay.connections <= 3, relay.connections


def test_content_length_zero_on_the_probe_means_unknown(origin, pod) -> None:
    """CL 0 is "unavailable", never authoritative (spec §8.1): the file is still
    fetched whole, a seeded partial is not resumed blindly, the record holds
    the real size."""
    data = payload(128 * KIB)
    origin.put(PATH, data, etag='"vA"')
    origin.set_fault(PATH, Fault(head_content_length_zero=True, methods=("HEAD",)))
    seed(shell_partial(pod.dest(), None, '"vA"'), b"\0" * 1000, age_s=3600)

    pod.stage(pod.single_env(origin.url + PATH)).ok()

    (get,) = origin.requests(PATH, "GET")
    assert "range" not in get.headers
    assert pod.dest().read_bytes() == data
    assert record_of(pod.dest()) == str(len(data))
    assert partials(pod.dest()) == {}


def test_empty_repository_file_is_staged_and_then_reused(origin, pod) -> None:
    files = ["model.safetensors", "empty.txt"]
    model = payload(64 * KIB)
    origin.put(f"{REPO}/model.safetensors", model)
    origin.put(f"{REPO}/empty.txt", b"")
    env = pod.multi_env(origin.url + REPO + "/", files)

    pod.stage(env).ok()

    assert pod.dest("model.safetensors").read_bytes() == model
    assert pod.dest("empty.txt").read_bytes() == b""
    assert record_of(pod.dest("empty.txt")) == "0"
    origin.clear_log()

    run = pod.stage(env).ok()

    assert origin.requests() == []
    assert run.has_line("Model artifact empty.txt already cached, skipping download")


def test_unknown_filesystem_type_warns_distinctly_and_takes_the_lock(tmp_path, origin) -> None:
    """statfs and the mount table both failed (e.g. a custom image): not the
    lock-unsupported refusal of the old scripts (seed-001 r3) but a distinct
    warning and the previous behavior, the flock."""
    import io

    from llmkube_stager.config import load_config
    from llmkube_stager.logs import Log
    from llmkube_stager.staging import Effects, run_stage

    data = payload(64 * KIB)
    origin.put("/m.gguf", data)
    cache = tmp_path / "cache"
    config = load_config(
        {"MODEL_SOURCE": origin.url + "/m.gguf", "MODEL_PATH": str(cache / "m.gguf")}, {}
    )

    stream = io.StringIO()
    run_stage(config, Effects(log=Log(stream), probe_fs=unknown_fs))

    assert (cache / "m.gguf").read_bytes() == data
    assert "cannot determine the cache filesystem type" in stream.getvalue()
    assert "ModelCacheLockUnsupported" not in stream.getvalue()
    assert (cache / ".llmkube.lock").exists()
