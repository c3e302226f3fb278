"""The commit a sharded Hugging Face prefetch Job agreed on (#21 item 4):
`.llmkube-validators.job-commit`, JSON `{"revision", "commit", "id",
"job"}`.

The shares of a Job have no coordinator, and a branch may move between two
shares' listings: then share 0 staged commit 1 and share 1 commit 2, the set
mixed. So the first share to resolve the revision creates the Job's claim
(O_CREAT|O_EXCL: one creator wins, where the filesystem makes exclusive
creation atomic) and every share stages the claimed commit, listing again
if it had resolved another. The claim lasts until every share recorded its
share whole under it (the run record's `complete`, cache/runrecord.py); the
next Job then resolves anew. Where exclusive creation is not atomic across
nodes (an object store's FUSE driver), two first shares may both believe
they won: their listings differ, the last to finish fails
ModelSourceChanged as before, and its retry reads the one claim that
remains: the Job converges.

A claim says which Job made it (#29 item 6): `job` is the Job's identity
the pod was given (LLMKUBE_JOB_ID: its `batch.kubernetes.io/controller-uid`
label through the downward API). A Job that dies before every share is
whole leaves its claim; a retried pod of the same Job keeps it, a pod of
another Job resolves the revision anew. A claim without `job` (an agent
before #29, or a Job not given the variable) is a Job's whose identity
is unknown: a pod that has one takes it for another Job's; a pod without
one takes it as its own Job's, as before (the manifest should set it).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass

from llmkube_stager.cache.records import FILE_MODE
from llmkube_stager.cache.safeio import read_small
from llmkube_stager.errors import REMEDY_LEADS_OUTSIDE, CacheError, Reason
from llmkube_stager.layout import VALIDATORS_NAME

# A reserved name (`.llmkube-validators.` + anything is never a model file).
JOB_COMMIT_NAME = VALIDATORS_NAME + ".job-commit"
# A revision (a branch name, up to 255 bytes), a commit, an id, a Job's
# identity (up to 253) and the JSON around them.
_MAX_JOB_COMMIT_BYTES = 1024
# A claim is created, then written: a reader that finds it empty waits for
# its bytes this long before it takes it for a crashed writer's debris.
_CLAIM_WRITE_S = 2.0
_CLAIM_POLL_S = 0.05


@dataclass(frozen=True)
class JobCommit:
    revision: str
    commit: str
    id: str
    job: str = ""  # the Job that made it ("" unknown: #29 item 6)

    def encode(self) -> bytes:
        doc = {"revision": self.revision, "commit": self.commit, "id": self.id}
        if self.job:
            doc["job"] = self.job
        return json.dumps(doc, sort_keys=True).encode()

    def of_another_job(self, job: str) -> bool:
        """Made by another Job than `job` (this pod's; "" when it was not
        told): a claim of unknown identity is another Job's only to a pod
        that knows its own."""
        return bool(job) and self.job != job


def read_job_commit(
    root: str, sleep: Callable[[float], None], monotonic: Callable[[], float]
) -> JobCommit | None:
    """The Job's claim; None when there is none. One being written (empty
    or cut short) is waited for a moment; one still unreadable then is a
    crashed creator's and is removed (a new claim is made)."""
    path = os.path.join(root, JOB_COMMIT_NAME)
    deadline = monotonic() + _CLAIM_WRITE_S
    while True:
        small = read_small(path, _MAX_JOB_COMMIT_BYTES)
        if small.absent:
            return None
        claim = _parse_claim(small.data)
        if claim is not None:
            return claim
        if monotonic() >= deadline:
            with contextlib.suppress(OSError):
                os.unlink(path)
            return None
        sleep(_CLAIM_POLL_S)


def _parse_claim(data: bytes | None) -> JobCommit | None:
    if not data:
        return None
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    values = [doc.get(k) for k in ("revision", "commit", "id")]
    if not all(isinstance(v, str) and v for v in values):
        return None
    job = doc.get("job", "")
    if not isinstance(job, str):
        return None
    revision, commit, claim_id = (str(v) for v in values)
    return JobCommit(revision, commit, claim_id, job)


def claim_job_commit(
    root: str,
    wanted: JobCommit,
    sleep: Callable[[float], None],
    monotonic: Callable[[], float],
) -> JobCommit:
    """Make `wanted` the Job's claim unless another share made one first:
    the claim that holds (ours or the winner's)."""
    path = os.path.join(root, JOB_COMMIT_NAME)
    for _attempt in range(3):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
        except FileExistsError:
            held = read_job_commit(root, sleep, monotonic)
            if held is not None:
                return held
            continue  # debris removed: try again
        try:
            data = wanted.encode()
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        return wanted
    # Something that is no claim and cannot be removed holds the name (a
    # directory): returning `wanted` here let every share take its own
    # commit, the two-commit set the claim exists to prevent (#21 review).
    raise CacheError(
        f"{path} is not a claim of a sharded Job's commit and cannot be replaced",
        reason=Reason.CACHE_UNWRITABLE,
        remedy=REMEDY_LEADS_OUTSIDE,
    )


def drop_job_commit(root: str, claim: JobCommit) -> None:
    """The Job is done: the next one resolves the revision anew. Only the
    claim of this Job is removed (a later Job may have made its own)."""
    small = read_small(os.path.join(root, JOB_COMMIT_NAME), _MAX_JOB_COMMIT_BYTES)
    if _parse_claim(small.data) == claim:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(root, JOB_COMMIT_NAME))


def new_claim_id() -> str:
    import secrets

    return secrets.token_hex(8)
