"""logs: structlog's bound logger with our processors (CONTRACT §6, #14 item 4,
#15 "structlog for the event log"). Redaction and the renderers' basic
shapes are in test_redaction.py."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from llmkube_stager.logs import REDACTED, VERBATIM_EVENTS, Log, Redactor

CANARY = "s3cr3t-Canary-Value-4242"


def text_log(secrets: tuple[str, ...] = ()) -> tuple[Log, io.StringIO]:
    stream = io.StringIO()
    return Log(stream, "text", Redactor(secrets)), stream


def test_a_scripts_line_is_printed_whole_whatever_its_level_and_fields() -> None:
    log, out = text_log()
    log.warning("kept", "Revalidation unreachable; kept cached copy", file="model.gguf")
    log.error("download_failed", "ERROR: failed to download a/b.bin", file="a/b.bin")
    log.info("progress", "Downloaded 1 MiB of 4 MiB (25%)", file="x", attempt=2)
    assert out.getvalue().splitlines() == [
        "Revalidation unreachable; kept cached copy",
        "ERROR: failed to download a/b.bin",
        "Downloaded 1 MiB of 4 MiB (25%)",
    ]


def test_a_scripts_line_is_still_redacted() -> None:
    log, out = text_log((CANARY,))
    log.info("download_start", f"Downloading model artifact {CANARY}...")
    assert out.getvalue() == f"Downloading model artifact {REDACTED}...\n"


def test_the_agents_own_lines_keep_their_fields() -> None:
    log, out = text_log()
    log.warning("retry", "GET failed; retrying in 1.0s", attempt=1, of=5)
    assert out.getvalue() == "WARNING: GET failed; retrying in 1.0s attempt=1 of=5\n"


@pytest.mark.parametrize("event", sorted(VERBATIM_EVENTS))
def test_every_verbatim_event_keeps_its_fields_in_json(event: str) -> None:
    stream = io.StringIO()
    Log(stream, "json").warning(event, "the line", file="a.bin", attempt=3)
    record = json.loads(stream.getvalue())
    assert record["event"] == event
    assert record["msg"] == "the line"
    assert record["file"] == "a.bin" and record["attempt"] == 3


def test_bind_adds_context_to_every_event_of_the_bound_log() -> None:
    stream = io.StringIO()
    log = Log(stream, "json", Redactor((CANARY,)))
    bound = log.bind(file="model.gguf", attempt=2, secret=CANARY)
    bound.info("resume", "Resuming model.gguf from byte 10")
    log.info("other", "unbound")
    first, second = (json.loads(x) for x in stream.getvalue().splitlines())
    assert first["file"] == "model.gguf" and first["attempt"] == 2
    assert first["secret"] == REDACTED
    assert "file" not in second
    assert bound.redact is log.redact


def test_bind_in_text_shows_context_on_agent_lines_only() -> None:
    log, out = text_log()
    bound = log.bind(file="m.gguf")
    bound.info("resume", "Resuming m.gguf from byte 10")
    bound.info("download_start", "Downloading model...")
    assert out.getvalue().splitlines() == [
        "Resuming m.gguf from byte 10 file=m.gguf",
        "Downloading model...",
    ]


def test_structlog_is_loaded_without_its_package_init() -> None:
    """The warm start must not pay for `import structlog` (asyncio, ssl,
    rich); a later plain `import structlog` must still be complete."""
    code = (
        "import io, sys\n"
        "from llmkube_stager.logs import Log\n"
        "Log(io.StringIO()).info('e', 'm')\n"
        "heavy = [m for m in ('asyncio', 'ssl', 'logging', 'rich') if m in sys.modules]\n"
        "left = [m for m in sys.modules if m.startswith('structlog')]\n"
        "import structlog\n"
        "assert structlog.typing and structlog.get_logger and structlog.BoundLoggerBase\n"
        "print(heavy, left)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] []", done.stdout


class _CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def _warm_burst(log: Log, n: int) -> None:
    for i in range(n):
        text = f"Model artifact f{i} already cached, skipping download"
        log.info("cache_hit", text, file=f"f{i}")


def test_a_buffered_log_writes_a_burst_of_cache_hits_at_once() -> None:
    """#16 item 3: a warm start of 2,000 files wrote and flushed 2,000 times."""
    stream = _CountingStream()
    log = Log(stream, buffered=True)
    _warm_burst(log, 100)
    assert stream.writes == 0, "the burst was written line by line"
    log.info("staged", "Model staged: 100 files")
    assert stream.writes == 1
    lines = stream.getvalue().splitlines()
    assert len(lines) == 101 and lines[0].startswith("Model artifact f0 ")
    assert lines[-1].startswith("Model staged")


def test_a_buffered_burst_waits_for_no_more_than_its_cap_or_flush() -> None:
    stream = _CountingStream()
    log = Log(stream, buffered=True)
    _warm_burst(log, 600)
    assert 2 <= stream.writes <= 3, stream.writes  # at most 256 lines wait
    log.flush()
    assert len(stream.getvalue().splitlines()) == 600
    log.flush()  # nothing left: no empty write
    assert stream.getvalue().count("\n") == 600


@pytest.mark.parametrize("event", ["progress", "download_start", "failed", "kept"])
def test_any_other_line_is_written_at_once_with_the_burst_before_it(event: str) -> None:
    stream = _CountingStream()
    log = Log(stream, buffered=True).bind(file="f")
    _warm_burst(log, 3)
    log.warning(event, "the line")
    assert stream.getvalue().splitlines()[-1].startswith(("the line", "WARNING: the line"))
    assert len(stream.getvalue().splitlines()) == 4


def test_an_unbuffered_log_writes_every_line_as_it_comes() -> None:
    """In-process runs hook the stream per line (tests/harness/pod.py)."""
    stream = _CountingStream()
    _warm_burst(Log(stream), 5)
    assert stream.writes == 5


# -- levels and script lines (#46 item 5) -------------------------------------------------


def test_events_below_the_level_are_not_written() -> None:
    out = io.StringIO()
    log = Log(out, "text", Redactor(), level="warning")
    log.debug("http_request", "> GET http://h/x < 200")
    log.info("staged", "Model staged: 1 files")
    log.script_line("progress_script", "Downloaded 1 MiB of 4 MiB (25%)")
    log.warning("retry", "retrying")
    assert out.getvalue().splitlines() == ["WARNING: retrying"]
    assert not log.debugging and log.bind(file="x").level == "warning"


def test_a_script_line_is_text_only() -> None:
    log, out = text_log()
    log.script_line("progress_script", "Downloaded 1 MiB of 4 MiB (25%)")
    assert out.getvalue() == "Downloaded 1 MiB of 4 MiB (25%)\n"
    stream = io.StringIO()
    Log(stream, "json", Redactor()).script_line("progress_script", "Downloaded 1 MiB")
    assert stream.getvalue() == ""
