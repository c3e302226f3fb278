"""A writer killed while widening leaves a journal without data: the stream's
bytes are journaled under the ranged transfer's name first, then the stream
partial is renamed to it (transfer/parallel.py `_take_over`). A SIGKILL
between the two leaves the stream partial (resumed by the next writer) and a
journal that can never be completed. The writer that adopts that stream
partial proves its owner gone and drops the orphan (it was seen left behind
by tests/e2e/test_cli_stage.py::test_sigkill_during_widened_ranges...).
"""

from __future__ import annotations

from pathlib import Path

from llmkube_stager.cache.partials import adopt_partial
from llmkube_stager.layout import private_partial_path, segmented_paths, validator_of

VALIDATOR = validator_of(4096, '"v1"')


def test_adopting_a_stream_partial_drops_its_writers_orphan_journal(tmp_path: Path) -> None:
    dest = str(tmp_path / "model.gguf")
    stream = Path(private_partial_path(dest, VALIDATOR, "0badc0de"))
    stream.write_bytes(b"x" * 1024)
    segs, journal = (Path(p) for p in segmented_paths(dest, VALIDATOR, "0badc0de"))
    journal.write_text('{"validator": "", "size": 4096, "done": [[0, 1024]]}')
    assert not segs.exists()

    claim = adopt_partial(dest, VALIDATOR, "12345678", idle_s=0.0)
    try:
        assert claim.size() == 1024  # the stream's bytes were adopted
        assert not journal.exists()
    finally:
        claim.close()


def test_a_journal_whose_data_exists_is_not_touched(tmp_path: Path) -> None:
    """A ranged transfer of the same writer id owns its journal: only a
    journal without its data file is an orphan."""
    dest = str(tmp_path / "model.gguf")
    stream = Path(private_partial_path(dest, VALIDATOR, "0badc0de"))
    stream.write_bytes(b"x" * 1024)
    segs, journal = (Path(p) for p in segmented_paths(dest, VALIDATOR, "0badc0de"))
    segs.write_bytes(b"\0" * 4096)
    journal.write_text('{"validator": "", "size": 4096, "done": []}')

    claim = adopt_partial(dest, VALIDATOR, "12345678", idle_s=0.0)
    try:
        assert journal.exists() and segs.exists()
    finally:
        claim.close()


def test_adopting_a_ranged_partial_drops_the_dead_writers_journal_temps(tmp_path: Path) -> None:
    """Killed inside an atomic journal write (temp created, not renamed yet):
    the temp is the dead writer's, never renamed by anyone."""
    from llmkube_stager.cache.partials import adopt_segmented

    dest = str(tmp_path / "model.gguf")
    segs, journal = (Path(p) for p in segmented_paths(dest, VALIDATOR, "0badc0de"))
    segs.write_bytes(b"\0" * 4096)
    journal.write_text('{"validator": "", "size": 4096, "done": []}')
    temp = Path(str(journal) + ".llmkube-tmp.AbC123")
    temp.write_text("{")

    claim, new_journal, adopted = adopt_segmented(dest, VALIDATOR, "12345678", idle_s=0.0)
    try:
        assert adopted and Path(new_journal).exists()
        assert not temp.exists()
    finally:
        claim.close()
