"""The operator's commands this image knows, matched whole (#39 item 1).

A script is an operator command only when the sha256 of its whole text is
an entry here. The operator's texts are the same for every Model (the
values come from the environment), so an exact match is possible, and it
lets nothing through that was not read: a general reading of shell let
every construct it did not understand mean something else (#39).

The catalogue holds facts about the operator's output, never its text:
each entry's digest, what the command means (what the agent must do in its
place), where it was read, and a digest of each of its commands
(segments.py) so that a refusal can say where a script first differs from
the nearest entry without showing either text. `tools/operator-catalogue`
makes the entries from a folder of commands (an LLMKube checkout's golden
files, or commands saved from pods); catalogue.json beside this module is
its output for every LLMKube version read so far (docs/switching-llmkube.md
lists them).

A site may add entries for a version this image does not know yet: a file
of the same form at SITE_CATALOGUE (a ConfigMap mounted by the pod spec,
never a path from the environment, which a source Secret can set). Its
entries never replace a packaged one. Pure but for `load`, which reads the
two files.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from llmkube_stager.operator.segments import Segment, key_digest, key_words, segments

Layout = Literal["single", "multi"]
Kind = Literal["http", "s3", "local", "pvc"]
Policy = Literal["IfNotPresent", "OnChange"]
# How a multi-file command makes each file's URL from MODEL_SOURCE (hf://
# normalised as the operator's scripts do): joined with the relative path,
# or with `/resolve/main/` between them (LLMKube 0.8's loop).
MultiUrl = Literal["joined", "resolve-main"]
HfToken = Literal["never", "when-set"]

FORMAT = 1
SITE_CATALOGUE = "/etc/llmkube-stager/operator-catalogue.json"
_PACKAGED = "catalogue.json"


class CatalogueError(ValueError):
    """A catalogue file that is not one tools/operator-catalogue writes."""


@dataclass(frozen=True)
class Meaning:
    """What an operator command asks the agent to do; the environment the
    operator sets holds the rest (CONTRACT §3)."""

    layout: Layout
    kind: Kind
    policy: Policy
    cached: bool  # the command makes $CACHE_DIR (a cache volume), not an emptyDir
    pinned: bool = False  # a digest gate: a missing pin fails closed
    ca_dir: str | None = None  # the CA prelude's directory of extra certificates
    host_model: str | None = None  # local: the host file the command copies
    hf_token: HfToken = "never"  # whether its curl sends $HF_TOKEN
    multi_url: MultiUrl | None = None
    progress: bool = False  # periodic progress lines (PROGRESS_INTERVAL)

    @property
    def pin_var(self) -> str:
        return "MODEL_FILE_SHA256" if self.layout == "multi" else "MODEL_SHA256"

    def describe(self) -> str:
        """For the log: `multi-file http OnChange (pinned)`."""
        layout = "multi-file" if self.layout == "multi" else "single-file"
        kind = "pvc verify" if self.kind == "pvc" else self.kind
        return f"{layout} {kind} {self.policy}{' (pinned)' if self.pinned else ''}"

    def as_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _MEANING_FIELDS}


_MEANING_FIELDS = tuple(Meaning.__dataclass_fields__)


@dataclass(frozen=True)
class Entry:
    sha256: str
    name: str  # e.g. "LLMKube 0.8 single-file http OnChange, cache"
    meaning: Meaning
    versions: tuple[str, ...]  # the LLMKube versions that emit it
    read_from: tuple[str, ...]  # where it was read: repository@commit path
    segments: tuple[str, ...]  # Segment.key() of each of its commands
    # Known, but not a command the agent can stand in for: why (refused by
    # name instead of "unknown").
    refused: str = ""
    site: bool = False  # from the site's file, not this image's


@dataclass(frozen=True)
class Catalogue:
    entries: tuple[Entry, ...]
    _by_digest: Mapping[str, Entry] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, entries: Sequence[Entry]) -> Catalogue:
        by_digest: dict[str, Entry] = {}
        for entry in entries:
            by_digest.setdefault(entry.sha256, entry)  # the first (packaged) wins
        return cls(tuple(entries), by_digest)

    def find(self, text: str) -> Entry | None:
        return self._by_digest.get(digest(text))

    def versions(self) -> list[str]:
        return sorted({v for e in self.entries for v in e.versions}, key=version_key)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def entry_for(
    text: str,
    meaning: Meaning,
    *,
    name: str,
    versions: Sequence[str] = (),
    read_from: Sequence[str] = (),
    refused: str = "",
) -> Entry:
    """The entry of one command (what tools/operator-catalogue writes)."""
    keys = tuple(s.key() for s in segments(text))
    ordered = tuple(sorted(versions, key=version_key))
    return Entry(digest(text), name, meaning, ordered, tuple(read_from), keys, refused)


def load(site: Path | None = Path(SITE_CATALOGUE)) -> Catalogue:
    """This image's catalogue, and the site's entries after it when `site`
    is a file (a missing file is no error: most sites have none)."""
    # Beside this module (the image installs the package as files, never
    # zipped): importlib.resources would cost ~15 ms of imports a start.
    with open(os.path.join(os.path.dirname(__file__), _PACKAGED), encoding="utf-8") as packaged:
        entries = parse(packaged.read())
    if site is not None:
        try:
            text = site.read_text("utf-8")
        except FileNotFoundError:
            text = ""
        if text:
            entries += [replace(e, site=True) for e in parse(text)]
    return Catalogue.of(entries)


def parse(text: str) -> list[Entry]:
    try:
        doc = json.loads(text)
        if doc.get("format") != FORMAT:
            raise CatalogueError(f"format {doc.get('format')!r}, this image reads {FORMAT}")
        return [_entry(raw) for raw in doc["entries"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CatalogueError(f"not an operator catalogue: {exc}") from exc


def dump(entries: Sequence[Entry]) -> str:
    """One entry a line: compact to read on every start, plain to diff."""
    lines = ",\n".join(json.dumps(_raw(e), separators=(",", ":")) for e in entries)
    return f'{{"format":{FORMAT},"entries":[\n{lines}\n]}}\n'


def _entry(raw: Mapping[str, Any]) -> Entry:
    meaning = raw["meaning"]
    unknown = set(meaning) - set(_MEANING_FIELDS)
    if unknown:
        raise CatalogueError(f"meaning fields {sorted(unknown)} unknown to this image")
    sha = str(raw["sha256"])
    if len(sha) != 64 or set(sha) - set("0123456789abcdef"):
        raise CatalogueError("an entry's sha256 is not 64 hex digits")
    return Entry(
        sha, str(raw["name"]), Meaning(**meaning), tuple(raw.get("versions", ())),
        tuple(raw.get("read_from", ())), tuple(raw["segments"]), str(raw.get("refused", "")),
    )  # fmt: skip


def _raw(entry: Entry) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "sha256": entry.sha256,
        "name": entry.name,
        "versions": list(entry.versions),
        "read_from": list(entry.read_from),
        "meaning": entry.meaning.as_json(),
        "segments": list(entry.segments),
    }
    if entry.refused:
        raw["refused"] = entry.refused
    return raw


def version_key(version: str) -> tuple[tuple[int, int, str], ...]:
    """v0.9.6 before v0.9.16, releases before other labels."""
    parts = version.lstrip("v").replace("-", ".").replace(" ", ".").split(".")
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts)


# -- the nearest entry, for a refusal -------------------------------------


@dataclass(frozen=True)
class Difference:
    entry: Entry
    where: str  # position and kind only, never a word of either text

    def sentence(self) -> str:
        return f"nearest known command: {self.entry.name}; {self.where}"


def nearest(text: str, catalogue: Catalogue) -> Difference | None:
    """The entry sharing the most commands with `text` (first from the
    start, then from the end), and where the script first differs from it."""
    mine = segments(text)
    keys = [key_digest(s.key()) for s in mine]
    best: tuple[int, int, Entry] | None = None
    for entry in catalogue.entries:
        theirs = [key_digest(k) for k in entry.segments]
        head = _common(keys, theirs)
        tail = _common(keys[head:][::-1], theirs[head:][::-1])
        score = (head + tail, -abs(len(keys) - len(theirs)))
        if best is None or score > best[:2]:
            best = (*score, entry)
    if best is None:
        return None
    return Difference(best[2], _where(mine, best[2].segments))


def _common(left: Sequence[str], right: Sequence[str]) -> int:
    count = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        count += 1
    return count


def _where(mine: Sequence[Segment], their_keys: Sequence[str]) -> str:
    keys = [key_digest(s.key()) for s in mine]
    theirs = [key_digest(k) for k in their_keys]
    at = _common(keys, theirs)
    total = f"the known command has {len(theirs)} commands, the script {len(keys)}"
    if at == len(keys) == len(theirs):
        return "the same commands, joined by other separators or spacing"
    if at == len(keys):
        return f"the script ends after command {at} ({total})"
    place = (
        f"command {at + 1} (at character {mine[at].start}, after {_separator(mine[at].separator)})"
    )
    if at == len(theirs):
        return f"{place} is added after the known command's last ({total})"
    if keys[at + 1 :] == theirs[at:]:
        return f"{place} is added ({total})"
    if theirs[at + 1 :] == keys[at:]:
        return f"the known command's command {at + 1} is missing at {place} ({total})"
    mine_words, their_words = str(mine[at].words), key_words(their_keys[at])
    if mine_words == their_words:
        return f"{place} differs in a word or its quoting, not in their number ({total})"
    return f"{place} differs: {mine_words} words where the known one has {their_words} ({total})"


def _separator(sep: str) -> str:
    names = {"": "the start", "\n": "a newline", "&&": "`&&`", "||": "`||`", ";": "`;`"}
    return names.get(sep, f"`{sep}`")
