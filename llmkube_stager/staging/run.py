"""A staging run: resolve -> probe fs -> inspect -> plan -> act -> Outcome.

`prepare` (staging/prepare.py) does everything up to the plan with local
reads only. `run_stage` chooses the run's mode once (staging/mode.py: the
whole model, or this pod's share of a sharded prefetch, staging/share.py),
begins it, revalidates (OnChange, staging/onchange.py), and then
either serves what is there, a warm start: no lock, no mkdir, no sweep
(spec §8.4, §9.3), or writes (staging/write.py, imported only then). A plan
with nothing to write returns before any fetcher exists, so a warm
IfNotPresent start opens no connection and imports no HTTP library.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from llmkube_stager import messages
from llmkube_stager.acting.executor import execute
from llmkube_stager.acting.session import Clock, Session
from llmkube_stager.cache import writers
from llmkube_stager.cache.disk import ensure_dir
from llmkube_stager.config import Config
from llmkube_stager.errors import (
    REMEDY_SIGNATURE_FILES,
    Reason,
    SignatureError,
    TransferError,
    from_source,
)
from llmkube_stager.model import Decision, FileResult, Outcome, PinState
from llmkube_stager.schemes import has_commits, verify_only
from llmkube_stager.sources import check_libraries
from llmkube_stager.staging.interrupted import (
    kept_commit,
    refuse_unwhole,
    wait_for_live_publishes,
)
from llmkube_stager.staging.mode import WHOLE_MODEL, OneShare, RunMode
from llmkube_stager.staging.onchange import revalidate
from llmkube_stager.staging.prepare import (
    Effects,
    Prepared,
    check_plan,
    prepare,
    replan,
    verified,
    work_of,
)
from llmkube_stager.staging.share import agree_share, record_share, take_share

if TYPE_CHECKING:
    from llmkube_stager.cache.sigrecord import Verification


def stage_model(config: Config, effects: Effects) -> tuple[str, Outcome]:
    """run_stage, or an OCI artifact of tar layers unpacked into CACHE_DIR
    (staging/layers.py, #43 item 3): (the source as shown, the outcome)."""
    started_s = effects.monotonic()
    if config.source.startswith(("oci://", "oci+fetch://")):
        from llmkube_stager.staging.layers import warm_results

        warm = warm_results(config)
        if warm is not None:  # no request, nothing unpacked again
            return config.source, Outcome(warm, effects.monotonic() - started_s)
    from llmkube_stager.sources.oci.manifest import ArchiveArtifact

    try:
        prepared, outcome = run_stage(config, effects)
    except ArchiveArtifact as art:
        from llmkube_stager.staging.layers import stage_layers

        with from_source("oci"):
            results = stage_layers(config, art, effects)
        return config.source, Outcome(results, effects.monotonic() - started_s)
    return prepared.manifest.display_source, outcome


def run_stage(config: Config, effects: Effects) -> tuple[Prepared, Outcome]:
    prepared = prepare(config, effects)
    with from_source(prepared.manifest.kind):
        return _stage(config, effects, prepared)


def _stage(config: Config, effects: Effects, prepared: Prepared) -> tuple[Prepared, Outcome]:
    if verify_only(prepared.manifest.kind):
        if config.signing is not None:
            # #40 item 1: a pre-staged model is verified against its bundle
            # or refused; the key is never left unused.
            from llmkube_stager.staging.signed import gate_prestaged

            prepared = gate_prestaged(config, config.signing, prepared, effects.log)
        return prepared, _verify_pvc(prepared, effects)
    mode, begin = _mode_of(config)
    prepared = replace(prepared, mode=mode)
    mixed = _mixed_to_settle(prepared)
    seen = prepared.record.writers
    if mixed:
        # Writers of two commits were at it (#29 item 1, cache/writers.py):
        # this run stages the model as OnChange does, every present file
        # proven by its bytes against one commit (no record trusted), the
        # rest fetched, and only then clears the entries it found.
        effects.log.warning(
            "mixed_commits",
            "the model's files were left from more than one commit by writers of it; "
            "proving every file by its bytes and staging the set again from one commit",
            why=mixed,
        )
        config = replace(config, refresh_policy="OnChange")
        prepared = replan(config, prepared)
    clock = Clock(effects.sleep, effects.monotonic, effects.wall_clock)
    session = Session(config, effects.log, clock, prepared.fs, prepared.strategy, mode.writer)
    try:
        prepared = begin(config, effects, prepared, session)
        root = prepared.manifest.root
        pending = bool(prepared.mode.own_intents(prepared.record, root))
        if not prepared.strategy.may_write:
            refuse_unwhole(prepared)
        if config.refresh_policy == "OnChange" or any(a.transfers for a in prepared.plan.actions):
            # Before the first probe or mkdir: a missing library is a
            # configuration error with nothing on disk (#13 item 1), and so
            # is what a source can only check by reading a file (an S3
            # profile, a token file, the CA bundle: #11 item 12).
            check_libraries(prepared.source)
            prepared.source.preflight()
        if config.refresh_policy == "OnChange":
            effects.log.info("revalidate", messages.REVALIDATING)
            prepared = revalidate(config, prepared, session)
        verification = None
        if config.signing is not None:
            # #34: the signed digests become the pins before anything is
            # fetched (staging/signed.py: imported only with an anchor).
            from llmkube_stager.staging.signed import gate

            prepared, verification = gate(config, config.signing, prepared, effects.log)
        check_plan(prepared, effects.log)
        if not prepared.plan.writes and not (pending and prepared.strategy.may_write):
            # Warm start: no lock, no mkdir, no sweep (spec §8.4, §9.3); a
            # set a reader would refuse is not served either (#21 items 3, 4).
            if prepared.mode.judges_set:
                refuse_unwhole(prepared, commits=not _all_verified(config, prepared))
            results = execute(session, work_of(prepared), prepared.plan)
        else:
            from llmkube_stager.staging.write import write  # the write path begins

            results = write(config, effects, prepared, session)
        prepared.mode.finish(root, session, may_write=prepared.strategy.may_write)
        if verification is not None and prepared.strategy.may_write:
            _record_verification(prepared, verification, results)
        if _seeds(config, session, results):
            # docs/mirror.md: only what this run published verified, whole.
            from llmkube_stager.mirror.seed import seed

            seed(session.fetcher(prepared.source), prepared.manifest, effects.log, effects.sleep)
        if mixed and all(r.decision is not Decision.KEEP for r in results):
            # Every file proven or staged from one commit: the entries this
            # run found are answered (one written since is not among them).
            writers.clear(root, seen)
    finally:
        session.close()
    return prepared, Outcome(results, effects.monotonic() - prepared.started_s)


Begin = Callable[[Config, Effects, Prepared, Session], Prepared]


def _mode_of(config: Config) -> tuple[RunMode, Begin]:
    """The run's mode, chosen once (#32 item 3, staging/mode.py), and how
    it begins: a share of a sharded prefetch lists the model and takes its
    files; a writer of the whole model waits for a live writer's publish."""
    if config.shards > 1:
        return OneShare.unlisted(config.shard_index, config.shards), _take_share
    return WHOLE_MODEL, _wait_for_writers


def _mixed_to_settle(prepared: Prepared) -> str:
    """Why the writers' entries refuse the model, when this run settles it
    (cache/writers.py): a writer of the whole model (a share stages only
    its files: it cannot prove the set)."""
    if not (prepared.mode.judges_set and prepared.strategy.may_write):
        return ""
    return prepared.record.mixed


def _wait_for_writers(
    config: Config, effects: Effects, prepared: Prepared, session: Session
) -> Prepared:
    """A writer of the whole model rolls forward only a dead writer's
    publish (#21 item 5, staging/interrupted.py)."""
    if not prepared.strategy.may_write:
        return prepared
    return wait_for_live_publishes(config, effects, prepared)


def _take_share(config: Config, effects: Effects, prepared: Prepared, session: Session) -> Prepared:
    """List the model, take this pod's share, record it (staging/share.py).
    A Hugging Face share lists at the one commit its Job agreed on (#21
    item 4): a retried pod too."""
    claim = None
    root = prepared.manifest.root
    if has_commits(prepared.manifest.kind) and prepared.strategy.may_write:
        ensure_dir(root, root, "")  # the claim's directory
        share, claim = agree_share(
            config,
            prepared.source,
            prepared.manifest,
            session,
            kept_commit(config, prepared),
        )
    else:
        share = take_share(config, prepared.source, prepared.manifest, session)
    if prepared.strategy.may_write:
        ensure_dir(root, root, "")
        record_share(root, share, session, claim)
    return replan(config, replace(prepared, mode=OneShare(share, claim)))


def _record_verification(
    prepared: Prepared, verification: Verification, results: tuple[FileResult, ...]
) -> None:
    """After the last rename: the set in place is the verified one (#34
    item 3). Until then the old record stays: it names the old digests, which
    new files' stamps do not answer (a reader refuses them), and it keeps a
    refused refresh's old version serving. A kept old copy (OnChange) is not
    what was verified: the old record stays."""
    if any(r.decision is Decision.KEEP for r in results):
        return
    from llmkube_stager.cache.sigrecord import write_verification
    from llmkube_stager.staging.signed import signature_record

    write_verification(signature_record(prepared), verification)


def _seeds(config: Config, session: Session, results: tuple[FileResult, ...]) -> bool:
    """This pod seeds the mirror: a seeder of the whole model whose cache
    holds the current version (a kept old copy is not what the origin has)."""
    mirror = config.mirror
    if mirror is None or not mirror.publish or not session.over_whole_model:
        return False
    return all(r.decision is not Decision.KEEP for r in results)


def _all_verified(config: Config, prepared: Prepared) -> bool:
    """Every file of the plan was just verified against one commit: the set
    is that commit's whatever the records say, and the run records it."""
    confirmed = verified(prepared)
    return config.refresh_policy == "OnChange" and all(
        a.rel in confirmed for a in prepared.plan.actions
    )


def _verify_pvc(prepared: Prepared, effects: Effects) -> Outcome:
    """pvc:// never downloads: the mounted file must exist, be readable and
    match its pin; no stamp is written on the read-only claim (spec §3.5)."""
    from llmkube_stager.sources.local import stat_source

    file = prepared.manifest.files[0]
    stat_source(file.dest)
    if prepared.cache.files[file.rel].pin is PinState.MISMATCH:
        if file.signed:
            raise SignatureError(
                f"{file.rel} does not have the sha256 its signature gives it: the pre-staged "
                f"model {file.dest} was changed since it was signed",
                file=file.rel,
                remedy=REMEDY_SIGNATURE_FILES,
            )
        raise TransferError(
            f"SHA256 mismatch for the pre-staged model {file.dest}",
            reason=Reason.CHECKSUM_MISMATCH,
            file=file.rel,
        )
    effects.log.info("pvc_verified", f"Pre-staged model {file.dest} verified", file=file.rel)
    results = (FileResult(file.rel, Decision.REUSE),)
    return Outcome(results, effects.monotonic() - prepared.started_s)
