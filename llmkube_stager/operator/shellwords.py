"""A POSIX sh script -> its simple commands, for recognise.py (#30 item 1).

Pure, and deliberately small: it reads the subset the operator's generated
scripts are written in (quotes, `$(...)`, `${...}`, `&&`/`||`/`;`/`|`,
redirections, `if`/`while`/`case`, function definitions) and gives up
(`Unparsable`) on anything else, so that a script it cannot read is never
taken for one it can. Nothing is expanded: a word keeps `$VAR`, `${VAR%/}`
and `$(...)` as written, with its quotes removed; the commands inside a
`$(...)` are read too, and listed beside the others.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_OPERATORS = ("&&", "||", ";;", ";", "|", "&", "(", ")")
_RESERVED = frozenset(
    {"if", "then", "elif", "else", "fi", "while", "until", "do", "done", "esac", "!", "{", "}"}
)
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Longer than any script the operator generates (a few KiB) by far: a bound
# on the work the recogniser does for a hostile or runaway argument.
MAX_SCRIPT_BYTES = 256 * 1024
_MAX_DEPTH = 8


class Unparsable(Exception):
    """Not in the subset this module reads."""


@dataclass(frozen=True)
class Word:
    value: str  # quotes removed, nothing expanded
    subs: tuple[tuple[Token, ...], ...] = ()  # the tokens of each $(...) in it


@dataclass(frozen=True)
class Op:
    text: str


Token = Word | Op


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    assignments: tuple[tuple[str, str], ...] = ()
    nested: bool = False  # inside a $(...)


@dataclass(frozen=True)
class Script:
    commands: tuple[Command, ...]
    functions: frozenset[str] = field(default_factory=frozenset)

    def words(self) -> list[str]:
        """Every argument and assigned value, for variable references."""
        found: list[str] = []
        for command in self.commands:
            found.extend(command.argv)
            found.extend(value for _, value in command.assignments)
        return found


def parse(text: str) -> Script:
    if len(text.encode(errors="replace")) > MAX_SCRIPT_BYTES:
        raise Unparsable("longer than any script the operator generates")
    tokens, end = _lex(text, 0, closing=None, depth=0)
    if end != len(text):
        raise Unparsable("unbalanced ')'")
    commands: list[Command] = []
    functions: set[str] = set()
    _commands(tokens, commands, functions, nested=False)
    return Script(tuple(commands), frozenset(functions))


# -- lexing ------------------------------------------------------------------------------


def _lex(text: str, i: int, closing: str | None, depth: int) -> tuple[list[Token], int]:
    """Tokens from `i` up to `closing` (a `)` ending a `$(`), or the end."""
    if depth > _MAX_DEPTH:
        raise Unparsable("command substitutions nested too deep")
    tokens: list[Token] = []
    paren_depth = 0  # `( ... )` subshells and case patterns inside a $(...)
    while i < len(text):
        ch = text[i]
        if ch in " \t":
            i += 1
        elif ch == "\\" and text.startswith("\\\n", i):
            i += 2  # a line continuation
        elif ch == "\n":
            tokens.append(Op(";"))
            i += 1
        elif ch == "#":
            i = _skip_comment(text, i)
        elif ch == ")" and closing == ")" and paren_depth == 0:
            return tokens, i
        elif ch in "<>":
            i = _redirection(text, i, tokens, depth)
        elif op := _operator_at(text, i):
            paren_depth += {"(": 1, ")": -1}.get(op, 0)
            tokens.append(Op(op))
            i += len(op)
        else:
            word, i = _word(text, i, depth)
            if i < len(text) and text[i] in "<>" and word.value.isdigit() and not word.subs:
                continue  # an io number (`2>/dev/null`): part of the redirection
            tokens.append(word)
    if closing is not None:
        raise Unparsable("unterminated $(")
    return tokens, i


def _skip_comment(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end


def _operator_at(text: str, i: int) -> str | None:
    for op in _OPERATORS:
        if text.startswith(op, i):
            return op
    return None


def _redirection(text: str, i: int, tokens: list[Token], depth: int) -> int:
    """`>`, `>>`, `<`, `>&2`, `2>&1`: dropped, with their target word."""
    i += 2 if text.startswith((">>", "<<"), i) else 1
    if text.startswith("<<", i - 2):
        raise Unparsable("here-documents are not read")
    if i < len(text) and text[i] == "&":
        i += 1
    while i < len(text) and text[i] in " \t":
        i += 1
    if i >= len(text) or text[i] in "\n;&|()":
        raise Unparsable("a redirection without a target")
    _, i = _word(text, i, depth)
    return i


def _word(text: str, i: int, depth: int) -> tuple[Word, int]:
    value: list[str] = []
    subs: list[tuple[Token, ...]] = []
    while i < len(text):
        ch = text[i]
        if ch in " \t\n;&|()<>":
            break
        if ch == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise Unparsable("unterminated '")
            value.append(text[i + 1 : end])
            i = end + 1
        elif ch == '"':
            i = _double_quoted(text, i + 1, value, subs, depth)
        elif ch == "\\":
            if i + 1 >= len(text):
                raise Unparsable("a trailing backslash")
            value.append(text[i + 1])
            i += 2
        else:
            i = _unquoting(text, i, value, subs, depth)
    return Word("".join(value), tuple(subs)), i


def _double_quoted(
    text: str, i: int, value: list[str], subs: list[tuple[Token, ...]], depth: int
) -> int:
    while i < len(text):
        ch = text[i]
        if ch == '"':
            return i + 1
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\\n':
            value.append(text[i + 1])
            i += 2
        else:
            i = _unquoting(text, i, value, subs, depth)
    raise Unparsable('unterminated "')


def _unquoting(
    text: str, i: int, value: list[str], subs: list[tuple[Token, ...]], depth: int
) -> int:
    """The character at `i` that no quoting rule of the word took: a
    backquote (refused), a `$` expansion, or itself; a bare word and a
    double-quoted string read these alike."""
    ch = text[i]
    if ch == "`":
        raise Unparsable("backquote substitutions are not read")
    if ch == "$":
        return _dollar(text, i, value, subs, depth)
    value.append(ch)
    return i + 1


def _dollar(text: str, i: int, value: list[str], subs: list[tuple[Token, ...]], depth: int) -> int:
    """`$(...)` (read as commands), `${...}` (kept as written), `$X`."""
    if text.startswith("$(", i):
        inner, end = _lex(text, i + 2, closing=")", depth=depth + 1)
        subs.append(tuple(inner))
        value.append(text[i : end + 1])
        return end + 1
    if text.startswith("${", i):
        end = _closing_brace(text, i + 2)
        value.append(text[i : end + 1])
        return end + 1
    value.append("$")
    return i + 1


def _closing_brace(text: str, i: int) -> int:
    nesting = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            nesting += 1
        elif ch == "}":
            if nesting == 0:
                return i
            nesting -= 1
        i += 1
    raise Unparsable("unterminated ${")


# -- commands ----------------------------------------------------------------------------


def _commands(
    tokens: list[Token] | tuple[Token, ...],
    out: list[Command],
    functions: set[str],
    *,
    nested: bool,
) -> None:
    """Split at the operators; skip reserved words, case patterns and the
    `name()` of a function definition; list $(...)'s commands as well."""
    current: list[Word] = []
    in_case = 0
    expect_pattern = False
    subshells = 0  # `( ... )` left open
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if isinstance(token, Op):
            _finish(current, out, nested)
            current = []
            if token.text == ";;":
                expect_pattern = True
            elif token.text == "(" and not (in_case and expect_pattern):
                subshells += 1
            elif token.text == ")":
                subshells -= 1
                if subshells < 0:
                    raise Unparsable("unbalanced ')'")
            i += 1
            continue
        for inner in token.subs:
            _commands(inner, out, functions, nested=True)
        if not current:
            if token.value == "case" and _is_plain(token):
                in_case += 1
                i = _skip_case_head(tokens, i)
                expect_pattern = True
                continue
            if token.value == "esac" and in_case:
                in_case -= 1
                expect_pattern = False
                i += 1
                continue
            if in_case and expect_pattern:
                i = _skip_pattern(tokens, i)
                expect_pattern = False
                continue
            if _is_function_head(tokens, i):
                functions.add(token.value)
                i += 3
                continue
            if token.value == "for" and _is_plain(token):
                i = _skip_for_head(tokens, i)
                continue
            if token.value in _RESERVED and _is_plain(token):
                i += 1
                continue
        current.append(token)
        i += 1
    _finish(current, out, nested)
    if subshells:
        raise Unparsable("unbalanced '('")


def _is_plain(word: Word) -> bool:
    return not word.subs


def _finish(words: list[Word], out: list[Command], nested: bool) -> None:
    assignments: list[tuple[str, str]] = []
    rest = list(words)
    while rest and _ASSIGNMENT.match(rest[0].value):
        name, _, value = rest[0].value.partition("=")
        assignments.append((name, value))
        rest = rest[1:]
    if rest or assignments:
        out.append(Command(tuple(w.value for w in rest), tuple(assignments), nested))


def _skip_case_head(tokens: list[Token] | tuple[Token, ...], i: int) -> int:
    """`case WORD in`: past the `in`."""
    for j in range(i + 1, min(i + 4, len(tokens))):
        token = tokens[j]
        if isinstance(token, Word) and token.value == "in" and j == i + 2:
            return j + 1
    raise Unparsable("a case without 'in'")


def _skip_pattern(tokens: list[Token] | tuple[Token, ...], i: int) -> int:
    """`[(] pattern [| pattern]... )`: past the `)`."""
    for j in range(i, len(tokens)):
        token = tokens[j]
        if isinstance(token, Op) and token.text == ")":
            return j + 1
        if isinstance(token, Op) and token.text not in ("|", "("):
            break
    raise Unparsable("a case pattern without ')'")


def _is_function_head(tokens: list[Token] | tuple[Token, ...], i: int) -> bool:
    token = tokens[i]
    return (
        isinstance(token, Word)
        and bool(_NAME.match(token.value))
        and i + 2 < len(tokens)
        and tokens[i + 1] == Op("(")
        and tokens[i + 2] == Op(")")
    )


def _skip_for_head(tokens: list[Token] | tuple[Token, ...], i: int) -> int:
    """`for NAME [in WORD...]`: up to the separator before `do`."""
    j = i + 1
    while j < len(tokens) and isinstance(tokens[j], Word):
        j += 1
    return j
