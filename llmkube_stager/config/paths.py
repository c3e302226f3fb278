"""Path checks, and where the model's files go: CACHE_DIR, MODEL_PATH and
MODEL_FILES with the mode rules (single-file, multi-file, listed), their
pins, and the room each name leaves for the agent's suffixes, all before
any I/O. Paths are quoted with `shown` (reader.py)."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping

from llmkube_stager.config.reader import Reader, shown
from llmkube_stager.errors import ConfigError
from llmkube_stager.layout import (
    PATH_MAX_BYTES,
    blank_entries,
    check_name_room,
    check_path_room,
    is_reserved_name,
    parse_file_list,
)
from llmkube_stager.pins import file_pins, single_pin
from llmkube_stager.schemes import of_source


def layout_paths(read: Reader, source: str, cwd: str | None) -> tuple[str, str, tuple[str, ...]]:
    """CACHE_DIR, MODEL_PATH and the validated file list, with the mode rules."""
    cache_dir = _local_path("CACHE_DIR", read.raw("CACHE_DIR").strip(), cwd)
    given_path = read.raw("MODEL_PATH").strip()
    model_path = _local_path("MODEL_PATH", given_path, cwd)
    row = of_source(source)
    if cache_dir and model_path and not (row is not None and row.verify_only):
        _check_inside(cache_dir, model_path, given_path)
    if not model_path and row is not None and row.verify_only:
        # pvc:// is verified where the claim is mounted (spec §3.5).
        claim_path = source.split("/", 3)[3] if source.count("/") >= 3 else ""
        model_path = posixpath.join("/model-source", claim_path) if claim_path else ""
    files = _model_files(read)
    if files and model_path:
        raise ConfigError("set MODEL_FILES (multi-file) or MODEL_PATH (single-file), not both")
    if files and not cache_dir:
        raise ConfigError("CACHE_DIR is required with MODEL_FILES")
    if not files and not model_path and not (cache_dir and _listable(read, source)):
        raise ConfigError("MODEL_PATH (single-file) or MODEL_FILES (multi-file) is required")
    for name, path in (("CACHE_DIR", cache_dir), ("MODEL_PATH", model_path)):
        if path:
            _check_abs_path(name, path)
    if model_path and (model_path.endswith("/") or not posixpath.basename(model_path)):
        raise ConfigError(f"MODEL_PATH must name a file, got {shown(model_path)}")
    if model_path and is_reserved_name(posixpath.basename(model_path)):
        raise ConfigError(f"MODEL_PATH {shown(model_path)} uses a name reserved for cache records")
    return cache_dir, model_path, files


def model_pins(
    read: Reader, cache_dir: str, model_path: str, files: tuple[str, ...]
) -> Mapping[str, str]:
    """The sha256 pins by relative path; none for a listed model, where a
    pin is refused. Then the room every name leaves (`_check_room`)."""
    listed = not files and not model_path
    pins = {} if listed else _pins(read, model_path, files)
    for pin_var in ("MODEL_SHA256", "MODEL_FILE_SHA256"):
        if listed and read.optional(pin_var) is not None:
            # Fail closed: a pin that cannot be matched to a file is never dropped.
            raise ConfigError(f"{pin_var} needs MODEL_FILES (or MODEL_PATH) naming the files")
    _check_room(cache_dir, model_path, files, pins)
    return pins


def abs_path(read: Reader, name: str) -> str:
    path = read.raw(name).strip()
    if path:
        _check_abs_path(name, path)
    return path


def allowed_roots(read: Reader) -> tuple[str, ...]:
    """A relative root would be judged against the working directory."""
    roots = tuple(r for r in read.raw("LLMKUBE_ALLOWED_HOST_ROOTS").split(":") if r.strip())
    for root in roots:
        _check_abs_path("LLMKUBE_ALLOWED_HOST_ROOTS", root)
    return roots


def _model_files(read: Reader) -> tuple[str, ...]:
    text = read.raw("MODEL_FILES")
    blank = blank_entries(text)
    if blank:
        read.warnings.append(
            f"MODEL_FILES has {blank} blank line(s) between entries; skipped, as the scripts did"
        )
    files = parse_file_list(text)
    if len(files) == 1 and "," in files[0]:
        # A comma is part of a name: "a,b" is one file, a 404 on a%2Cb at the
        # origin (#46 item 4). Not refused: a name may hold a comma.
        read.warnings.append(
            f"MODEL_FILES is one name, {shown(files[0])}: the list is one name per line, "
            "and a comma is part of a name"
        )
    return files


def _listable(read: Reader, source: str) -> bool:
    # Sources whose files are listed when MODEL_FILES is not given (#24
    # items 2, 5): the scheme table's rows that list (#32 item 1).
    row = of_source(source)
    return (row is not None and row.lists) or (not source and bool(read.raw("S3_BUCKET").strip()))


def _pins(read: Reader, model_path: str, files: tuple[str, ...]) -> Mapping[str, str]:
    single = single_pin(read.optional("MODEL_SHA256"), bool(files))
    pins = file_pins(read.optional("MODEL_FILE_SHA256"), files)
    if single is not None:
        return {posixpath.basename(model_path): single}
    return pins


def _local_path(name: str, path: str, cwd: str | None) -> str:
    """An absolute path as given; a relative one (a person's local run) taken
    from the working directory, as a shell would. Checked as written first:
    a '..' part or a control character is refused before it is resolved."""
    _check_plain_text(name, path)
    if not path or path.startswith("/"):
        return path
    if path.startswith("~"):
        raise ConfigError(f"{name} starts with '~', which no shell expanded: write the path out")
    if cwd is None:
        try:
            cwd = os.getcwd()
        except OSError:
            raise ConfigError(f"{name} is relative, and the working directory is gone") from None
    return posixpath.normpath(posixpath.join(cwd, path))


def _check_inside(cache_dir: str, model_path: str, given: str) -> None:
    """MODEL_PATH names a file in CACHE_DIR (#46 item 3). The model's
    directory is MODEL_PATH's: its size record, run record and lock go
    there, so a bare `model.gguf` wrote them into the working directory (`/`
    in a pod) and an absolute path elsewhere wrote there, outside the cache
    volume, and CACHE_DIR was never created. Compared as written, before
    any I/O: a symlink is the volume's business (cache/state.py refuses one
    that leads outside). Without CACHE_DIR (the operator's emptyDir form,
    spec §2.1) MODEL_PATH's directory is the model's, as before."""
    if model_path.startswith(cache_dir.rstrip("/") + "/"):
        return
    as_given = "" if given == model_path else f" (given as {shown(given)})"
    raise ConfigError(
        f"MODEL_PATH {shown(model_path)}{as_given} is outside CACHE_DIR {shown(cache_dir)}: "
        "the model, its records and its lock would be written outside the cache; set "
        f"MODEL_PATH to a file in CACHE_DIR, e.g. "
        f"{shown(posixpath.join(cache_dir, posixpath.basename(model_path)))}, or unset "
        "CACHE_DIR to use MODEL_PATH's directory"
    )


def _check_plain_text(name: str, path: str) -> None:
    """No control character, and no '..' part that climbs out of a named
    directory (the model directory must be where it says), in the path as
    the user wrote it. A relative path may start by climbing (`../models`,
    a person's local run): those parts are resolved against the working
    directory, never against a directory of the cache."""
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        raise ConfigError(f"{name} contains a control character: {shown(path)}")
    parts = path.split("/")
    if not path.startswith("/"):
        while parts and parts[0] in ("..", "."):
            parts = parts[1:]
    if any(part == ".." for part in parts):
        raise ConfigError(f"{name} must not contain '..' parts, got {shown(path)}")


def _check_abs_path(name: str, path: str) -> None:
    """An absolute, plain path (relative ones are resolved by then), within
    PATH_MAX."""
    if not path.startswith("/"):
        raise ConfigError(f"{name} must be an absolute path, got {shown(path)}")
    if any(part in (".", "..") for part in path.split("/")):
        raise ConfigError(f"{name} must not contain '.' or '..' parts, got {shown(path)}")
    if len(path.encode()) >= PATH_MAX_BYTES:
        raise ConfigError(f"{name} is longer than PATH_MAX ({PATH_MAX_BYTES} bytes)")


def _check_room(
    cache_dir: str, model_path: str, files: tuple[str, ...], pins: Mapping[str, str]
) -> None:
    """Names and paths that cannot hold the agent's suffixes fail here, before
    any I/O, not after the probe with ENAMETOOLONG (#11 item 10)."""
    if model_path:
        name = posixpath.basename(model_path)
        check_name_room(name, pinned=bool(pins), what="MODEL_PATH")
        check_path_room(posixpath.dirname(model_path), (name,), pinned=frozenset(pins))
        return
    for rel in pins:
        check_name_room(
            posixpath.basename(rel), pinned=True, what=f"MODEL_FILES entry {shown(rel)}"
        )
    check_path_room(cache_dir, files, pinned=frozenset(pins))
