"""#46 item 5: progress a person can follow, and a debug level that shows
each request as `curl -v` would, without a secret.

The CLI runs as a user runs it, against the loopback origin with a per
connection rate cap. Before: at 250 KB/s a 4 MiB file logged "Downloaded 0
MiB of 4 MiB (0%)" until the whole 4 MiB receive buffer was full, with no
file name, rate or time left, and no level that showed the requests.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.harness.canary import Secrets, assert_no_leak
from tests.harness.origin import Fault, Origin
from tests.harness.pod import Pod, Run
from tests.harness.sample import gguf_like

pytestmark = pytest.mark.e2e

MIB = 1 << 20
MODEL = "/m/model.gguf"
# The reporter's case: 4 MiB at 250 KB/s (~17 s).
SLOW_DATA = gguf_like(4 * MIB, seed=46)
SLOW_RATE = 250_000
DETAIL = re.compile(
    r"^model\.gguf: (?P<done>\d+\.\d) (?P<unit>B|KiB|MiB) of 4\.0 MiB \((?P<pct>\d+)%\), "
    r"(?P<rate>[\d.]+ (?:B|KiB|MiB)/s), (?P<eta>about [\dhmins ]+ left|time left unknown); "
    r"model: [\d.]+ (?:B|KiB|MiB) of 4\.0 MiB, 0 of 1 files done$"
)
_UNIT = {"B": 1, "KiB": 1 << 10, "MiB": MIB}


def _events(run: Run) -> list[dict[str, Any]]:
    return [json.loads(line) for line in run.stderr.splitlines()]


def test_text_progress_counts_received_bytes_and_names_the_file(pod: Pod, origin: Origin) -> None:
    origin.put(MODEL, SLOW_DATA)
    origin.set_fault(MODEL, Fault(rate_bytes_per_s=SLOW_RATE, methods=("GET",)))
    pod.single(origin.url + MODEL)

    run = pod.run("stage", env={"PROGRESS_INTERVAL": "1"}, timeout=90)

    run.ok(files=1, fetched=1, nbytes=len(SLOW_DATA))
    assert "\r" not in run.stderr
    # The scripts' line stays, whole (spec §13), now by received bytes.
    legacy = [x for x in run.lines if x.startswith("Downloaded ")]
    assert legacy and all(re.fullmatch(r"Downloaded \d MiB of 4 MiB \(\d+%\)", x) for x in legacy)
    assert any(not x.startswith("Downloaded 0 MiB") for x in legacy), run.stderr
    matches = [m for x in run.lines if (m := DETAIL.match(x))]
    assert len(matches) >= 8, run.stderr  # ~17 s at one line a second
    done = [float(m["done"]) * _UNIT[m["unit"]] for m in matches]
    assert done == sorted(done) and len(set(done)) >= len(done) // 2, done
    assert done[0] < 2 * MIB, done  # not a whole buffer at once
    for m, received in zip(matches, done, strict=True):
        # Never a percentage beyond what was received (one decimal of rounding).
        assert int(m["pct"]) * 4 * MIB / 100 <= received + 0.05 * MIB, m.group(0)
    assert any(m["eta"].startswith("about") for m in matches), run.stderr
    # The file's last line: its bytes and average rate.
    last = run.line_with("model.gguf: received 4.0 MiB (4194304 bytes) in ")
    assert re.search(r" in \d+\.\d s, [\d.]+ KiB/s on average$", last), last
    # The run's last line: every count, the bytes and the average rate.
    staged = run.line_with("Model staged: ")
    assert re.search(r"4\.0 MiB received in \d+\.\d s, [\d.]+ KiB/s on average", staged), staged
    assert " bytes=4194304 " in staged and " files=1 " in staged, staged


def test_json_progress_has_numbers_and_the_final_event_counts(pod: Pod, origin: Origin) -> None:
    data = gguf_like(2 * MIB, seed=47)
    origin.put(MODEL, data)
    origin.set_fault(MODEL, Fault(rate_bytes_per_s=500_000, methods=("GET",)))
    pod.single(origin.url + MODEL)

    run = pod.run("stage", env={"PROGRESS_INTERVAL": "0.5", "LLMKUBE_LOG_FORMAT": "json"})

    run.ok(files=1, fetched=1, nbytes=len(data))
    events = _events(run)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["ts"]) for e in events)
    progress = [e for e in events if e["event"] == "progress"]
    assert len(progress) >= 4, run.stderr
    for e in progress:
        assert e["file"] == "model.gguf"
        assert e["bytes_total"] == len(data) and e["model_bytes_total"] == len(data)
        assert isinstance(e["bytes_done"], int) and isinstance(e["rate_bps"], int | float)
        assert e["percent"] == e["bytes_done"] * 100 // len(data), e
        assert e["files_done"] == 0 and e["files_total"] == 1
    done = [e["bytes_done"] for e in progress]
    assert done == sorted(done) and len(set(done)) >= 3, done
    assert any(isinstance(e.get("eta_s"), int | float) and e["eta_s"] > 0 for e in progress)
    assert not any("Downloaded " in e["msg"] for e in events), "a text-only line in JSON"
    received = [e for e in events if e["event"] == "received"]
    assert len(received) == 1 and received[0]["bytes"] == len(data), received
    assert received[0]["seconds"] > 0 and received[0]["rate_bps"] > 0
    final = events[-1]
    assert final["event"] == "staged", final
    assert (final["files"], final["fetched"], final["reused"], final["kept"]) == (1, 1, 0, 0)
    assert final["bytes"] == len(data) and final["seconds"] > 0 and final["rate_bps"] > 0


def _secret_url(base: str, path: str, secrets: Secrets) -> str:
    parts = urlsplit(base)
    netloc = f"llmkube:{secrets.url_password}@{parts.netloc}"
    query = f"sig={secrets.url_signature}&X-Amz-Signature={secrets.url_signature}"
    query += f"&token={secrets.url_token}&name=model"
    return urlunsplit((parts.scheme, netloc, path, query, ""))


def test_debug_level_shows_each_request_and_never_a_secret(pod: Pod, origin: Origin) -> None:
    secrets = Secrets.new("CANARY")
    data = gguf_like(300_000, seed=48)
    origin.put(MODEL, data, etag='"v46"')
    # A resumed transfer: the GET carries the validator chosen (If-Range).
    origin.set_fault(MODEL, Fault(truncate_after=100_000, times=1, methods=("GET",)))
    # The token goes to the HF_ENDPOINT origin as a header; the userinfo
    # becomes a Basic header; the query holds a signature and a token.
    basic = base64.b64encode(f"llmkube:{secrets.url_password}".encode()).decode()
    canaries = {**secrets.named, "basic": basic}
    pod.single(_secret_url(origin.url, MODEL, secrets))
    env = {"LLMKUBE_LOG_LEVEL": "debug", "HF_TOKEN": secrets.hf_token, "HF_ENDPOINT": origin.url}

    run = pod.run("stage", env=env)

    run.ok(files=1, fetched=1, nbytes=len(data))
    gets = origin.requests(MODEL, "GET")
    assert len(gets) == 2 and "authorization" in gets[0].headers  # the headers were sent
    debug = [x for x in run.lines if x.startswith("> ")]
    heads = [x for x in debug if x.startswith("> HEAD ")]
    ranged = [x for x in debug if x.startswith("> GET ") and "| Range: bytes=100000- |" in x]
    assert heads and ranged, run.stderr
    for line in (*heads, ranged[0]):
        assert f"{origin.url}{MODEL}?sig=***&X-Amz-Signature=***&token=***&name=*** |" in line
        assert '| ETag: "v46" |' in line and "| Last-Modified: " in line, line
    assert " < 200 |" in heads[0] and " < 206 |" in ranged[0], run.stderr
    assert '| If-Range: "v46" |' in ranged[0], ranged[0]
    # The token (HF_ENDPOINT's origin) wins over the userinfo; its scheme only.
    assert "| auth: Bearer < 206 |" in ranged[0], ranged[0]
    assert_no_leak({"stderr": run.stderr, "stdout": run.stdout}, canaries)


def test_debug_lines_are_json_records_and_absent_at_the_default_level(
    pod: Pod, origin: Origin
) -> None:
    origin.put(MODEL, gguf_like(50_000, seed=49))
    pod.single(origin.url + MODEL + "?X-Amz-Signature=abcdef0123456789")
    quiet = pod.run("stage")
    quiet.ok(files=1, fetched=1)
    assert not any(x.startswith("> ") for x in quiet.lines), quiet.stderr

    pod.single(origin.url + MODEL + "?X-Amz-Signature=abcdef0123456789", key="k2")
    run = pod.run("stage", env={"LLMKUBE_LOG_FORMAT": "json", "LLMKUBE_LOG_LEVEL": "debug"})
    run.ok(files=1, fetched=1)
    requests = [e for e in _events(run) if e["event"] == "http_request"]
    assert [e["method"] for e in requests] == ["HEAD", "GET"], requests
    assert all(e["level"] == "debug" and isinstance(e["status"], int) for e in requests)
    assert all(e["url"].endswith("?X-Amz-Signature=***") for e in requests), requests
    assert "abcdef0123456789" not in run.stderr
