"""The files of a plan that need no transfer: a cache hit is logged with
the scripts' line, and a stamp or size record it lacks is written back
(spec §7, §8.4). Nothing here imports the transfer engine: a warm start
never pays for it."""

from __future__ import annotations

import os

from llmkube_stager.acting.recorder import Recorder
from llmkube_stager.cache.records import write_size_record
from llmkube_stager.logs import Log
from llmkube_stager.model import Action, CacheState, FileResult, Manifest, RemoteFile


def settle(
    action: Action, manifest: Manifest, cache: CacheState, recorder: Recorder, log: Log
) -> FileResult:
    file = manifest.file(action.rel)
    log.info("cache_hit", action.message, file=file.rel)
    if action.note:
        log.info("revalidated_by_size", action.note, file=file.rel)
    if file.sha256:
        # Beside the scripts' line, never appended to it (spec §7 "stamp hit").
        log.info("pin_accepted", f"{file.rel} {action.why}", file=file.rel)
    if action.write_stamp and file.sha256:
        recorder.best_effort(lambda: _stamp_hashed(file, cache), file.rel)
    if action.backfill_record:
        recorder.best_effort(
            lambda: write_size_record(file.dest, os.stat(file.dest).st_size), file.rel
        )
        log.info("backfilled", f"Backfilled size record for {file.rel}", file=file.rel)
    return FileResult(file.rel, action.decision)


def _stamp_hashed(file: RemoteFile, cache: CacheState) -> None:
    """The warm path stamps only the inode it hashed, while the path still
    names it (#10 defect 3)."""
    from llmkube_stager.cache.publish import Published, stamp_published

    local = cache.files.get(file.rel)
    hashed = local.hashed_as if local is not None else None
    if hashed is None:
        return
    st = os.lstat(file.dest)
    if (st.st_dev, st.st_ino, st.st_size, st.st_mtime) != hashed:
        return
    # The evidence read by the descriptor that hashed it (cache/state.py).
    evidence = local.hashed_evidence if local is not None else None
    stamp_published(file.dest, file.sha256 or "", Published(st, evidence))
