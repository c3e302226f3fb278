"""sha256 pins: MODEL_SHA256 / MODEL_FILE_SHA256 and their fail-closed
prechecks (spec §6.4, §7). Pure: parsing and validation only.

The prechecks run before anything else (before any sweep, probe or write:
idx TestModelInitCommand_SHA256GuardRunsFirst), so a malformed pin never
leaves a trace in the cache.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from llmkube_stager.errors import ConfigError

_DIGEST_RE = re.compile(r"[0-9a-f]{64}")
# How digests are often written (OCI, `sha256sum --tag`-style tools): taken
# as the bare digest (#46 item 4).
_ALGORITHM_PREFIX = "sha256:"


def _bare(digest: str) -> str:
    if digest[: len(_ALGORITHM_PREFIX)].lower() == _ALGORITHM_PREFIX:
        return digest[len(_ALGORITHM_PREFIX) :]
    return digest


def single_pin(value: str | None, multi_file: bool) -> str | None:
    """MODEL_SHA256: absent -> None; present -> a lowercase 64-hex digest."""
    if value is None:
        return None
    digest = _bare(value.strip().lower())
    if not digest:
        raise ConfigError("MODEL_SHA256 is set but empty: refusing to transfer unchecked")
    if multi_file:
        raise ConfigError(
            "MODEL_SHA256 pins a single-file model; use MODEL_FILE_SHA256 with MODEL_FILES"
        )
    if not _DIGEST_RE.fullmatch(digest):
        raise ConfigError("MODEL_SHA256 must be 64 hexadecimal characters")
    return digest


def file_pins(value: str | None, files: tuple[str, ...]) -> Mapping[str, str]:
    """MODEL_FILE_SHA256 lines `<digest> <rel>` -> {rel: digest}."""
    if value is None:
        return {}
    body = value.strip("\n")
    if not body.strip():
        raise ConfigError("MODEL_FILE_SHA256 is set but empty: refusing to transfer unchecked")
    if not files:
        raise ConfigError("MODEL_FILE_SHA256 pins multi-file models; use MODEL_SHA256")
    pins: dict[str, str] = {}
    for number, line in enumerate(body.split("\n"), start=1):
        digest, rel = _parse_line(number, line)
        if rel in pins:
            raise ConfigError(f"MODEL_FILE_SHA256 line {number} pins {rel!r} twice")
        pins[rel] = digest
    orphans = sorted(set(pins) - set(files))
    if orphans:
        shown = ", ".join(repr(o)[:100] for o in orphans[:5])
        raise ConfigError(f"MODEL_FILE_SHA256 pins not staged files (not in MODEL_FILES): {shown}")
    return pins


def _parse_line(number: int, line: str) -> tuple[str, str]:
    digest, sep, rel = line.partition(" ")
    digest = _bare(digest)
    if not sep or not _DIGEST_RE.fullmatch(digest.lower()):
        raise ConfigError(
            f"MODEL_FILE_SHA256 line {number} must be '<64-hex digest> <relative path>'"
        )
    if not rel.strip() or rel != rel.strip():
        raise ConfigError(
            f"MODEL_FILE_SHA256 line {number} has leading or trailing whitespace in its path"
        )
    return digest.lower(), rel
