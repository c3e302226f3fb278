"""#11 items 1, 4, 7 and 8 for partials: a name that looks like a
partial (or a parallel transfer's data file or journal) is taken only when
it is a plain regular file of the model directory. A planted symlink is
never adopted, resumed, truncated or written through; a FIFO never hangs
an adoption; a directory never fails a start; a partial whose mtime is in
the future is resumed once watching shows its writer is gone. Each test
failed before its fix.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from llmkube_stager.layout import private_partial_path, segmented_paths, validator_of
from tests.harness.origin import Origin
from tests.harness.pod import IMPATIENT, Pod, as_fuse, single_env
from tests.harness.sample import payload

MIB = 1 << 20
PATH = "/m/model.gguf"


def env_for(tmp_path: Path, url: str, **extra: str) -> dict[str, str]:
    (tmp_path / "no-certs").mkdir(exist_ok=True)  # empty: a missing one is warned about
    return {
        **single_env(url, tmp_path / "cache"),
        **IMPATIENT,
        "LLMKUBE_RETRIES": "1",
        "LLMKUBE_CA_DIR": str(tmp_path / "no-certs"),
        **extra,
    }


def old(path: Path, age_s: float = 3600) -> None:
    when = time.time() - age_s
    os.utime(path, (when, when), follow_symlinks=False)


def outside_snapshot(directory: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_size, p.read_bytes()) for p in directory.iterdir()}


def test_a_symlink_named_like_a_partial_is_never_adopted_nor_written(
    pod: Pod, tmp_path: Path
) -> None:
    data = payload(2 * MIB, 1)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_bytes(data[:MIB])
    (outside / "y").write_bytes(data[:MIB])
    dest = tmp_path / "cache" / "model.gguf"
    dest.parent.mkdir()
    validator = validator_of(len(data), '"v1"')
    ours = Path(private_partial_path(str(dest), validator, "deadbeef"))
    ours.symlink_to(outside / "x")
    legacy = dest.with_name(f"{dest.name}.{validator_key(validator)}.tmp")
    legacy.symlink_to(outside / "y")
    for link in (ours, legacy):
        old(link)
    before = outside_snapshot(outside)
    with Origin() as origin:
        origin.put(PATH, data, etag='"v1"')
        run = pod.stage(env_for(tmp_path, origin.url + PATH))
        gets = origin.requests(PATH, "GET")
    assert run.error is None, run.stderr
    assert outside_snapshot(outside) == before, "a file outside the cache was written"
    assert not dest.is_symlink() and dest.read_bytes() == data
    assert all("range" not in g.headers for g in gets), "a symlinked partial was resumed"


def validator_key(validator: str) -> str:
    return hashlib.sha256(validator.encode()).hexdigest()[:12]


def test_a_symlinked_segs_file_is_never_truncated_nor_written(pod: Pod, tmp_path: Path) -> None:
    size = 40 * MIB
    data = payload(size, 2)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target").write_bytes(b"precious" * 1000)
    dest = tmp_path / "cache" / "model.gguf"
    dest.parent.mkdir()
    validator = validator_of(size, '"v1"')
    segs, journal = (Path(p) for p in segmented_paths(str(dest), validator, "deadbeef"))
    segs.symlink_to(outside / "target")
    journal.write_text(json.dumps({"validator": validator, "size": size, "done": [[0, 4096]]}))
    old(segs)
    old(journal)
    before = outside_snapshot(outside)
    with Origin() as origin:
        origin.put(PATH, data, etag='"v1"')
        run = pod.stage(env_for(tmp_path, origin.url + PATH, LLMKUBE_CONNECTIONS="4"))
    assert run.error is None, run.stderr
    assert outside_snapshot(outside) == before, "a symlinked segs target was written"
    assert dest.read_bytes() == data


def test_a_fifo_or_directory_named_like_a_partial_never_hangs_nor_fails_a_start(
    pod: Pod, tmp_path: Path
) -> None:
    """Through the real CLI with a deadline: a FIFO opened for adoption
    would block forever; a directory failed every start with
    IsADirectoryError (exit 3)."""
    data = payload(MIB, 3)
    dest = tmp_path / "cache" / "model.gguf"
    dest.parent.mkdir()
    validator = validator_of(len(data), '"v1"')
    fifo = Path(private_partial_path(str(dest), validator, "deadbeef"))
    os.mkfifo(fifo)
    directory = Path(private_partial_path(str(dest), validator, "cafecafe"))
    directory.mkdir()
    (directory / "inside").write_bytes(b"keep")
    journal = Path(segmented_paths(str(dest), validator, "0badf00d")[1])
    os.mkfifo(journal)
    for path in (fifo, directory, journal):
        old(path)
    with Origin() as origin:
        origin.put(PATH, data, etag='"v1"')
        pod.run(env=env_for(tmp_path, origin.url + PATH), timeout=60).ok()
    assert dest.read_bytes() == data
    assert (directory / "inside").read_bytes() == b"keep"


def test_a_partial_with_an_mtime_in_the_future_is_resumed_once_watched(
    pod: Pod, tmp_path: Path
) -> None:
    """On FUSE (no cross-node lock), a partial's age decides; an mtime in
    the future has none, and such a partial was never resumed."""
    data = payload(4 * MIB, 4)
    dest = tmp_path / "cache" / "model.gguf"
    dest.parent.mkdir()
    partial = Path(private_partial_path(str(dest), validator_of(len(data), '"v1"'), "deadbeef"))
    partial.write_bytes(data[: 3 * MIB])
    ahead = time.time() + 7200
    os.utime(partial, (ahead, ahead))
    with Origin() as origin:
        origin.put(PATH, data, etag='"v1"')
        run = pod.stage(
            env_for(tmp_path, origin.url + PATH, LLMKUBE_PREFETCH_STAGER="true"), fs=as_fuse
        )
        gets = origin.requests(PATH, "GET")
    assert run.error is None, run.stderr
    assert dest.read_bytes() == data
    assert gets[0].headers.get("range") == f"bytes={3 * MIB}-", "the future partial was not resumed"
