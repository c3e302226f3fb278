"""The planner's inputs, built one way for every test of it (#23 item 5):
the decision tables (tests/unit/test_plan.py, tests/policy/test_plan_onchange.py),
the property tests (tests/torture/test_properties.py) and the runs that swap
the filesystem probe (`Pod.stage(fs=...)`, tests/policy).

`make_plan` is pure (llmkube_stager/plan.py): it reads the manifest's kind
(wording), whether it is multi-file, each file's rel and pin, the cache's
files and the filesystem's capabilities; never a URL, a destination or a
path. So one model root and one base URL serve every table row.

A table's file is `local_file(state)`: COMPLETE is 1000 bytes with a record
of 1000; MISMATCH 5 bytes whose record says 23 (scenario 28); LEGACY 1000
bytes without a record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from llmkube_stager.model import (
    CacheState,
    FsInfo,
    LocalFile,
    LocalState,
    Manifest,
    PinState,
    Plan,
    Remote,
    RemoteFile,
    Role,
)
from llmkube_stager.plan import make_plan

ROOT = "/models/0123456789abcdef"
BASE_URL = "https://huggingface.co/org/repo/resolve/main/"
REL = "model.safetensors"
SIZE = 1000
PIN = "ab" * 32


# -- filesystems (what cache/fs.py's probe reports, spec §9.2) ---------------------------------


def ext4_fs(path: str = ROOT) -> FsInfo:
    return FsInfo(path, "ext4", "ext4", is_fuse=False, read_only=False, free_bytes=10**12)


def fuse_fs(path: str = ROOT) -> FsInfo:
    """What the probe reports on a BlobFuse mount."""
    return FsInfo(path, "fuse.blobfuse2", "blobfuse2", is_fuse=True, read_only=False, free_bytes=0)


def unknown_fs(path: str = ROOT) -> FsInfo:
    """Nothing could be determined (treated as a filesystem where flock works,
    spec §16 item 3)."""
    return FsInfo(path, "unknown", "unknown", is_fuse=None, read_only=False, free_bytes=None)


def read_only_fs(path: str = ROOT) -> FsInfo:
    return FsInfo(path, "ext4", "ext4", is_fuse=False, read_only=True, free_bytes=10**12)


EXT4 = ext4_fs()
FUSE = fuse_fs()
UNKNOWN = unknown_fs()
READ_ONLY = read_only_fs()


# -- the cache and the manifest -------------------------------------------------------------------


def local_file(
    state: LocalState,
    rel: str = REL,
    *,
    pin: PinState = PinState.UNPINNED,
    marker: bool = False,
) -> LocalFile:
    """A file of the cache in `state`, with the sizes the tables use."""
    if state is LocalState.COMPLETE:
        return LocalFile(rel, state, SIZE, SIZE, pin=pin, marker=marker)
    if state is LocalState.MISMATCH:
        return LocalFile(rel, state, 5, 23, pin=pin, marker=marker)
    if state is LocalState.LEGACY:
        return LocalFile(rel, state, SIZE, None, pin=pin, marker=marker)
    return LocalFile(rel, state, pin=pin, marker=marker)


def cache_of(files: Iterable[LocalFile]) -> CacheState:
    by_rel = {f.rel: f for f in files}
    present = any(f.state is not LocalState.MISSING for f in by_rel.values())
    return CacheState(root_exists=present, files=by_rel)


def manifest_of(
    *files: LocalFile, multi: bool | None = None, pinned: bool = False, kind: str = "hf"
) -> Manifest:
    """The manifest listing these files in this order (multi-file when more
    than one, unless told), each pinned to PIN when `pinned`."""
    remote = tuple(
        RemoteFile(f.rel, BASE_URL + f.rel, f"{ROOT}/{f.rel}", sha256=PIN if pinned else None)
        for f in files
    )
    multi_file = len(remote) > 1 if multi is None else multi
    return Manifest(kind, ROOT, remote, multi_file, "hf://org/repo")  # type: ignore[arg-type]


def plan_of(
    *files: LocalFile,
    remote: Mapping[str, Remote] | None = None,
    fs: FsInfo = EXT4,
    role: Role = "serving",
    multi: bool | None = None,
    policy: str = "IfNotPresent",
    pinned: bool = False,
    kind: str = "hf",
) -> Plan:
    """`make_plan` of these files of the cache, listed in this order."""
    manifest = manifest_of(*files, multi=multi, pinned=pinned, kind=kind)
    return make_plan(manifest, cache_of(files), fs, role, policy, remote)  # type: ignore[arg-type]
