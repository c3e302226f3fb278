"""Value types passed between the stages of the pipeline.

env -> Config -> Manifest -> FsInfo + CacheState -> Plan -> actions -> Outcome

Each class has a docstring: without one, dataclass builds one from the
class's signature at import, on every warm start (#32 item 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Literal

from llmkube_stager.errors import Reason, SourceKind

Role = Literal["serving", "stager"]
LockScope = Literal["cross-node", "node-local", "unknown"]


@dataclass(frozen=True)
class RemoteFile:
    """One file of the model: where it comes from and where it goes."""

    rel: str
    url: str
    dest: str
    # Known before any transfer only when the source's metadata says so (HF).
    size_bytes: int | None = None
    sha256: str | None = None
    # #34: `sha256` is the digest a verified signature gives the file (a
    # mismatch is ModelSignatureInvalid, not a pin's checksum mismatch).
    signed: bool = False


@dataclass(frozen=True)
class Manifest:
    """What a source says the model is: its files, where they come from,
    and the source as a message names it."""

    kind: SourceKind
    root: str
    files: tuple[RemoteFile, ...]
    multi_file: bool
    display_source: str

    def file(self, rel: str) -> RemoteFile:
        return self._by_rel[rel]

    @cached_property
    def _by_rel(self) -> dict[str, RemoteFile]:
        # A lookup per file was a scan of the list: O(files^2) (#16).
        return {item.rel: item for item in self.files}


@dataclass(frozen=True)
class FsInfo:
    """What the cache's filesystem can do, decided once (spec §9.2)."""

    path: str
    fstype: str
    driver: str
    is_fuse: bool | None  # None: could not be determined
    read_only: bool
    free_bytes: int | None
    # O_DIRECT is a plain block I/O path here (ext4, xfs, btrfs: cache/fs.py).
    direct_io_ok: bool = False

    @property
    def lock_scope(self) -> LockScope:
        if self.is_fuse is None:
            return "unknown"
        # flock does not exclude across nodes on FUSE (LLMKube #2158, #2254).
        return "node-local" if self.is_fuse else "cross-node"

    @property
    def free_space_meaningful(self) -> bool:
        # FUSE drivers report invented capacities (BlobFuse: 0 or huge).
        return self.is_fuse is False and self.free_bytes is not None


@dataclass(frozen=True)
class Strategy:
    """Every decision that depends on the filesystem and the pod's role,
    made once (plan.strategy_for) and read by the planner, the stage
    orchestration and the executor (spec §9.3)."""

    may_write: bool
    refusal: Reason | None = None  # why not, when it may not write
    why: str = ""
    keep_why: str = ""
    # Writers take the directory flock off FUSE, and where the type is
    # unknown (the previous behavior, spec §16 item 3); on FUSE nobody does.
    take_lock: bool = False
    # The flock is believed to exclude across nodes (not FUSE): writers
    # re-plan under it, and partials may be adopted without an idle wait.
    lock_excludes: bool = False
    direct_io: bool = False


class LocalState(StrEnum):
    MISSING = "missing"
    COMPLETE = "complete"  # size equals its own valid size record
    MISMATCH = "mismatch"  # size differs from its own valid size record
    LEGACY = "legacy"  # present, no valid record (cache from before LLMKube PR #2185)
    # Not a regular file, or reached through a symlinked directory (#11).
    NOT_A_FILE = "not-a-file"
    # Its size record, or a directory on its path, is there but this uid
    # cannot read it: unusable, and never overwritten (#11 items 5, 6).
    UNREADABLE = "unreadable"


class PinState(StrEnum):
    UNPINNED = "unpinned"
    STAMP_HIT = "stamp-hit"  # stamp triple matches: accepted without reading
    HASHED = "hashed"  # read and verified; the stamp is (re)written where allowed
    MISMATCH = "mismatch"  # the bytes do not match the pin
    ABSENT = "absent"  # pinned but no file to check


@dataclass(frozen=True)
class LocalFile:
    """What the cache holds for one file, read locally (cache/state.py)."""

    rel: str
    state: LocalState
    size_bytes: int | None = None
    record_bytes: int | None = None
    pin: PinState = PinState.UNPINNED
    # A rejection marker exists for the EXPECTED digest (spec §4.2).
    marker: bool = False
    # The origin validator this copy was staged from, when recorded.
    validator: str | None = None
    # (dev, ino, size, mtime) of the inode whose bytes were hashed and found
    # right (PinState.HASHED): a stamp is written only for that inode.
    hashed_as: tuple[int, int, int, float] | None = None
    # The evidence of those bytes (cache/evidence.py), read through the
    # descriptor that hashed them: what the stamp of `hashed_as` carries.
    hashed_evidence: str | None = None
    # Why the state is what it is, where a reader needs more than the state
    # (an invalid record's defect, what is not a regular file or unreadable).
    detail: str = ""

    @property
    def present(self) -> bool:
        return self.state not in (
            LocalState.MISSING,
            LocalState.NOT_A_FILE,
            LocalState.UNREADABLE,
        )

    @property
    def usable(self) -> bool:
        """Passes the local checks: its pin where pinned (which outranks the
        size record), else its own size record or, legacy, no record."""
        if not self.present or self.pin is PinState.MISMATCH:
            return False
        if self.pin in (PinState.STAMP_HIT, PinState.HASHED):
            return True
        return self.state in (LocalState.COMPLETE, LocalState.LEGACY)

    @property
    def record_stale(self) -> bool:
        return self.present and self.record_bytes != self.size_bytes


@dataclass(frozen=True)
class CacheState:
    """The model's directory as read before the plan, by relative path."""

    root_exists: bool
    files: dict[str, LocalFile] = field(default_factory=dict)


@dataclass(frozen=True)
class Remote:
    """What an OnChange probe learned: whether the origin answered at all,
    and the size it announced (absent or 0 is unknown, spec §8.1 CL0)."""

    answered: bool
    size_bytes: int | None = None
    detail: str = ""
    validator: str | None = None  # ETag / HF blob id: a same-size change shows


class Decision(StrEnum):
    REUSE = "reuse"  # passes its checks (and, OnChange, upstream unchanged)
    KEEP = "keep"  # kept as-is without proof from upstream (legacy, offline)
    FETCH = "fetch"  # missing: stage it; failure fails the run
    REPAIR = "repair"  # fails its local checks: stage again; failure fails
    REFRESH = "refresh"  # OnChange, upstream changed: stage; failure keeps
    FAIL = "fail"  # cannot be made servable here (refusal, known-bad origin)


@dataclass(frozen=True)
class Action:
    """The plan's decision for one file, and why."""

    rel: str
    decision: Decision
    why: str
    message: str = ""  # the log line of this decision (spec §13)
    backfill_record: bool = False
    write_stamp: bool = False
    failure: Reason | None = None
    remedy: str = ""  # a cause-specific remedy for a FAIL, where the reason's misleads
    # A line logged beside `message`, never appended to it (the scripts'
    # lines are exact): what an OnChange verdict rested on (#46 item 1).
    note: str = ""

    @property
    def transfers(self) -> bool:
        return self.decision in (Decision.FETCH, Decision.REPAIR, Decision.REFRESH)


@dataclass(frozen=True)
class Plan:
    """Every file's action; whether this pod may write the cache at all."""

    actions: tuple[Action, ...]
    may_write: bool
    warnings: tuple[str, ...] = ()

    @property
    def needs_network(self) -> bool:
        return any(a.transfers for a in self.actions)

    @property
    def writes(self) -> bool:
        return any(a.transfers or a.backfill_record for a in self.actions)


@dataclass(frozen=True)
class FileResult:
    """What a run did with one file."""

    rel: str
    decision: Decision
    bytes_fetched: int = 0


@dataclass(frozen=True)
class Outcome:
    """What a run did: each file's result and the seconds it took."""

    results: tuple[FileResult, ...]
    seconds: float

    def count(self, *decisions: Decision) -> int:
        return sum(1 for r in self.results if r.decision in decisions)

    @property
    def bytes_fetched(self) -> int:
        return sum(r.bytes_fetched for r in self.results)
