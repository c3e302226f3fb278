"""progress.progress_text: the old `download_with_progress` lines (spec §5.4,
scenario 89); the lines a person reads beside them (#46 item 5)."""

from __future__ import annotations

import pytest

from llmkube_stager.logs import human_bytes
from llmkube_stager.transfer.progress import (
    MIB,
    ModelProgress,
    RateWindow,
    Received,
    Report,
    human_duration,
    percent_of,
    progress_text,
)


@pytest.mark.parametrize(
    ("done", "total", "text"),
    [
        (2 * MIB, 4 * MIB, "Downloaded 2 MiB of 4 MiB (50%)"),
        (2 * MIB, None, "Downloaded 2 MiB"),
        (2 * MIB, 0, "Downloaded 2 MiB"),
        (0, None, "Downloaded 0 MiB"),
        (0, 0, "Downloaded 0 MiB"),
        (0, 4 * MIB, "Downloaded 0 MiB of 4 MiB (0%)"),
        (4 * MIB, 4 * MIB, "Downloaded 4 MiB of 4 MiB (100%)"),
        (MIB - 1, None, "Downloaded 0 MiB"),  # whole MiB, rounded down
        (3 * MIB - 1, 4 * MIB, "Downloaded 2 MiB of 4 MiB (74%)"),
        (512 * MIB, 1024 * MIB, "Downloaded 512 MiB of 1024 MiB (50%)"),
        (5 * MIB, 4 * MIB, "Downloaded 5 MiB of 4 MiB (100%)"),  # never above 100%
        (100, 300, "Downloaded 0 MiB of 0 MiB (33%)"),
    ],
)
def test_progress_text(done: int, total: int | None, text: str) -> None:
    assert progress_text(done, total) == text


@pytest.mark.parametrize("total", [None, 0])
def test_no_percent_without_a_total(total: int | None) -> None:
    text = progress_text(7 * MIB, total)
    assert "%" not in text
    assert " of " not in text


def test_no_carriage_return_or_newline() -> None:
    for done in range(0, 10 * MIB, MIB // 3):
        for total in (None, 0, 10 * MIB):
            text = progress_text(done, total)
            assert "\r" not in text
            assert "\n" not in text
            assert text.startswith("Downloaded ")


# -- the lines a person reads (#46 item 5) ------------------------------------------------


def _report(done: int, total: int | None, rate: float, model_total: int | None) -> Report:
    return Report("w/model.gguf", done, total, rate, done, model_total, 0, 2)


def test_a_report_names_the_file_rate_time_left_and_model() -> None:
    text = _report(MIB, 4 * MIB, 256 * 1024, 6 * MIB).text()
    assert text == (
        "w/model.gguf: 1.0 MiB of 4.0 MiB (25%), 256.0 KiB/s, about 12 s left; "
        "model: 1.0 MiB of 6.0 MiB, 0 of 2 files done"
    )


def test_a_report_without_sizes_or_rate_says_what_is_unknown() -> None:
    report = _report(700, None, 0.0, None)
    assert report.text() == (
        "w/model.gguf: 700 B received, 0 B/s, time left unknown; "
        "model: 700 B received, 0 of 2 files done"
    )
    fields = report.fields()
    assert fields["eta_s"] is None and fields["percent"] is None
    assert fields["bytes_done"] == 700 and fields["rate_bps"] == 0


@pytest.mark.parametrize(("done", "percent"), [(0, 0), (MIB - 1, 24), (4 * MIB, 100)])
def test_the_percentage_is_never_ahead_of_the_bytes(done: int, percent: int) -> None:
    assert percent_of(done, 4 * MIB) == percent
    assert _report(done, 4 * MIB, 1.0, None).fields()["percent"] == percent


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.2, "1 s"),
        (59.2, "1 min 0 s"),
        (61, "1 min 1 s"),
        (3600, "1 h 0 min"),
        (5000, "1 h 23 min"),
    ],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (4 * MIB, "4.0 MiB"), (40 << 30, "40.0 GiB")],
)
def test_human_bytes(nbytes: int, text: str) -> None:
    assert human_bytes(nbytes) == text


def test_the_rate_is_that_of_the_last_window() -> None:
    window = RateWindow(window_s=10.0)
    assert window.add(0.0, 0) == 0.0
    assert window.add(5.0, 5_000) == 1_000.0
    assert window.add(10.0, 10_000) == 1_000.0
    # A stall then a recovery: the window forgets the old pace.
    assert window.add(20.0, 10_000) == 0.0
    assert window.add(25.0, 60_000) == pytest.approx(50_000 / 15)


def test_the_models_total_is_known_once_every_size_is() -> None:
    model = ModelProgress(2, {"a": 100, "b": None})
    model.moved("a", 40, 100)
    assert model.totals() == (40, None)
    model.moved("b", 10, 50)
    assert model.totals() == (50, 150)
    model.finished("a", 100)
    assert model.totals() == (110, 150) and model.files_done == 1


def test_a_received_line_gives_bytes_and_the_average_rate() -> None:
    line = Received("model.gguf", 3 * MIB, 4 * MIB, 2.0)
    assert line.text() == (
        "model.gguf: received 3.0 MiB (3145728 bytes) in 2.0 s, 1.5 MiB/s on average; "
        "the other 1.0 MiB were resumed from a partial"
    )
    assert line.fields()["rate_bps"] == 3 * MIB // 2


def test_a_file_staged_twice_is_done_once() -> None:
    model = ModelProgress(1, {"a": 10})
    model.finished("a", 10)
    model.finished("a", 10)
    assert model.files_done == 1 and model.totals() == (10, 10)
