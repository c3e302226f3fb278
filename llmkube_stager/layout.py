"""Pure path logic: file-list validation and every on-disk name (spec §4.2).

No I/O here. The names are the shell scripts' names so that a cache written by
either can be read by the other (CONTRACT §4).
"""

from __future__ import annotations

import functools
import posixpath
import string

from llmkube_stager.errors import InvalidFileSet

SIZE_RECORD_SUFFIX = ".llmkube-size"
STAMP_SUFFIX = ".sha256"
# `<file>.llmkube-evidence`: what the bytes behind a stamp looked like
# (cache/evidence.py, #21 item 2); the stamp itself keeps its shared format.
EVIDENCE_SUFFIX = ".llmkube-evidence"
MARKER_SUFFIX = ".sha256-rejected"
ATOMIC_TMP_INFIX = ".llmkube-tmp."
# The old scripts' resumable partial `<dest>.<key>.tmp` (adopted, never written).
LEGACY_PARTIAL_SUFFIX = ".tmp"
# The agent's own partials: `<dest>.<key>.<writer>.llmkube-part.tmp`, one per
# writer, so that two writers never share an inode (LLMKube #2158, see cache/heldpartial.py).
# Every partial name ends in `.tmp` so that the scripts' `*.tmp` sweeps
# (spec §10) remove them after a rollback to the scripts (#14 item 7).
PART_SUFFIX = ".llmkube-part.tmp"
# Parallel ranged transfers write a sparse `<...>.llmkube-segs.tmp` file whose
# progress lives in a sibling `<...>.llmkube-journal.tmp`: its size proves
# nothing, so the sequential logic never adopts it (transfer/parallel.py).
SEGS_SUFFIX = ".llmkube-segs.tmp"
JOURNAL_SUFFIX = ".llmkube-journal.tmp"
# The same three as the previous version named them (no `.tmp`): still
# recognised, so a cache it left is resumed and swept.
OLD_PART_SUFFIX = ".llmkube-part"
OLD_SEGS_SUFFIX = ".llmkube-segs"
OLD_JOURNAL_SUFFIX = ".llmkube-journal"
AGENT_PARTIAL_SUFFIXES = (
    PART_SUFFIX,
    SEGS_SUFFIX,
    JOURNAL_SUFFIX,
    OLD_PART_SUFFIX,
    OLD_SEGS_SUFFIX,
    OLD_JOURNAL_SUFFIX,
)
# (suffix, kind) for parse_partial, the current names first.
_PARTIAL_KINDS = (
    (PART_SUFFIX, "part"),
    (SEGS_SUFFIX, "segs"),
    (JOURNAL_SUFFIX, "journal"),
    (OLD_PART_SUFFIX, "part"),
    (OLD_SEGS_SUFFIX, "segs"),
    (OLD_JOURNAL_SUFFIX, "journal"),
)
LOCK_NAME = ".llmkube.lock"
# Per model directory: the origin validator (ETag, HF blob id / LFS sha256)
# each file was staged from, so OnChange sees a same-size change.
VALIDATORS_NAME = ".llmkube-validators"
# A sharded prefetch (#16): the share count, and each share's own
# `.llmkube-validators.<i>-of-<n>` (cache/runrecord.py).
SHARDS_NAME = ".llmkube-shards"
# The listing of a model without MODEL_FILES (#24 item 5, cache/listrec.py).
LISTING_NAME = ".llmkube-listing"
# KServe mode's private directory of DEST_DIR (#24 item 4, kserve/uris.py):
# no model file may live under that name, or it would replace a staged file.
KSERVE_PRIVATE_NAME = ".llmkube-stager"
# Where KServe mode stages a pair's files inside its private directory.
KSERVE_MODEL_SUBDIR = "model"
# KServe mode (#31 item 4): a listed object named like a stamp (`x.sha256`)
# is staged in the private directory as `x.sha256.llmkube-object`, a name no
# object can have (a reserved marker) and no stamp can take (it does not end
# in `.sha256`); it is linked into DEST_DIR under its own name.
OBJECT_SUFFIX = ".llmkube-object"
# Names the agent derives from a manifest file; a repository file carrying one
# of them would collide with the agent's own bookkeeping.
# (The old partial suffixes are substrings of the current ones.)
_RESERVED_MARKERS = (
    SIZE_RECORD_SUFFIX,
    EVIDENCE_SUFFIX,
    ATOMIC_TMP_INFIX,
    MARKER_SUFFIX,
    OLD_PART_SUFFIX,
    OLD_SEGS_SUFFIX,
    OLD_JOURNAL_SUFFIX,
    VALIDATORS_NAME + ".",
    OBJECT_SUFFIX,
)
_RESERVED_NAMES = frozenset(
    {LOCK_NAME, VALIDATORS_NAME, SHARDS_NAME, LISTING_NAME, KSERVE_PRIVATE_NAME}
)
# `<file>.sha256` is the stamp of `<file>`: a repository file of that name
# would be overwritten by the stamp on alternate runs (#11 item 9).
_RESERVED_ENDINGS = (STAMP_SUFFIX,)
_TMP_ALPHABET = string.ascii_letters + string.digits
_TMP_SUFFIX_LEN = 6
PARTIAL_KEY_HEX = 12
_CONTROL_CHARS = frozenset(map(chr, [*range(0x20), 0x7F]))
# Linux NAME_MAX and PATH_MAX (bytes, the path's terminating NUL included).
NAME_MAX_BYTES = 255
PATH_MAX_BYTES = 4096


def parse_file_list(text: str, *, stamps_beside: bool = True) -> tuple[str, ...]:
    """MODEL_FILES -> validated relative paths, order kept (first = primary).

    Empty lines are skipped anywhere, as the scripts' loop did (`[ -n "$rel" ]
    || continue`; see `blank_entries`); any other defect is `InvalidFileSet`
    before any request or write. `stamps_beside=False`: the names of KServe
    mode's listing, whose `x.sha256` is staged apart from any stamp
    (`staged_rel`, #31 item 4), so a `.sha256` ending is a name like any other.
    """
    if not text.strip():
        return ()
    entries = [rel for rel in text.split("\n") if rel]
    seen: set[str] = set()
    for rel in entries:
        _check_rel(rel, stamps_beside)
        if rel in seen:
            raise InvalidFileSet(f"MODEL_FILES lists {repr(rel)[:200]} twice")
        seen.add(rel)
    _check_no_dir_clash(entries)
    return tuple(entries)


def is_reserved_name(name: str) -> bool:
    """Whether a file name is one the agent keeps its own records under
    (MODEL_PATH's: staged onto `.llmkube.lock`, the empty lock file was kept
    as the model, #24 review). A `.sha256` ending is left out: a single file
    has no sibling model file whose stamp it could be."""
    return any(m in name for m in _RESERVED_MARKERS) or name in _RESERVED_NAMES


def blank_entries(text: str) -> int:
    """Empty lines between MODEL_FILES entries (leading and trailing ones are
    the operator's join and say nothing)."""
    body = text.strip("\n")
    return body.split("\n").count("") if body.strip() else 0


def staged_rel(rel: str) -> str:
    """Where KServe mode stages a listed file in its private model
    directory (#31 item 4): `x.sha256` apart from the stamp of `x`
    (`x.sha256.llmkube-object`), any other name as it is. Only the file's
    own name changes: its directories, and so its partials' and records'
    directory, stay the listing's (a stamp is never a directory)."""
    return rel + OBJECT_SUFFIX if rel.endswith(STAMP_SUFFIX) else rel


def exposed_rel(staged: str) -> str:
    """The name in DEST_DIR of a file staged at `staged` (`staged_rel`'s
    inverse: no listed name holds OBJECT_SUFFIX, a reserved marker)."""
    if staged.endswith(STAMP_SUFFIX + OBJECT_SUFFIX):
        return staged[: -len(OBJECT_SUFFIX)]
    return staged


def _check_rel(rel: str, stamps_beside: bool = True) -> None:
    """Raise InvalidFileSet naming the first defect of one entry. Runs once
    per MODEL_FILES entry on every start, warm ones included: the shown form
    of the entry is made only for an error (#16)."""
    if not rel.strip():
        raise InvalidFileSet("MODEL_FILES has an empty entry")
    if rel != rel.strip():
        raise InvalidFileSet(f"MODEL_FILES entry {_shown(rel)} has leading or trailing whitespace")
    if not _CONTROL_CHARS.isdisjoint(rel):  # a set test: cheap for 2,000 entries (#16)
        raise InvalidFileSet(f"MODEL_FILES entry {_shown(rel)} contains a control or NUL character")
    if rel.startswith("/"):
        raise InvalidFileSet(f"MODEL_FILES entry {_shown(rel)} is an absolute path")
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise InvalidFileSet(f"MODEL_FILES entry {_shown(rel)} has an empty, '.' or '..' path part")
    # No marker holds a "/", so one found in `rel` lies within one part: one
    # scan of the entry instead of one per part (a tenth of a 2,000-file warm
    # start's own work, #16).
    marked = any(m in rel for m in _RESERVED_MARKERS)
    for part in parts:
        if marked or part in _RESERVED_NAMES:
            raise InvalidFileSet(
                f"MODEL_FILES entry {_shown(rel)} uses a name reserved for cache records"
            )
        if stamps_beside and part.endswith(_RESERVED_ENDINGS):
            raise InvalidFileSet(_stamp_clash(rel, part))
    name = parts[-1] if stamps_beside else staged_rel(parts[-1])
    if len(name.encode()) > NAME_MAX_BYTES - suffix_room_bytes(False):
        check_name_room(name, pinned=False, what=f"MODEL_FILES entry {_shown(rel)}")
    for part in parts[:-1]:
        if len(part.encode()) > NAME_MAX_BYTES:
            raise InvalidFileSet(
                f"MODEL_FILES entry {_shown(rel)} has a directory name longer than "
                f"{NAME_MAX_BYTES} bytes"
            )


def _stamp_clash(rel: str, part: str) -> str:
    """Why a `.sha256` name is refused where stamps live beside the files
    (spec §4.2, the format the scripts and the metal agent share, #31 item
    4): the stamp of `x` is `x.sha256`, and a `x.sha256` already in the
    cache may be such a stamp (of this set's `x`, or of an earlier set's),
    which a present-file check would keep as the model's file."""
    return (
        f"MODEL_FILES entry {_shown(rel)} uses a name reserved for cache records: "
        f"{_shown(part)} ends in {STAMP_SUFFIX}, the name of the sha256 stamp kept beside "
        f"the file {_shown(part[: -len(STAMP_SUFFIX)])}, which would overwrite it or be "
        "taken for it"
    )


def _shown(rel: str) -> str:
    return repr(rel)[:200]


@functools.cache
def suffix_room_bytes(pinned: bool) -> int:
    """The most bytes the agent appends to a file's name: its partials,
    journal, record and their temps, and where pinned its stamp and the
    rejection marker's temp (derived from the name functions below).
    Computed once per `pinned`: asked twice per file, it was a tenth of a
    2,000-file warm start (random temp names, #16)."""
    # Fixed stand-ins of the real lengths: no sha256 of a validator and no
    # random temp name, so a warm start imports neither hashlib nor secrets.
    dest, key, writer, tmp = "", "0" * PARTIAL_KEY_HEX, "0" * 8, "X" * _TMP_SUFFIX_LEN
    names = [
        private_partial_path(dest, "", writer, key),
        *segmented_paths(dest, "", writer, key),
        legacy_partial_path(dest, "", key),
        atomic_tmp_path(record_path(dest), tmp),
    ]
    if pinned:
        names += [
            atomic_tmp_path(stamp_path(dest), tmp),
            atomic_tmp_path(evidence_path(dest), tmp),
            atomic_tmp_path(marker_path(dest, "0" * 64), tmp),
        ]
    return max(len(name.encode()) for name in names)


def check_name_room(name: str, *, pinned: bool, what: str) -> None:
    """A file name must leave room for the agent's suffixes within NAME_MAX,
    or it fails after the probe with ENAMETOOLONG (#11 item 10)."""
    limit = NAME_MAX_BYTES - suffix_room_bytes(pinned)
    if len(name.encode()) > limit:
        pin = "pinned file" if pinned else "file"
        raise InvalidFileSet(
            f"{what} has a {len(name.encode())}-byte name: a {pin} name may have at most "
            f"{limit} bytes, to leave room for the agent's partial and record suffixes"
        )


def check_path_room(root: str, rels: tuple[str, ...], *, pinned: frozenset[str]) -> None:
    """Every destination with the longest suffix must fit PATH_MAX."""
    for rel in rels:
        total = len(dest_path(root, rel).encode()) + suffix_room_bytes(rel in pinned) + 1
        if total > PATH_MAX_BYTES:
            raise InvalidFileSet(
                f"the path of {repr(rel)[:200]} under {repr(root)[:200]} is too long: "
                f"with the agent's suffixes it needs {total} bytes, more than PATH_MAX"
            )


def _check_no_dir_clash(entries: list[str]) -> None:
    """`a` and `a/b` cannot both be files."""
    names = set(entries)
    clear: set[str] = set()  # directories already found to be no entry
    for rel in entries:
        # Validated entries: no leading, trailing or doubled "/", so a cut at
        # each "/" is posixpath.dirname, at a fraction of its cost (#16).
        cut = rel.rfind("/")
        while cut > 0:
            parent = rel[:cut]
            if parent in clear:
                break
            if parent in names:
                raise InvalidFileSet(f"MODEL_FILES entry {parent!r} is also a directory of {rel!r}")
            clear.add(parent)
            cut = rel.rfind("/", 0, cut)


def validator_of(size_bytes: int | None, etag: str | None) -> str:
    """The shell's `CL<content-length>ET<etag>` validator (spec §4.2)."""
    return f"CL{'' if size_bytes is None else size_bytes}ET{etag or ''}"


def partial_key(validator: str) -> str:
    """First 12 hex of sha256 of the validator, as `partialKey` in the scripts."""
    import hashlib

    return hashlib.sha256(validator.encode()).hexdigest()[:PARTIAL_KEY_HEX]


def legacy_partial_path(dest: str, validator: str, key: str | None = None) -> str:
    """The shell's `<dest>.<key>.tmp`: a changed upstream gets a different
    partial, so old and new bytes never splice (scenario 80). `key`: given
    instead of the validator's, to measure names (suffix_room_bytes)."""
    return f"{dest}.{key or partial_key(validator)}{LEGACY_PARTIAL_SUFFIX}"


def private_partial_path(dest: str, validator: str, writer_id: str, key: str | None = None) -> str:
    """`<dest>.<key>.<writer>.llmkube-part.tmp`: keyed on the validator like
    the shell's name, and private to one writer."""
    return f"{dest}.{key or partial_key(validator)}.{writer_id}{PART_SUFFIX}"


def segmented_paths(
    dest: str, validator: str, writer_id: str, key: str | None = None
) -> tuple[str, str]:
    """(data, journal) of a parallel ranged transfer."""
    stem = f"{dest}.{key or partial_key(validator)}.{writer_id}"
    return stem + SEGS_SUFFIX, stem + JOURNAL_SUFFIX


def ranged_of_stream(part_path: str) -> tuple[str, str]:
    """(data, journal) a writer's stream partial becomes when it widens to
    ranged connections (the same writer id and key; current or old names)."""
    if part_path.endswith(OLD_PART_SUFFIX):
        stem = part_path[: -len(OLD_PART_SUFFIX)]
        return stem + OLD_SEGS_SUFFIX, stem + OLD_JOURNAL_SUFFIX
    stem = part_path[: -len(PART_SUFFIX)]
    return stem + SEGS_SUFFIX, stem + JOURNAL_SUFFIX


def journal_of(segs_path: str) -> str:
    """The journal beside a data file, named as the data file is (current or old)."""
    if segs_path.endswith(OLD_SEGS_SUFFIX):
        return segs_path[: -len(OLD_SEGS_SUFFIX)] + OLD_JOURNAL_SUFFIX
    return segs_path[: -len(SEGS_SUFFIX)] + JOURNAL_SUFFIX


def parse_partial(dest: str, path: str) -> tuple[str, str] | None:
    """(validator key, kind) of a partial of `dest`; kind is "part",
    "segs", "journal" (current or old names) or "legacy" (the shell's
    `<dest>.<key>.tmp`, told apart by its bare 12-hex key before `.tmp`)."""
    if not path.startswith(dest + "."):
        return None
    rest = path[len(dest) + 1 :]
    for suffix, kind in _PARTIAL_KINDS:
        if rest.endswith(suffix):
            key, _, writer = rest[: -len(suffix)].partition(".")
            return (key, kind) if _is_hex(key, 12) and _is_hex(writer, 8) else None
    if rest.endswith(LEGACY_PARTIAL_SUFFIX):
        key = rest[: -len(LEGACY_PARTIAL_SUFFIX)]
        return (key, "legacy") if _is_hex(key, 12) else None
    return None


def key_of_partial(dest: str, path: str) -> str | None:
    """The validator key of any partial (or journal) of `dest`, else None."""
    parsed = parse_partial(dest, path)
    return parsed[0] if parsed else None


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and all(c in "0123456789abcdef" for c in text)


def record_path(dest: str) -> str:
    return dest + SIZE_RECORD_SUFFIX


def stamp_path(dest: str) -> str:
    """`<file>.sha256`: `<digest> <size> <mtime-seconds>`, shared with the
    metal agent's writeSHA256Stamp (spec §4.2)."""
    return dest + STAMP_SUFFIX


def evidence_path(dest: str) -> str:
    """`<file>.llmkube-evidence`: `<scheme> <digest> <size> <mtime-seconds>
    <evidence>`, beside the stamp it belongs to (cache/evidence.py)."""
    return dest + EVIDENCE_SUFFIX


def marker_path(dest: str, expected_digest: str) -> str:
    """`<file>.<expected>.sha256-rejected`: keyed on the EXPECTED digest, so
    correcting the pin makes an old marker inert (spec §4.2)."""
    return f"{dest}.{expected_digest}{MARKER_SUFFIX}"


def atomic_tmp_path(target: str, suffix: str | None = None) -> str:
    """`<target>.llmkube-tmp.XXXXXX`, the L4 `llmkube_atomic_write` temp that
    the 10-minute sweep recognises (scenario 63). `suffix`: a fixed one for
    measuring the name (suffix_room_bytes: a warm start imports no `secrets`)."""
    if suffix is None:
        import secrets

        # One getrandom for the name, not one per character (three names per
        # file of a 2,000-file model, #16); the alphabet's slight modulo bias
        # does not matter for a unique temp name.
        picks = secrets.token_bytes(_TMP_SUFFIX_LEN)
        suffix = "".join(_TMP_ALPHABET[b % len(_TMP_ALPHABET)] for b in picks)
    return f"{target}{ATOMIC_TMP_INFIX}{suffix}"


def dest_path(root: str, rel: str) -> str:
    """The published path of a validated relative path under the model root
    (never absolute: posixpath.join's result, without its per-call checks,
    asked twice per file of every start, #16)."""
    if root and not root.endswith("/"):
        return f"{root}/{rel}"
    return posixpath.join(root, rel)


def listed_dest(root: str, rel: str, kserve_mode: bool) -> str:
    """The staged path of a listed file: in KServe mode apart from any
    stamp (`staged_rel`, #31 item 4)."""
    return dest_path(root, staged_rel(rel) if kserve_mode else rel)


def destinations(
    cache_dir: str, model_path: str, files: tuple[str, ...]
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(model root, ((rel, dest), ...)): multi-file under CACHE_DIR, single
    file at MODEL_PATH (CACHE_DIR may be empty for an emptyDir, spec §2.1)."""
    if files:
        return cache_dir, tuple((rel, dest_path(cache_dir, rel)) for rel in files)
    return posixpath.dirname(model_path), ((posixpath.basename(model_path), model_path),)


def parse_size_record(text: str) -> int | None:
    """A record is valid when it is non-empty and all digits (seed-001)."""
    value = text.strip()
    if not value or not value.isascii() or not value.isdigit():
        return None
    return int(value)
