"""The typed run record (cache/runrecord.py, #23 item 1) writes and reads
the on-disk format the string protocol wrote before it: a run record left
by an older agent is read, and one written now is what older readers read."""

from __future__ import annotations

import json
from pathlib import Path

from llmkube_stager.cache.runrecord import (
    MAIN,
    PublishEntry,
    RunRecord,
    Update,
    WriterRun,
    read_run_record,
    record_name,
    write_run,
    write_shard_count,
)


def _on_disk(root: Path, writer: str = MAIN) -> dict[str, str]:
    doc: dict[str, str] = json.loads((root / record_name(writer)).read_bytes())
    return doc


def test_a_publish_intent_and_the_run_keys_are_the_old_strings(tmp_path: Path) -> None:
    entry = PublishEntry("sub/a.bin", "a.bin.0123456789ab.w1.llmkube-part.tmp", 7, '"v"')
    update = Update(validators={"b.bin": '"vb"'}, revision="main", commit="c0ffee")
    write_run(str(tmp_path), MAIN, update | Update(intent=(entry,), over={"0-of-2": "beef"}))

    assert _on_disk(tmp_path) == {
        "b.bin": '"vb"',
        "/revision": "main",
        "/commit": "c0ffee",
        "/publishing": '[{"partial":"a.bin.0123456789ab.w1.llmkube-part.tmp",'
        '"rel":"sub/a.bin","size":7,"validator":"\\"v\\""}]',
        "/over": '{"0-of-2": "beef"}',
    }
    write_run(str(tmp_path), MAIN, Update(intent=()))
    assert _on_disk(tmp_path)["/publishing"] == "", "a publish over is an empty intent"
    assert _on_disk(tmp_path)["/commit"] == "c0ffee", "a key the update does not set is kept"


def test_keys_this_version_does_not_know_are_kept_by_a_write(tmp_path: Path) -> None:
    (tmp_path / record_name(MAIN)).write_text(json.dumps({"/future": "x", "a": '"1"'}))
    write_run(str(tmp_path), MAIN, Update(validators={"b": '"2"'}))
    assert _on_disk(tmp_path) == {"/future": "x", "a": '"1"', "b": '"2"'}


def test_a_share_writes_its_own_file_and_readers_see_every_writer(tmp_path: Path) -> None:
    root = str(tmp_path)
    write_shard_count(root, 2)
    write_run(root, MAIN, Update(commit="aaa"))
    write_run(root, "1-of-2", Update(view="d1", claim="c", commit="bbb"))
    assert _on_disk(tmp_path, "1-of-2") == {"/view": "d1", "/claim": "c", "/commit": "bbb"}

    record = read_run_record(root)
    assert record.run("1-of-2").view == "d1" and record.run("1-of-2").claim == "c"
    assert record.commits() == {"": "aaa", "1-of-2": "bbb"}
    assert record.run("0-of-2") == WriterRun("0-of-2"), "share 0 recorded nothing"


def test_a_run_over_the_whole_model_supersedes_the_shares_commits(tmp_path: Path) -> None:
    root = str(tmp_path)
    write_shard_count(root, 2)
    for share in ("0-of-2", "1-of-2"):
        write_run(root, share, Update(commit="old"))
    assert set(read_run_record(root).commits().values()) == {"old"}
    write_run(root, MAIN, Update(commit="new", over={"0-of-2": "old", "1-of-2": "old"}))
    assert read_run_record(root).commits() == {"": "new"}


def test_an_update_that_changes_nothing_is_not_a_change(tmp_path: Path) -> None:
    root = str(tmp_path)
    write_run(root, MAIN, Update(validators={"a": '"1"'}, commit="c"))
    record = read_run_record(root)
    assert not Update(validators={"a": '"1"'}, commit="c").changes(record, MAIN)
    assert Update(commit="d").changes(record, MAIN)
    assert Update(commit="c").changes(record, "0-of-2"), "a share's record is its own"
    assert not Update()
    assert record == RunRecord({"a": '"1"'}, {MAIN: record.run()})


def test_an_intent_entry_that_climbs_out_of_the_model_is_no_entry(tmp_path: Path) -> None:
    """A hostile record whose intent names `../outside/x` made every reader
    look outside the cache (lexists, then an open and a flock to judge its
    writer alive) and refuse a whole model for a file that is none of it."""
    from llmkube_stager.cache.setstate import judge_set, pending_publishes

    root = tmp_path / "model"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f").write_bytes(b"not ours")
    entries = [
        {"rel": rel, "partial": "f", "size": 8, "validator": ""}
        for rel in ("../outside/x", "/abs/x", "a/../../outside/x", "x\n../outside/y")
    ]
    (root / record_name(MAIN)).write_text(json.dumps({"/publishing": json.dumps(entries)}))

    record = read_run_record(str(root))
    assert record.run().intent == ()
    assert pending_publishes(record, str(root)) == []
    assert judge_set(record, str(root)) is None


def test_an_intent_entry_inside_the_model_still_counts(tmp_path: Path) -> None:
    """The check above must not drop a real entry: a partial beside its
    destination in a subdirectory is a publish in progress."""
    from llmkube_stager.cache.setstate import judge_set

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f").write_bytes(b"partial!")
    entry = {"rel": "sub/x.bin", "partial": "f", "size": 8, "validator": ""}
    (tmp_path / record_name(MAIN)).write_text(json.dumps({"/publishing": json.dumps([entry])}))
    refusal = judge_set(read_run_record(str(tmp_path)), str(tmp_path))
    assert refusal is not None and refusal.file == "sub/x.bin"


# -- #29 item 1: the writers' entries; #29 item 6: a claim names its Job -----------------------


def test_the_writers_entries_refuse_what_they_cannot_vouch_for(tmp_path: Path) -> None:
    """cache/writers.py as a reader meets it: no directory, an empty one, one
    writer of the recorded commit: nothing to refuse. Another commit than
    the record's, a mixed entry, an entry that is no JSON, something at the
    directory's name that is no directory (a symlink: never followed), more
    entries than it reads: refused. A writer clears only what it saw."""
    import os

    from llmkube_stager.cache import writers

    root = str(tmp_path)
    write_run(root, MAIN, Update(revision="main", commit="c1"))
    assert read_run_record(root).mixed == ""
    writers.enter(root, "w1", "c1")
    assert read_run_record(root).mixed == ""  # a writer of the recorded commit at work
    writers.enter(root, "w2", "c2")
    assert "c1, c2" in read_run_record(root).mixed
    writers.leave(root, "w2")
    writers.enter(root, "w1", "c1", mixed=True)
    assert read_run_record(root).mixed
    seen = read_run_record(root).writers
    writers.enter(root, "w3", "c1", mixed=True)  # written after it was seen
    writers.clear(root, seen)
    assert [e.name for e in read_run_record(root).writers] == ["w3"]
    writers.leave(root, "w3")
    (tmp_path / writers.WRITERS_NAME / "w4").write_text("not json")
    assert read_run_record(root).mixed
    writers.leave(root, "w4")
    for i in range(70):
        writers.enter(root, f"w{i:03d}", "c1")
    assert read_run_record(root).mixed  # more than it reads: not vouched for
    for i in range(70):
        writers.leave(root, f"w{i:03d}")
    os.rmdir(tmp_path / writers.WRITERS_NAME)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / writers.WRITERS_NAME)
    assert read_run_record(root).mixed
    writers.clear(root, read_run_record(root).writers)
    assert not os.path.lexists(tmp_path / writers.WRITERS_NAME)
    assert (tmp_path / "elsewhere").is_dir()


def test_a_claim_names_its_job_and_one_without_is_read_as_before(tmp_path: Path) -> None:
    from llmkube_stager.cache.jobclaim import JOB_COMMIT_NAME, JobCommit, read_job_commit

    ticks = iter(range(0, 10**6, 10))  # every look at the clock: 10 s later

    def read() -> JobCommit | None:
        return read_job_commit(str(tmp_path), lambda _s: None, lambda: float(next(ticks)))

    path = tmp_path / JOB_COMMIT_NAME
    path.write_bytes(JobCommit("main", "c0ffee", "id1").encode())
    assert "job" not in json.loads(path.read_bytes())  # what an older agent wrote
    old = read()
    assert old == JobCommit("main", "c0ffee", "id1", "")
    assert old.of_another_job("uid-2") and not old.of_another_job("")
    path.write_bytes(JobCommit("main", "c0ffee", "id1", "uid-1").encode())
    mine = read()
    assert mine is not None and mine.job == "uid-1"
    assert not mine.of_another_job("uid-1") and mine.of_another_job("uid-2")
    assert not mine.of_another_job("")  # a pod not told its Job: as before
    path.write_text('{"revision": "main", "commit": "c0ffee", "id": "id1", "job": 7}')
    assert read() is None  # no claim (debris: removed, a new one made)
