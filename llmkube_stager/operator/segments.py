"""A script cut into its top-level commands, for saying where it differs
from the nearest operator command without showing any of it (#39 item 2).

Pure, and deliberately no reader of shell: it only finds where one command
ends and the next begins (`;`, `&&`, `||`, `|`, `&`, a newline, outside
quotes, `$(...)`, `${...}` and backquotes), so that a refusal can say "the
7th command differs" from digests alone. Whether a script is an operator
command is never decided here: only the digest of its whole text does that
(catalogue.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

_SEPARATORS = ("&&", "||", ";", "|", "&", "\n")
_SEPARATOR_NAMES = {
    "": "start", "&&": "and", "||": "or", ";": "semi", "|": "pipe", "&": "bg", "\n": "nl"
}  # fmt: skip


@dataclass(frozen=True)
class Segment:
    separator: str  # what came before it: "" for the first command
    start: int  # character offset of the command in the script
    words: int  # a rough count of its words, for "9 words where 8 were"
    digest: str  # of the command's text, 12 hex

    def key(self) -> str:
        """How the catalogue stores it: `digest:words:separator`."""
        return f"{self.digest}:{self.words}:{_SEPARATOR_NAMES[self.separator]}"


def key_digest(key: str) -> str:
    return key.partition(":")[0]


def key_words(key: str) -> str:
    return key.split(":")[1] if key.count(":") >= 1 else "?"


def segments(text: str) -> list[Segment]:
    found: list[Segment] = []
    separator, start, at = "", 0, 0
    depth: list[str] = []  # open quotes and substitutions, innermost last
    while at < len(text):
        char = text[at]
        closing = depth[-1] if depth else ""
        if char == "\\" and closing != "'":
            at += 2
            continue
        if closing == "'":
            if char == "'":
                depth.pop()
            at += 1
            continue
        if char == closing and closing in {'"', ")", "}", "`"}:
            depth.pop()
            at += 1
            continue
        opened = _opening(text, at, closing)
        if opened:
            depth.append(opened[0])
            at += opened[1]
            continue
        if not depth:
            sep = next((s for s in _SEPARATORS if text.startswith(s, at)), "")
            if sep:
                _add(found, separator, text, start, at)
                separator, start = sep, at + len(sep)
                at += len(sep)
                continue
        at += 1
    _add(found, separator, text, start, len(text))
    return found


def _opening(text: str, at: int, closing: str) -> tuple[str, int] | None:
    """The closer a quote or substitution starting at `at` waits for, and
    the length of its opener; inside double quotes only `$(`, `${` and
    backquotes open."""
    if text.startswith("$(", at):
        return ")", 2
    if text.startswith("${", at):
        return "}", 2
    if text[at] == "`":
        return "`", 1
    if closing == '"':
        return None
    if text[at] == "'":
        return "'", 1
    if text[at] == '"':
        return '"', 1
    if text[at] == "(":
        return ")", 1
    return None


def _add(found: list[Segment], separator: str, text: str, start: int, end: int) -> None:
    body = text[start:end]
    stripped = body.strip()
    if not stripped and separator in ("", "\n"):
        return  # blank lines and trailing separators are no command
    offset = start + (len(body) - len(body.lstrip()))
    digest = hashlib.sha256(stripped.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    found.append(Segment(separator, offset, len(stripped.split()), digest))
