"""The write path of a staging run: the writer lock where it means
something, the plan made again under it, an interrupted publish finished,
stale temp files swept, then the plan carried out (acting/). Imported only
when a run writes (staging/run.py): a warm start loads none of it.
"""

from __future__ import annotations

import contextlib
import os

from llmkube_stager.acting.executor import execute
from llmkube_stager.acting.session import Session
from llmkube_stager.cache.disk import ensure_dir
from llmkube_stager.cache.lock import CacheLock
from llmkube_stager.cache.publish import roll_forward as finish
from llmkube_stager.cache.runrecord import Update, write_run
from llmkube_stager.cache.sweep import sweep
from llmkube_stager.config import Config
from llmkube_stager.logs import Log
from llmkube_stager.model import FileResult
from llmkube_stager.staging.interrupted import recorded_commit
from llmkube_stager.staging.prepare import Effects, Prepared, check_plan, replan, work_of


def write(
    config: Config, effects: Effects, prepared: Prepared, session: Session
) -> tuple[FileResult, ...]:
    ensure_dir(prepared.manifest.root, prepared.manifest.root, "")
    with _writer_lock(config, effects, prepared):
        if prepared.strategy.take_lock:
            # Another writer may have staged while we waited for the lock.
            prepared = replan(config, prepared)
        mode = prepared.mode
        if mode.own_intents(prepared.record, prepared.manifest.root):
            roll_forward(prepared, effects.log, session.writer)
            prepared = replan(config, prepared)
        if prepared.strategy.take_lock or prepared.checked:
            check_plan(prepared, effects.log, warn=False)
        if mode.sweeps:  # a share never sweeps (staging/mode.py)
            _sweep(prepared, effects)
        if mode.judges_set:  # a share's plan is its share (staging/mode.py)
            _check_room(prepared)
        if config.refresh_policy == "IfNotPresent" and mode.fetches_recorded_commit:
            session.fetch_at(recorded_commit(prepared))
        return execute(session, work_of(prepared), prepared.plan)


def roll_forward(prepared: Prepared, log: Log, writer: str) -> None:
    """Finish the publish a killed writer left halfway (#10 defect 13)."""
    manifest = prepared.manifest
    validators: dict[str, str] = {}
    listed = {f.rel: f for f in manifest.files}
    for entry in prepared.mode.own_intents(prepared.record, manifest.root):
        if entry.rel not in listed:
            continue
        done = finish(listed[entry.rel].dest, entry.partial, entry.size_bytes)
        # A file that cannot be vouched for loses its validator: OnChange
        # then verifies it against the origin instead of trusting it (a
        # destination found of its size, None, may be the old file).
        validators[entry.rel] = entry.validator if done is True else ""
    write_run(manifest.root, writer, Update(validators=validators, intent=()))
    log.warning(
        "rolled_forward",
        "finished a publish that an earlier writer left halfway",
        path=manifest.root,
    )


def _writer_lock(
    config: Config, effects: Effects, prepared: Prepared
) -> contextlib.AbstractContextManager[object]:
    """Off FUSE (and when the type is unknown: the previous behavior, spec
    §16 item 3) writers take the flock; on FUSE nobody does (spec §9.3)."""
    if not (prepared.strategy.take_lock and prepared.mode.locks):
        return contextlib.nullcontext()  # a share takes no lock (staging/mode.py)
    return CacheLock(
        prepared.manifest.root,
        config.timeouts.lock_s,
        effects.log,
        effects.monotonic,
        effects.sleep,
    )


def _check_room(prepared: Prepared) -> None:
    """The whole set against the volume's free space, after the sweep freed
    what it could and before the first request (staging/room.py)."""
    if not prepared.fs.free_space_meaningful:
        return
    manifest = prepared.manifest
    files = [manifest.file(a.rel) for a in prepared.plan.actions if a.transfers]
    if not any(f.size_bytes for f in files):
        return
    from llmkube_stager.cache.fs import free_bytes
    from llmkube_stager.cache.partialnames import list_partials, without_partials
    from llmkube_stager.staging.room import check_room, missing_bytes

    bare = without_partials([f.dest for f in files])

    def held(dest: str) -> int:
        # A resumed partial's bytes are already on the volume; two writers'
        # partials of one file hold one copy's worth at most.
        if dest in bare:
            return 0
        parts = [p.size_bytes for p in list_partials(dest) if p.kind != "journal"]
        return max(parts, default=0)

    need = missing_bytes((f.size_bytes, held(f.dest)) for f in files)
    check_room(need, free_bytes(manifest.root), len(files), "the volume")


def _sweep(prepared: Prepared, effects: Effects) -> None:
    manifest = prepared.manifest
    staging = frozenset(manifest.file(a.rel).dest for a in prepared.plan.actions if a.transfers)
    listed = frozenset(f.dest for f in manifest.files)
    root = manifest.root
    for path in sweep(root, listed, staging, effects.wall_clock()):
        effects.log.info("swept", "removed stale temp file", path=os.path.relpath(path, root))
