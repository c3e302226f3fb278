"""#30 item 1: the reader of the operator's scripts
(llmkube_stager/operator/shellwords.py): the commands a script runs,
including those inside `$(...)`, with quotes removed and nothing expanded;
anything outside the subset it reads is `Unparsable`, never misread."""

from __future__ import annotations

import pytest

from llmkube_stager.operator.shellwords import Unparsable, parse


def argvs(text: str) -> list[tuple[str, ...]]:
    return [c.argv for c in parse(text).commands if c.argv]


def test_operators_split_commands_and_quotes_are_removed() -> None:
    assert argvs("""mkdir -p "$CACHE_DIR" && rm -f '$X.tmp'; echo "a b"|cat""") == [
        ("mkdir", "-p", "$CACHE_DIR"),
        ("rm", "-f", "$X.tmp"),
        ("echo", "a b"),
        ("cat",),
    ]


def test_command_substitutions_are_read_and_kept_as_written() -> None:
    script = parse('remote=$(curl -fsSL -I "$U" -o /dev/null 2>/dev/null || echo 0)')
    outer = [c for c in script.commands if not c.nested]
    inner = [c.argv for c in script.commands if c.nested]
    assert outer[0].assignments == (
        ("remote", '$(curl -fsSL -I "$U" -o /dev/null 2>/dev/null || echo 0)'),
    )
    assert inner == [("curl", "-fsSL", "-I", "$U", "-o", "/dev/null"), ("echo", "0")]


def test_redirections_and_io_numbers_are_dropped() -> None:
    assert argvs('cat a b > "$F" 2>/dev/null; exec 9>"$L"; x 2>&1') == [
        ("cat", "a", "b"),
        ("exec",),
        ("x",),
    ]


def test_functions_case_patterns_and_reserved_words() -> None:
    script = parse(
        'f() { case "$1" in hf://*) s="${1#hf://}";; *) echo "$1" ;; esac; }; '
        "if [ -n x ]; then f y; else true; fi; while read -r r; do g; done"
    )
    assert script.functions == frozenset({"f"})
    names = [c.argv[0] for c in script.commands if c.argv]
    assert names == ["echo", "[", "f", "true", "read", "g"]


def test_parameter_expansions_with_braces_and_operators_stay_one_word() -> None:
    assert argvs('echo "${S3_PREFIX:+${S3_PREFIX}/}$rel" ${a%%ET*}') == [
        ("echo", "${S3_PREFIX:+${S3_PREFIX}/}$rel", "${a%%ET*}")
    ]


def test_comments_and_continuations() -> None:
    assert argvs("# a comment\necho a \\\n  b # trailing") == [("echo", "a", "b")]


@pytest.mark.parametrize(
    "text",
    [
        "echo 'open",
        'echo "open',
        "echo $(open",
        "echo ${open",
        "echo `id`",
        "cat <<EOF\nx\nEOF",
        "echo )",
        "echo >",
        "echo \\",
        "a" * (256 * 1024 + 1),
        "$(" * 20 + ")" * 20,
    ],
)
def test_what_it_cannot_read_is_unparsable(text: str) -> None:
    with pytest.raises(Unparsable):
        parse(text)


def test_subshells_and_parenthesised_case_patterns_balance() -> None:
    assert argvs('( flock 9; mv a b ) 9>"$L"; case x in (a|b) echo ab ;; esac') == [
        ("flock", "9"),
        ("mv", "a", "b"),
        ("echo", "ab"),
    ]
    with pytest.raises(Unparsable):
        parse("( echo open")
