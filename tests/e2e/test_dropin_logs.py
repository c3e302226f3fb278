"""#14 item 4: the scripts' lines (spec §13) are exact in text logs.

Users and alerts grep them with anchors (`^ERROR: failed to download <rel>$`),
so each must be a whole line of the real CLI's stderr, byte for byte, with no
`key=value` appended; the fields go into JSON logs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.harness.origin import Fault, Origin, closed_port_url
from tests.harness.pod import Pod, Run, import_lines

pytestmark = pytest.mark.e2e

MODEL = "/m/model.gguf"
DATA = b"GGUF" + bytes(range(256)) * 4096 * 3  # 3 MiB


def lines(run: Run) -> list[str]:
    assert "\r" not in run.stderr
    return run.stderr.split("\n")


def assert_whole_line(run: Run, line: str) -> None:
    assert line in lines(run), f"no whole line {line!r} in\n{run.stderr}"


def test_single_file_cold_and_warm_lines(pod: Pod, origin: Origin) -> None:
    origin.put(MODEL, DATA)
    origin.set_fault(MODEL, Fault(rate_bytes_per_s=8 << 20, methods=("GET",)))
    pod.single(origin.url + MODEL)
    cold = pod.run("stage", env={"PROGRESS_INTERVAL": "0.1"})
    assert cold.returncode == 0, str(cold)
    assert_whole_line(cold, "Downloading model...")
    assert_whole_line(cold, "Model downloaded successfully")
    progress = [x for x in lines(cold) if x.startswith("Downloaded ")]
    assert progress, cold.stderr
    for line in progress:
        assert re.fullmatch(r"Downloaded \d+ MiB of 3 MiB \(\d+%\)", line), line

    warm = pod.run("stage")
    assert warm.returncode == 0, str(warm)
    assert_whole_line(warm, "Model already cached, skipping download")


def test_multi_file_failure_is_the_scripts_error_line(pod: Pod, origin: Origin) -> None:
    origin.put("/r/config.json", b"{}")
    cache = pod.multi(origin.url + "/r/", ["config.json", "weights/missing.safetensors"])
    run = pod.run("stage")
    assert run.returncode != 0, str(run)
    assert_whole_line(run, "Downloading model artifact config.json...")
    assert_whole_line(run, "Downloading model artifact weights/missing.safetensors...")
    # An alert's anchored grep, as users write it.
    grep = re.compile(r"^ERROR: failed to download weights/missing\.safetensors$", re.M)
    assert grep.search(run.stderr), run.stderr

    warm = pod.run("stage", env={"MODEL_FILES": "config.json"})
    assert warm.returncode == 0, str(warm)
    assert_whole_line(warm, "Model artifact config.json already cached, skipping download")
    assert (cache / "config.json").read_bytes() == b"{}"


def test_onchange_nothing_cached_origin_down(pod: Pod) -> None:
    pod.single(closed_port_url() + MODEL)
    run = pod.run("stage", env={"LLMKUBE_REFRESH_POLICY": "OnChange"})
    assert run.returncode == 1, str(run)
    assert_whole_line(run, "Revalidating model against upstream (RefreshPolicy=OnChange)...")
    assert_whole_line(run, "ERROR: model missing and revalidation failed")


def test_onchange_multi_nothing_cached_origin_down(pod: Pod) -> None:
    pod.multi(closed_port_url() + "/r/", ["a.bin"])
    run = pod.run("stage", env={"LLMKUBE_REFRESH_POLICY": "OnChange"})
    assert run.returncode == 1, str(run)
    assert_whole_line(run, "ERROR: model artifact a.bin missing and revalidation failed")


def test_onchange_cached_origin_down_keeps_the_copy(pod: Pod, origin: Origin) -> None:
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    assert pod.run("stage").returncode == 0
    origin.close()
    run = pod.run("stage", env={"LLMKUBE_REFRESH_POLICY": "OnChange"})
    assert run.returncode == 0, str(run)
    assert_whole_line(run, "Revalidation unreachable; kept cached copy")


def test_json_logs_carry_the_fields(pod: Pod, origin: Origin) -> None:
    origin.put("/r/config.json", b"{}")
    pod.multi(origin.url + "/r/", ["config.json", "weights/missing.safetensors"])
    run = pod.run("stage", env={"LLMKUBE_LOG_FORMAT": "json"})
    events = [json.loads(line) for line in run.stderr.splitlines()]
    failed = [e for e in events if e["event"] == "download_failed"]
    assert failed, run.stderr
    assert failed[0]["msg"] == "ERROR: failed to download weights/missing.safetensors"
    assert failed[0]["file"] == "weights/missing.safetensors"
    assert failed[0]["level"] == "error"
    final = events[-1]
    assert final["event"] == "failed" and final["reason"] == "ModelSourceNotFound", final


def test_agent_lines_keep_their_fields_in_text(pod: Pod, tmp_path: Path, origin: Origin) -> None:
    """Lines the scripts never printed may carry key=value (CONTRACT §6)."""
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    run = pod.run("stage")
    staged = [x for x in lines(run) if x.startswith("Model staged: ")]
    assert staged and re.search(r" seconds=\d", staged[0]), run.stderr


def test_warm_start_does_not_pay_for_structlogs_package(pod: Pod, origin: Origin) -> None:
    """#15 budget: structlog's bound logger only; none of the heavy
    libraries (asyncio comes with `import structlog`)."""
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    assert pod.run("stage").returncode == 0
    warm = pod.run("stage", python_flags=("-X", "importtime"))
    assert warm.returncode == 0, str(warm)
    mods = import_lines(warm.stderr)
    assert "structlog._base" in mods, "the log does not go through structlog"
    heavy = ("asyncio", "ssl", "httpx", "boto3", "botocore", "huggingface_hub", "filelock")
    assert {m for m in mods if m.split(".")[0] in (*heavy, "psutil", "rich")} == set()
    assert {m for m in mods if m.startswith("structlog.")} <= {
        "structlog._base",
        "structlog.typing",
        "structlog.exceptions",
    }


def test_pinned_warm_hit_is_whole_and_says_stamp_hit_beside_it(pod: Pod, origin: Origin) -> None:
    import hashlib

    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    pin = {"MODEL_SHA256": hashlib.sha256(DATA).hexdigest()}
    assert pod.run("stage", env=pin).returncode == 0
    warm = pod.run("stage", env=pin)
    assert warm.returncode == 0, str(warm)
    assert_whole_line(warm, "Model already cached, skipping download")
    assert any("stamp hit" in x for x in lines(warm)), warm.stderr
