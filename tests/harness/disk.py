"""What a run left on disk, and caches laid out before one: size records,
sha256 stamps and rejection markers, partials and temp files, snapshots of
a whole tree."""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path
from typing import Any

RECORD_SUFFIX = ".llmkube-size"
LOCK_NAME = ".llmkube.lock"
STAMP = ".sha256"
_MARKER_RE = re.compile(r"\.([0-9a-f]{64})\.sha256-rejected")
# Partials of `<dest>`: the shell's `<dest>.<key>.tmp` or a per-writer
# `<dest>.<key>.<writer>.llmkube-part.tmp` (`.llmkube-part` before #14)
# (spec §4.2, CONTRACT §4).
_PARTIAL_RE = r"\.[0-9a-f]{12}(?:\.tmp|\.[0-9a-f]+\.llmkube-part(?:\.tmp)?)"
_TEMP_RE = r".*(\.tmp|\.llmkube-part|\.llmkube-tmp\.[A-Za-z0-9]{6}"
_DEBRIS_RE = re.compile(_TEMP_RE + ")")
_DEBRIS_OR_MARKER_RE = re.compile(_TEMP_RE + r"|\.sha256-rejected)")


def record_of(dest: Path) -> str | None:
    """The text of `<dest>.llmkube-size` (bytes as they are: no newline
    translation), None when absent."""
    try:
        return Path(str(dest) + RECORD_SUFFIX).read_bytes().decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        return None


def write_record(dest: Path, size: int | str) -> None:
    Path(str(dest) + RECORD_SUFFIX).write_text(str(size))


def sha256(data: bytes) -> str:
    """The hex digest a pin (MODEL_SHA256) or a stamp names."""
    return hashlib.sha256(data).hexdigest()


def stamp(dest: Path) -> str | None:
    """The text of `<dest>.sha256`, None when absent."""
    path = Path(str(dest) + STAMP)
    return path.read_text() if path.exists() else None


def write_stamp(dest: Path, digest: str) -> None:
    Path(str(dest) + STAMP).write_text(stamp_triple(dest, digest))


def stamp_triple(dest: Path, digest: str) -> str:
    """The stamp the shared format requires for `dest` as it is now."""
    st = dest.stat()
    return f"{digest} {st.st_size} {int(st.st_mtime)}"


def markers(dest: Path) -> list[str]:
    """Expected digests of `<file>.<expected>.sha256-rejected` markers."""
    if not dest.parent.is_dir():
        return []
    found = []
    for entry in dest.parent.iterdir():
        if entry.name.startswith(dest.name + "."):
            match = _MARKER_RE.fullmatch(entry.name[len(dest.name) :])
            if match:
                found.append(match.group(1))
    return sorted(found)


def make_old(path: Path, age_s: float) -> None:
    when = time.time() - age_s
    os.utime(path, (when, when))


def seed(path: Path, data: bytes, *, record: int | str | None = None, age_s: float = 0) -> Path:
    """Put a file in place (parents created), with a size record when
    `record` is given; `age_s` back-dates it, e.g. a file an earlier (dead)
    writer left, which no liveness rule may mistake for a transfer in progress."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if record is not None:
        write_record(path, record)
    if age_s:
        make_old(path, age_s)
    return path


def shell_partial(dest: Path, size: int | None, etag: str | None) -> Path:
    """The shell scripts' resumable partial `<dest>.<key>.tmp`, key = first 12
    hex of sha256(`CL<content-length>ET<etag>`) (spec §4.2)."""
    validator = f"CL{'' if size is None else size}ET{etag or ''}"
    key = hashlib.sha256(validator.encode()).hexdigest()[:12]
    return Path(f"{dest}.{key}.tmp")


def partials(dest: Path) -> dict[str, int]:
    """Every leftover next to `dest` that belongs to it (partials, temps),
    name -> size; the published file and its size record excluded."""
    base = dest.name
    return {
        entry.name: entry.stat().st_size
        for entry in dest.parent.iterdir()
        if entry.name.startswith(base + ".") and entry.name != base + RECORD_SUFFIX
    }


def partials_of(dest: Path) -> list[Path]:
    """The partials of `dest` by their names (the shell's and the agent's)."""
    pattern = re.compile(re.escape(dest.name) + _PARTIAL_RE)
    if not dest.parent.is_dir():
        return []
    return sorted(p for p in dest.parent.iterdir() if pattern.fullmatch(p.name))


def names(root: Path) -> list[str]:
    """Every path under `root`, relative, sorted."""
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def tree(root: Path) -> dict[str, bytes]:
    """Every regular file under `root` (relative path -> bytes)."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def cached_files(root: Path) -> set[str]:
    """Regular files under `root` (relative), the lock file excluded."""
    return {rel for rel in tree(root) if Path(rel).name != LOCK_NAME}


def debris(root: Path, *, markers: bool = False) -> list[str]:
    """Partials and temp files of any kind under `root` (relative paths);
    with `markers`, `.sha256-rejected` markers too."""
    pattern = _DEBRIS_OR_MARKER_RE if markers else _DEBRIS_RE
    return [rel for rel in names(root) if pattern.fullmatch(Path(rel).name)]


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every path under `root` with its mode, size, mtime and content hash,
    and `root` itself (mode, mtime): a run that writes nothing leaves it
    identical."""
    result: dict[str, tuple[Any, ...]] = {}
    if not root.exists():
        return result
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest = ""
        if path.is_file() and not path.is_symlink():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        result[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    st = root.lstat()
    result["."] = (st.st_mode, st.st_mtime_ns)
    return result


def remove_tree(root: Path) -> None:
    """`rm -rf root` without recursion, bottom-up (#21 item 11): Python
    3.11's shutil.rmtree and os.walk recurse, so a 1,100-deep tree left in
    pytest's basetemp crashed a later session's cleanup of old basetemps.
    Symlinks are removed, never followed."""
    stack = [str(root)]
    while stack:
        top = stack[-1]
        try:
            entries = list(os.scandir(top))
        except FileNotFoundError:
            stack.pop()
            continue
        subdirs = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.path)
            else:
                os.unlink(entry.path)
        if subdirs:
            stack.extend(subdirs)
            continue
        os.rmdir(top)
        stack.pop()


def depth_of(root: Path) -> int:
    """How many directory levels lie below `root` (iteratively)."""
    deepest, stack = 0, [(str(root), 0)]
    while stack:
        top, level = stack.pop()
        deepest = max(deepest, level)
        with os.scandir(top) as entries:
            stack.extend((e.path, level + 1) for e in entries if e.is_dir(follow_symlinks=False))
    return deepest


def openat_tracer(trace: Path) -> list[str]:
    """A `Pod.run` wrapper that logs every openat of the agent (and its
    threads) to `trace`, for `read_back_opens`."""
    import shutil

    from tests.harness.features import missing_feature

    strace = shutil.which("strace")
    if strace is None:
        missing_feature("strace is missing (tools/system-deps test installs it)")
    return [str(strace), "-f", "-qq", "-e", "trace=openat", "-o", str(trace)]


def read_back_opens(trace: Path) -> list[str]:
    """The lines of an `strace -e trace=openat` log that open a partial (a
    stream's, or the ranged data file it is renamed to) read-only: a pass
    that reads the partial back (#33). Asserts a partial was opened at all."""
    lines = trace.read_text().splitlines()
    opens = [line for line in lines if ".llmkube-part" in line or ".llmkube-segs" in line]
    assert opens, "strace saw no open of the partial"
    return [line for line in opens if "O_RDONLY" in line]
