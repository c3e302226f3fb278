"""A share of a sharded prefetch (#16 item 4): list the model, take this
pod's files (share.py, the pure assignment), keep to them.

The listing is what every pod of the Indexed Job sees alike: each file's
size from the source's probe (Hugging Face: the hub's listing at the
resolved commit, one API call; S3: a HEAD per object; plain HTTP: a HEAD per
file), asked with files in flight. A probe that fails fails the pod before
anything is written: a pod that assigned from a listing with a hole in it
could skip a file no other pod takes. The probes are the transfers' own
(Session.metas), so a file of this share is not asked twice.

Each share records, in its own run record (cache/runrecord.py), the
digest of the listing it assigned from; at the end it compares the digests
the other shares recorded. A share that differs (the origin changed between
the listings, or a hub revision moved to another commit) fails the pod with
ModelSourceChanged instead of reporting success for a model that may miss a
file: the Job then fails, and running it again lists anew.

A Hugging Face revision is resolved once for the whole Job (#21 item 4):
the first share to resolve it claims the commit (cache/jobclaim.py), every
other share lists at the claimed commit, a share that had resolved another
lists again, and a retried share takes the claim too. The claim goes when
every share is whole under it; the next Job resolves the revision anew,
also when the Job before died with its claim in place: a claim names its
Job (LLMKUBE_JOB_ID, #29 item 6).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmkube_stager.acting.inflight import run_in_flight
from llmkube_stager.acting.session import Session
from llmkube_stager.cache.jobclaim import (
    JobCommit,
    claim_job_commit,
    drop_job_commit,
    new_claim_id,
    read_job_commit,
)
from llmkube_stager.cache.runrecord import (
    RunRecord,
    Update,
    read_run_record,
    write_run,
    write_shard_count,
)
from llmkube_stager.config import Config
from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.model import Manifest, RemoteFile
from llmkube_stager.share import share_id, share_of, view_digest
from llmkube_stager.sources.base import Source


@dataclass(frozen=True)
class Share:
    index: int
    shards: int
    rels: frozenset[str]
    digest: str

    @property
    def id(self) -> str:
        return share_id(self.index, self.shards)


def take_share(config: Config, source: Source, manifest: Manifest, session: Session) -> Share:
    sizes = list_sizes(session, source, manifest, config.files_in_flight)
    commit = _commit(session)
    rels = share_of(sizes, config.shards, config.shard_index)
    digest = view_digest(sizes, config.shards, commit or "")
    share = Share(config.shard_index, config.shards, rels, digest)
    total = sum(sizes[r] or 0 for r in rels)
    session.log.info(
        "share",
        f"Share {share.id}: {len(rels)} of {len(sizes)} files, {total} bytes",
        shard=share.id,
        files=len(rels),
        size_bytes=total,
        listing=digest,
    )
    return share


def list_sizes(
    session: Session, source: Source, manifest: Manifest, limit: int
) -> dict[str, int | None]:
    files = manifest.files

    def probe(file: RemoteFile) -> int | None:
        return session.probe(source, file, manifest.root).size_bytes

    first = run_in_flight(files[:1], probe, 1)  # the fetcher, its clients, the hub's commit
    rest = run_in_flight(files[1:], probe, limit) if first[0].error is None else []
    for outcome in (*first, *rest):
        if outcome.error is not None:
            raise outcome.error
    return {f.rel: o.value for f, o in zip(files, (*first, *rest), strict=True)}


def record_share(root: str, share: Share, session: Session, claim: JobCommit | None) -> None:
    """Before this share writes anything else: how many shares there are,
    the listing this one assigned from and the Job's claim it listed at."""
    write_shard_count(root, share.shards)
    update = Update(view=share.digest, claim=claim.id if claim is not None else "")
    write_run(root, session.writer, update)


def check_views(record: RunRecord, share: Share) -> None:
    """Every share that recorded its listing saw the one this share saw."""
    mine = record.run(share.id)
    if not mine.view:
        return  # nothing recorded here (a volume this pod may not write)
    others = {
        sid: run.view
        for sid, run in record.runs.items()
        if run.view
        and sid.endswith(f"-of-{share.shards}")
        # A share that listed under another claim ran in an earlier Job
        # (#21 item 4): this Job's shares all list at this claim's commit.
        and (not mine.claim or run.claim == mine.claim)
    }
    differ = sorted(sid for sid, digest in others.items() if digest != mine.view)
    if differ:
        raise SourceError(
            f"share {share.id} assigned files from another listing of the model than "
            f"share(s) {', '.join(differ)} (the origin changed during the prefetch, or a "
            "revision moved to another commit): a file may have been assigned to no share; "
            "run the Job again (pin a commit for Hugging Face sources)",
            reason=Reason.SOURCE_CHANGED,
            answered=True,
        )


def _commit(session: Session) -> str | None:
    resolved = session.resolved()
    return resolved.commit if resolved is not None else None


def agree_share(
    config: Config,
    source: Source,
    manifest: Manifest,
    session: Session,
    candidate: str | None,
) -> tuple[Share, JobCommit | None]:
    """This pod's share, listed at the one commit the Job agreed on (#21
    item 4; cache/jobclaim.py): the claim another share made, else the
    commit this share resolved (or `candidate`: the commit the model's
    files already come from, IfNotPresent), claimed for the Job. A share
    that resolved another commit than the claim's lists again at it."""
    root, revision = manifest.root, source.revision or ""
    clock = (session.clock.sleep, session.clock.monotonic)
    held = read_job_commit(root, *clock)
    if held is not None and held.revision != revision:
        drop_job_commit(root, held)  # a Job of another revision: not this one's
        held = None
    if held is not None and held.of_another_job(config.job_id):
        # Another Job's claim (#29 item 6): it died before every share was
        # whole (a finished Job removes its claim), and this Job resolves
        # the revision anew; its own retried pods keep their claim.
        session.log.info(
            "share_commit",
            f"a claim of commit {held.commit[:12]} of {revision} by another Job "
            f"({held.job or 'unknown'}) is left; resolving {revision} anew",
            commit=held.commit,
        )
        drop_job_commit(root, held)
        held = None
    if held is not None:
        session.fetch_at(held.commit)
        try:
            return take_share(config, source, manifest, session), held
        except SourceError as exc:
            gone = session.resolved()
            if exc.reason is not Reason.SOURCE_NOT_FOUND or gone is None or gone.commit:
                raise  # a file missing at a commit the hub has: the claim stands
            # The claimed commit is gone from the hub (force-pushed away
            # after its Job died): no share can finish at it, and every
            # later Job failed at it forever (#21 review). Resolved anew.
            drop_job_commit(root, held)
            session.fetch_at(None)
    session.fetch_at(candidate)
    share = take_share(config, source, manifest, session)
    resolved = _commit(session)
    if resolved is None:
        return share, None  # a mirror without the hub API: no commit to agree on
    wanted = JobCommit(revision, resolved, new_claim_id(), config.job_id)
    claim = claim_job_commit(root, wanted, *clock)
    # A claim another Job made between our read and ours is a live Job's
    # (two Jobs at once): this share joins its commit rather than mix.
    if claim.commit != resolved:
        session.log.info(
            "share_commit",
            f"another share of the Job claimed commit {claim.commit[:12]} of {revision}; "
            "listing it instead",
            commit=claim.commit,
        )
        session.fetch_at(claim.commit)
        share = take_share(config, source, manifest, session)
    return share, claim


def finish_share(root: str, share: Share, claim: JobCommit | None, session: Session) -> None:
    """This share is whole under the Job's claim; when every share is, the
    Job is done and its claim goes (the next Job resolves anew)."""
    if claim is None:
        return
    write_run(root, session.writer, Update(complete=claim.id))
    record = read_run_record(root)
    ids = [record.run(share_id(i, share.shards)).complete for i in range(share.shards)]
    if all(found == claim.id for found in ids):
        drop_job_commit(root, claim)
