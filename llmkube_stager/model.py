"""Value types passed between the stages of the pipeline.

env -> Config -> Manifest -> FsInfo + CacheState -> Plan -> actions -> Outcome
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
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


@dataclass(frozen=True)
class Manifest:
    kind: SourceKind
    root: str
    files: tuple[RemoteFile, ...]
    multi_file: bool
    display_source: str

    def file(self, rel: str) -> RemoteFile:
        for item in self.files:
            if item.rel == rel:
                return item
        raise KeyError(rel)


@dataclass(frozen=True)
class FsInfo:
    """What the cache's filesystem can do, decided once (spec §9.2)."""

    path: str
    fstype: str
    driver: str
    is_fuse: bool | None  # None: could not be determined
    read_only: bool
    free_bytes: int | None

    @property
    def lock_scope(self) -> LockScope:
        if self.is_fuse is None:
            return "unknown"
        # flock does not exclude across nodes on FUSE (#2158, #2254).
        return "node-local" if self.is_fuse else "cross-node"

    @property
    def free_space_meaningful(self) -> bool:
        # FUSE drivers report invented capacities (BlobFuse: 0 or huge).
        return self.is_fuse is False and self.free_bytes is not None


class LocalState(StrEnum):
    MISSING = "missing"
    COMPLETE = "complete"  # size equals its own valid size record
    MISMATCH = "mismatch"  # size differs from its own valid size record
    LEGACY = "legacy"  # present, no valid record (cache from before #2185)
    NOT_A_FILE = "not-a-file"


@dataclass(frozen=True)
class LocalFile:
    rel: str
    state: LocalState
    size_bytes: int | None = None
    record_bytes: int | None = None


@dataclass(frozen=True)
class CacheState:
    root_exists: bool
    files: dict[str, LocalFile] = field(default_factory=dict)


class Decision(StrEnum):
    REUSE = "reuse"  # complete by its record: no network
    KEEP = "keep"  # legacy copy kept as-is: no network (spec §6.2 last row)
    FETCH = "fetch"  # missing: stage it
    REPAIR = "repair"  # present but not matching its own record: stage again
    REFUSE = "refuse"  # must stage but may not write here (FUSE serving pod)


@dataclass(frozen=True)
class Action:
    rel: str
    decision: Decision
    why: str
    backfill_record: bool = False
    refusal: Reason | None = None

    @property
    def transfers(self) -> bool:
        return self.decision in (Decision.FETCH, Decision.REPAIR)


@dataclass(frozen=True)
class Plan:
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
    rel: str
    decision: Decision
    bytes_fetched: int = 0


@dataclass(frozen=True)
class Outcome:
    results: tuple[FileResult, ...]
    seconds: float

    def count(self, *decisions: Decision) -> int:
        return sum(1 for r in self.results if r.decision in decisions)

    @property
    def bytes_fetched(self) -> int:
        return sum(r.bytes_fetched for r in self.results)
