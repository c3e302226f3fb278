"""The run record of a model directory, and the only reader and writer of
its files: what the writers of the directory recorded about their runs.

On disk, one JSON object per writer (CONTRACT §4): `.llmkube-validators`
for a writer of the whole model, `.llmkube-validators.<i>-of-<n>` for each
share of a sharded prefetch (#16 item 4). It maps each file's rel to the
origin validator of the staged copy, and holds run keys that no rel can
take (a rel never starts with "/"):

- `/revision`, `/commit`: the revision asked for and the commit this
  writer's files come from, recorded before its first publish (#10
  defect 11: an interrupted run is finished from the same commit);
- `/publishing`: the intent of a publish in progress, the files about to
  be renamed into place (`[{"rel", "partial", "size", "validator"}]`),
  written before the first rename and cleared after the last, so a writer
  killed in between is rolled forward by the next one and a reader does not
  take a half-published set for a whole one (#10 defect 13);
- `/source`: the source the writer staged from, as `model_source_id`
  shows it (no credentials, query or fragment): a directory holds one
  source's model, and a run of another is refused (#46 item 2);
- `/over`: a run over the whole model, the shares' commits it superseded
  (`{share id: commit}`, #21 item 4);
- a share's `/view`, `/claim`, `/complete`: the digest of the listing it
  assigned its files from, and the id of the Job's commit claim it listed
  under and completed under (#21 item 4).

Why a file per share: a writer reads, merges and renames over its record;
N pods of an Indexed Job doing that to one file lose each other's keys,
and no lock excludes them (flock does not across FUSE nodes). Every share
also writes `.llmkube-shards` (the count, the same bytes from every pod),
so a reader finds the shares' files with one open, and a model never
sharded costs one failed open. A file's validator comes from the record
written last (a later unsharded run rewrites the main file, a later
sharded run its share's).

Beside them, the entries of the writers at work where no lock excludes
them (cache/writers.py, #29 item 1): the record read here carries them, so
that every reader judges them with the rest (`RunRecord.mixed`).

In memory the record is typed (`RunRecord`, `WriterRun`, `PublishEntry`);
one reader merges the files (`read_run_record`), one writer updates one
writer's file (`write_run`). The commit a sharded Job's shares agree on
has a file of its own (cache/jobclaim.py).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from llmkube_stager.cache.records import write_atomic
from llmkube_stager.cache.safeio import read_small
from llmkube_stager.cache.writers import WriterEntry, conflict, read_writers
from llmkube_stager.config import MAX_SHARDS
from llmkube_stager.errors import InvalidFileSet
from llmkube_stager.layout import SHARDS_NAME, VALIDATORS_NAME, parse_file_list
from llmkube_stager.share import share_id

MAIN = ""  # the writer of the whole model; a share's id is "<i>-of-<n>"
_MAX_RECORD_BYTES = 1 << 20
_MAX_SHARDS_BYTES = 32
# The run keys of a writer's record, by WriterRun field.
_KEYS = {
    "revision": "/revision",
    "commit": "/commit",
    "intent": "/publishing",
    "over": "/over",
    "view": "/view",
    "claim": "/claim",
    "complete": "/complete",
    "source": "/source",
}


@dataclass(frozen=True)
class PublishEntry:
    """One file of a publish in progress: its partial (a name beside the
    destination) holds `size_bytes` bytes of version `validator`."""

    rel: str
    partial: str
    size_bytes: int
    validator: str = ""

    def partial_path(self, root: str) -> str:
        return os.path.join(os.path.dirname(os.path.join(root, self.rel)), self.partial)


@dataclass(frozen=True)
class WriterRun:
    """The run keys one writer recorded ("" where it recorded none)."""

    writer: str = MAIN
    revision: str = ""
    commit: str = ""
    intent: tuple[PublishEntry, ...] = ()
    over: Mapping[str, str] = field(default_factory=dict)
    view: str = ""
    claim: str = ""
    complete: str = ""
    source: str = ""


@dataclass(frozen=True)
class RunRecord:
    """Every writer's record of a model directory, merged."""

    validators: Mapping[str, str] = field(default_factory=dict)
    runs: Mapping[str, WriterRun] = field(default_factory=dict)
    # The writers at work where no lock excludes them (#29 item 1).
    writers: tuple[WriterEntry, ...] = ()

    def run(self, writer: str = MAIN) -> WriterRun:
        return self.runs.get(writer) or WriterRun(writer)

    def publishing(self) -> list[WriterRun]:
        """The writers with a publish in progress, the unsharded one first."""
        return [self.runs[w] for w in sorted(self.runs) if self.runs[w].intent]

    @property
    def source(self) -> str:
        """The source the directory's model was staged from (#46 item 2):
        the unsharded writer's, else a share's; "" where none was recorded
        (the scripts', or an agent's before #46)."""
        recorded = [self.run().source] + [self.runs[w].source for w in sorted(self.runs) if w]
        return next((s for s in recorded if s), "")

    def share_commits(self) -> dict[str, str]:
        """The shares' recorded commits, for an unsharded run's `over`."""
        return {w: run.commit for w, run in self.runs.items() if w and run.commit}

    def commits(self) -> dict[str, str]:
        """writer -> the commit its files come from. A share's commit that
        an unsharded run over the whole model superseded no longer counts;
        the unsharded writer's no longer counts once every share of the
        count recorded a commit since (#21 item 4)."""
        over = self.run().over
        live = {w: c for w, c in self.share_commits().items() if over.get(w) != c}
        if self.run().commit and not _covers_all(live):
            live[MAIN] = self.run().commit
        return live

    @property
    def mixed(self) -> str:
        """Why the writers' entries say the files may come from two
        commits (#29 item 1); "" when they do not."""
        if not self.writers:
            return ""
        return conflict(self.writers, set(self.commits().values()))

    def revisions(self) -> set[str]:
        return {run.revision for run in self.runs.values() if run.revision}


def _covers_all(shares: Mapping[str, str]) -> bool:
    """Every share of one count is there (`<i>-of-<n>` for each i < n)."""
    counts = {sid.rsplit("-of-", 1)[-1] for sid in shares}
    if len(counts) != 1:
        return False
    count = counts.pop()
    return count.isdigit() and {f"{i}-of-{count}" for i in range(int(count))} <= set(shares)


# -- reading ---------------------------------------------------------------------------


def record_name(writer: str) -> str:
    return f"{VALIDATORS_NAME}.{writer}" if writer else VALIDATORS_NAME


def read_run_record(root: str) -> RunRecord:
    """Every writer's record of the directory, merged; a missing, invalid or
    unreadable file is an empty record (a warm start stays a hit; the writer
    refuses to replace what it cannot read: write_run)."""
    shards = shard_count(root)
    writers = [MAIN] + ([share_id(i, shards) for i in range(shards)] if shards > 1 else [])
    validators: dict[str, str] = {}
    runs: dict[str, WriterRun] = {}
    for writer in sorted(writers, key=lambda w: _mtime(root, record_name(w))):
        doc, _unreadable = _read_doc(root, record_name(writer))
        validators.update({k: v for k, v in doc.items() if not k.startswith("/")})
        run = _parse_run(writer, doc)
        if run != WriterRun(writer):
            runs[writer] = run
    return RunRecord(validators, runs, read_writers(root))


def _mtime(root: str, name: str) -> float:
    with contextlib.suppress(OSError):
        return os.lstat(os.path.join(root, name)).st_mtime
    return 0.0


def _read_doc(root: str, name: str) -> tuple[dict[str, str], bool]:
    """(the file's string values, unreadable): bookkeeping is read as every
    record is (cache/safeio.py): a regular file, whole, at most 1 MiB."""
    small = read_small(os.path.join(root, name), _MAX_RECORD_BYTES)
    if small.data is None:
        return {}, small.unreadable
    try:
        doc = json.loads(small.data)
    except (ValueError, RecursionError):
        return {}, False
    if not isinstance(doc, dict):
        return {}, False
    return {str(k): v for k, v in doc.items() if isinstance(v, str)}, False


def _parse_run(writer: str, doc: Mapping[str, str]) -> WriterRun:
    text = {name: doc.get(key, "") for name, key in _KEYS.items()}
    return WriterRun(
        writer,
        revision=text["revision"],
        commit=text["commit"],
        intent=_parse_intent(text["intent"]),
        over=_parse_over(text["over"]),
        view=text["view"],
        claim=text["claim"],
        complete=text["complete"],
        source=text["source"],
    )


def _parse_intent(raw: str) -> tuple[PublishEntry, ...]:
    doc = _json(raw)
    if not isinstance(doc, list):
        return ()
    entries = (_entry(e) for e in doc if isinstance(e, dict))
    return tuple(e for e in entries if e is not None)


def _entry(entry: dict[str, object]) -> PublishEntry | None:
    """The publish entry `entry` records; None for one no writer wrote."""
    rel, partial, size = entry.get("rel"), entry.get("partial"), entry.get("size")
    if not (
        isinstance(rel, str)
        and _is_model_path(rel)
        and isinstance(partial, str)
        and "/" not in partial
        and isinstance(size, int)
    ):
        return None
    return PublishEntry(rel, partial, size, str(entry.get("validator") or ""))


def _is_model_path(rel: str) -> bool:
    """A path MODEL_FILES could hold, as the listing record checks its names
    (cache/listrec.py): an entry climbing out of the model (`../x`) was
    looked up, opened and flocked outside the cache by every reader, and
    refused the whole model for a file that is none of it. A `x.sha256`
    is one (KServe mode lists such files, #31 item 4); a stage-mode
    manifest never holds one, so its entry is never looked at there."""
    if "\n" in rel:
        return False
    try:
        parse_file_list(rel, stamps_beside=False)
    except InvalidFileSet:
        return False
    return True


def _parse_over(raw: str) -> dict[str, str]:
    doc = _json(raw)
    if not isinstance(doc, dict):
        return {}
    return {str(k): v for k, v in doc.items() if isinstance(v, str)}


def _json(raw: str) -> object:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


# -- writing ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Update:
    """What one atomic write sets in a writer's record; None keeps a run
    key as it is, an empty value clears it (an empty intent: the publish
    is over)."""

    validators: Mapping[str, str] = field(default_factory=dict)
    revision: str | None = None
    commit: str | None = None
    intent: tuple[PublishEntry, ...] | None = None
    over: Mapping[str, str] | None = None
    view: str | None = None
    claim: str | None = None
    complete: str | None = None
    source: str | None = None

    def __or__(self, other: Update) -> Update:
        """Both in one write (`other` wins where both set a key)."""
        keys = {name: getattr(other, name) for name in _KEYS if getattr(other, name) is not None}
        return replace(self, validators={**self.validators, **other.validators}, **keys)

    def run_keys(self) -> dict[str, str]:
        encoded: dict[str, str] = {}
        for name, key in _KEYS.items():
            value = getattr(self, name)
            if value is not None:
                encoded[key] = _encode(value)
        return encoded

    def changes(self, record: RunRecord, writer: str) -> bool:
        """Whether writing it would change what `record` says: the files'
        validators as readers see them, the run keys as `writer` has them."""
        if any(record.validators.get(k) != v for k, v in self.validators.items()):
            return True
        run = record.run(writer)
        return any(
            getattr(self, name) is not None and getattr(self, name) != getattr(run, name)
            for name in _KEYS
        )

    def __bool__(self) -> bool:
        return bool(self.validators or self.run_keys())


def _encode(value: object) -> str:
    """A run key's value as recorded: the intent (the one tuple) and the
    names over (the one mapping) as JSON, the others as they are."""
    if isinstance(value, tuple):
        entries = [
            {"rel": e.rel, "partial": e.partial, "size": e.size_bytes, "validator": e.validator}
            for e in value
        ]
        return json.dumps(entries, sort_keys=True, separators=(",", ":")) if entries else ""
    if isinstance(value, Mapping):
        return json.dumps(dict(value), sort_keys=True) if value else ""
    return str(value)


def write_run(root: str, writer: str, update: Update) -> None:
    """Merge `update` into `writer`'s own record and write it atomically (a
    concurrent reader sees the old record or the new one). A record this
    uid cannot read is not ours to replace (PermissionError). Never a merge
    between writers: each share writes its own file."""
    name = record_name(writer)
    current, unreadable = _read_doc(root, name)
    if unreadable:
        path = os.path.join(root, name)
        raise PermissionError(errno.EACCES, "not readable by this uid; not replaced", path)
    merged = {**current, **update.validators, **update.run_keys()}
    data = json.dumps(merged, sort_keys=True, separators=(",", ":")).encode()
    write_atomic(os.path.join(root, name), data)


def write_shard_count(root: str, shards: int) -> None:
    write_atomic(os.path.join(root, SHARDS_NAME), str(shards).encode("ascii"))


def shard_count(root: str) -> int:
    """The count, read as every other record is (#21 item 6): a regular
    file only (a FIFO there hung every stage, warm starts included), never
    through a symlink, whole and small (a prefix of a larger file is not
    its content), and at most the shard limit (a count of 3,000,000 made a
    warm start look for three million share records). Anything else: not
    sharded (the main record alone is read)."""
    small = read_small(os.path.join(root, SHARDS_NAME), _MAX_SHARDS_BYTES)
    if small.data is None:
        return 0
    text = small.data.decode("ascii", "replace").strip()
    if not (text.isascii() and text.isdigit()):
        return 0
    count = int(text)
    return count if count <= MAX_SHARDS else 0
