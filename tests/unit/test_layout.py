"""layout: MODEL_FILES validation and the on-disk names shared with the shell.

spec/behavior.md §4.2 (names) and §10 (sweep globs).
"""

from __future__ import annotations

import fnmatch
import hashlib
import posixpath
import string

import pytest

from llmkube_stager.errors import InvalidFileSet, Reason
from llmkube_stager.layout import (
    LOCK_NAME,
    atomic_tmp_path,
    blank_entries,
    dest_path,
    exposed_rel,
    journal_of,
    key_of_partial,
    legacy_partial_path,
    parse_file_list,
    parse_partial,
    parse_size_record,
    partial_key,
    private_partial_path,
    record_path,
    segmented_paths,
    staged_rel,
    stamp_path,
    validator_of,
)

# --- parse_file_list: accepted -------------------------------------------------------------------


def test_accepts_subdirectories_and_keeps_order() -> None:
    text = "model-00002-of-00002.safetensors\nconfig.json\ntokenizer/vocab.json\na/b/c/d.bin"
    assert parse_file_list(text) == (
        "model-00002-of-00002.safetensors",
        "config.json",
        "tokenizer/vocab.json",
        "a/b/c/d.bin",
    )


@pytest.mark.parametrize("text", ["a.gguf\nb.gguf\n", "a.gguf\nb.gguf\n\n", "\na.gguf\nb.gguf"])
def test_tolerates_surrounding_newlines(text: str) -> None:
    assert parse_file_list(text) == ("a.gguf", "b.gguf")


@pytest.mark.parametrize("text", ["", "\n", "\n\n"])
def test_empty_list_is_no_files(text: str) -> None:
    assert parse_file_list(text) == ()
    assert blank_entries(text) == 0


@pytest.mark.parametrize(
    ("text", "blank"),
    [("a.bin\nb.bin", 0), ("\na.bin\nb.bin\n\n", 0), ("a.bin\n\nb.bin", 1), ("a\n\n\nb\n\nc", 3)],
)
def test_empty_lines_are_skipped_like_the_scripts_loop(text: str, blank: int) -> None:
    """`[ -n "$rel" ] || continue` (spec §6): an empty line is no entry."""
    assert parse_file_list(text) == tuple(x for x in text.split("\n") if x)
    assert blank_entries(text) == blank


@pytest.mark.parametrize(
    "rel",
    [
        "v1..v2.bin",  # '..' inside a name is not a parent reference
        "..hidden",
        ".hidden/config.json",
        "name with inner space.bin",
        "ünïcödé/模型.gguf",
        "model.gguf.tmp.bak",
    ],
)
def test_accepts_unusual_but_safe_names(rel: str) -> None:
    assert parse_file_list(rel) == (rel,)


def test_a_directory_sharing_a_prefix_is_not_a_clash() -> None:
    assert parse_file_list("a\nab/c\na.d/e") == ("a", "ab/c", "a.d/e")


# --- parse_file_list: rejected -------------------------------------------------------------------

REJECTED = {
    "absolute": "/etc/passwd",
    "absolute-second": "config.json\n/abs/model.bin",
    "dotdot": "../escape.bin",
    "dotdot-middle": "a/../../b",
    "dotdot-last": "a/..",
    "only-dotdot": "..",
    "dot": ".",
    "dot-segment": "./a",
    "dot-middle": "a/./b",
    "blank-entry": "a.bin\n   \nb.bin",
    "empty-segment": "a//b",
    "trailing-slash": "a/",
    "duplicate": "a.bin\nb.bin\na.bin",
    "nul": "a\x00b",
    "tab": "a\tb",
    "carriage-return": "a.bin\r\nb.bin",
    "escape": "a\x1bb",
    "del": "a\x7fb",
    "leading-space": " a.bin",
    "trailing-space": "a.bin ",
    "trailing-space-second": "a.bin\nb.bin ",
    "file-and-dir": "a\na/b",
    "dir-and-file": "a/b\na",
    "file-and-deep-dir": "x/a\nx/a/b/c",
    "size-record": "x.llmkube-size",
    "size-record-in-subdir": "sub/model.safetensors.llmkube-size",
    "atomic-tmp": "model.gguf.llmkube-tmp.AbC123",
    "rejection-marker": f"model.gguf.{'a' * 64}.sha256-rejected",
}


@pytest.mark.parametrize("text", list(REJECTED.values()), ids=list(REJECTED))
def test_rejected_with_invalid_file_set(text: str) -> None:
    with pytest.raises(InvalidFileSet) as info:
        parse_file_list(text)
    err = info.value
    assert err.reason is Reason.INVALID_FILE_SET
    assert err.exit_code == 2
    assert err.retryable is False
    assert "MODEL_FILES" in err.detail


def test_error_message_is_bounded_for_a_huge_entry() -> None:
    with pytest.raises(InvalidFileSet) as info:
        parse_file_list("/" + "x" * 100_000)
    assert len(info.value.detail) < 400


@pytest.mark.parametrize(
    "text",
    [f"config.json\n{LOCK_NAME}", "model.gguf.0123456789ab.0123abcd.llmkube-part"],
    ids=["lock-file", "agent-partial"],
)
def test_the_agents_own_names_are_reserved(text: str) -> None:
    # A repository file with one of these names would be the agent's bookkeeping.
    with pytest.raises(InvalidFileSet) as info:
        parse_file_list(text)
    assert info.value.reason is Reason.INVALID_FILE_SET


@pytest.mark.parametrize(
    "text", ["model.gguf\nmodel.gguf.sha256", "weights.sha256", "sums.sha256/a.json"]
)
def test_a_stamp_name_is_refused_beside_stamps_naming_the_stamp(text: str) -> None:
    """`stage` keeps its stamps beside the files (spec §4.2): a `x.sha256`
    there may be the stamp of `x` (this set's or an earlier one's), which a
    present-file check would keep as the model's file (#31 item 4)."""
    with pytest.raises(InvalidFileSet) as info:
        parse_file_list(text)
    assert "reserved for cache records" in info.value.detail
    assert "the name of the sha256 stamp kept beside the file" in info.value.detail


def test_kserve_mode_stages_a_stamp_name_apart_from_any_stamp() -> None:
    """#31 item 4: in KServe mode `x.sha256` is a file like any other,
    staged under a name no listed file and no stamp can have."""
    text = "model.bin\nmodel.bin.sha256\nonly.sha256\nsums.sha256/a.json"
    rels = parse_file_list(text, stamps_beside=False)
    staged = [staged_rel(r) for r in rels]
    assert staged[:2] == ["model.bin", "model.bin.sha256.llmkube-object"]
    assert [exposed_rel(r) for r in staged] == list(rels)
    assert stamp_path("model.bin") not in staged
    assert not any(r.endswith(".sha256") for r in staged[1:3])
    with pytest.raises(InvalidFileSet):
        parse_file_list("a.sha256.llmkube-object", stamps_beside=False)
    with pytest.raises(InvalidFileSet, match="reserved"):
        parse_file_list("a.llmkube-size", stamps_beside=False)


# --- partial names: the shell's validator-keyed partial ------------------------------------------


def test_validator_with_etag_matches_the_shell() -> None:
    assert validator_of(80000, '"vA"') == 'CL80000ET"vA"'


@pytest.mark.parametrize("etag", [None, ""])
def test_validator_without_etag_matches_the_shell(etag: str | None) -> None:
    assert validator_of(80000, etag) == "CL80000ET"


def test_validator_without_size() -> None:
    assert validator_of(None, 'W/"x"') == 'CLETW/"x"'
    assert validator_of(None, None) == "CLET"


@pytest.mark.parametrize("validator", ['CL80000ET"vA"', "CL80000ET", "CLET", 'CL1ETW/"ü"'])
def test_partial_key_is_first_12_hex_of_sha256(validator: str) -> None:
    expected = hashlib.sha256(validator.encode("utf-8")).hexdigest()[:12]
    key = partial_key(validator)
    assert key == expected
    assert len(key) == 12
    assert set(key) <= set(string.hexdigits.lower())


def test_partial_path_is_dest_dot_key_dot_tmp() -> None:
    dest = "/models/abc/model.safetensors"
    validator = validator_of(80000, '"vA"')
    key = hashlib.sha256(b'CL80000ET"vA"').hexdigest()[:12]
    assert legacy_partial_path(dest, validator) == f"{dest}.{key}.tmp"


def test_a_changed_upstream_gets_a_different_partial() -> None:
    dest = "/models/abc/model.gguf"
    a = legacy_partial_path(dest, validator_of(80000, '"vA"'))
    b = legacy_partial_path(dest, validator_of(80000, '"vB"'))
    c = legacy_partial_path(dest, validator_of(80001, '"vA"'))
    assert len({a, b, c}) == 3
    for path in (a, b, c):
        assert fnmatch.fnmatch(posixpath.basename(path), "*.tmp")


def test_private_partial_is_keyed_on_the_validator_and_the_writer() -> None:
    dest = "/models/abc/model.gguf"
    validator = validator_of(80000, '"vA"')
    key = hashlib.sha256(validator.encode()).hexdigest()[:12]
    mine = private_partial_path(dest, validator, "0123abcd")
    theirs = private_partial_path(dest, validator, "89abcdef")
    assert mine == f"{dest}.{key}.0123abcd.llmkube-part.tmp"
    assert mine != theirs


def test_every_partial_the_agent_writes_is_claimed_by_the_scripts_tmp_sweeps() -> None:
    """After a rollback the scripts' `find ... -name '*.tmp' -delete` sweeps
    (spec §10) remove the agent's partials too (#14 item 7)."""
    dest = "/models/abc/model.gguf"
    validator = validator_of(80000, '"vA"')
    names = [
        private_partial_path(dest, validator, "0123abcd"),
        *segmented_paths(dest, validator, "0123abcd"),
    ]
    for path in names:
        assert fnmatch.fnmatchcase(posixpath.basename(path), "*.tmp"), path
        # ...but never the scripts' own partial of that file, which keep-one spares.
        assert path != legacy_partial_path(dest, validator)


@pytest.mark.parametrize("writer", ["0123abcd"])
def test_parse_partial_tells_every_kind_and_both_namings_apart(writer: str) -> None:
    dest = "/models/abc/model.gguf"
    validator = validator_of(80000, '"vA"')
    key = partial_key(validator)
    data, journal = segmented_paths(dest, validator, writer)
    stem = f"{dest}.{key}.{writer}"
    assert parse_partial(dest, private_partial_path(dest, validator, writer)) == (key, "part")
    assert parse_partial(dest, data) == (key, "segs")
    assert parse_partial(dest, journal) == (key, "journal")
    assert parse_partial(dest, legacy_partial_path(dest, validator)) == (key, "legacy")
    # The names the previous version wrote (no `.tmp`): still resumed and swept.
    assert parse_partial(dest, stem + ".llmkube-part") == (key, "part")
    assert parse_partial(dest, stem + ".llmkube-segs") == (key, "segs")
    assert parse_partial(dest, stem + ".llmkube-journal") == (key, "journal")
    assert journal_of(data) == journal
    assert journal_of(stem + ".llmkube-segs") == stem + ".llmkube-journal"


def test_key_of_partial_recognises_both_namings() -> None:
    dest = "/models/abc/model.gguf"
    validator = validator_of(80000, '"vA"')
    key = partial_key(validator)
    assert key_of_partial(dest, legacy_partial_path(dest, validator)) == key
    assert key_of_partial(dest, private_partial_path(dest, validator, "0123abcd")) == key


@pytest.mark.parametrize(
    "name",
    [
        "model.gguf.tmp",  # L0 non-resumable partial: no key
        "model.gguf.NOTHEX123456.tmp",
        "model.gguf.0123456789AB.tmp",  # the shell's key is lowercase
        "model.gguf.0123456789a.tmp",  # 11 hex
        "model.gguf.0123456789ab.xyz.llmkube-part",
        "model.gguf.0123456789ab.xyz.llmkube-part.tmp",
        "model.gguf.0123456789ab.0123abcd.tmp",  # neither the shell's nor the agent's
        "model.gguf.0123456789ab.0123abcd.llmkube-part.tmp.tmp",
        "model.gguf.0123456789ab.0123abcd.llmkube-segs.tmp.llmkube-tmp.abcdef",
        "model.gguf.llmkube-size",
        "other.gguf.0123456789ab.tmp",
        "model.gguf2.0123456789ab.tmp",
    ],
)
def test_key_of_partial_rejects_other_names(name: str) -> None:
    assert key_of_partial("/models/abc/model.gguf", "/models/abc/" + name) is None


# --- records and atomic temp names ---------------------------------------------------------------


def test_record_path() -> None:
    assert record_path("/models/k/sub/model.bin") == "/models/k/sub/model.bin.llmkube-size"


def test_dest_path_keeps_subdirectories() -> None:
    assert dest_path("/models/k", "sub/dir/m.bin") == "/models/k/sub/dir/m.bin"


def test_atomic_tmp_name_matches_the_sweep_glob() -> None:
    target = "/models/k/model.safetensors.llmkube-size"
    names = {atomic_tmp_path(target) for _ in range(50)}
    assert len(names) > 1  # random suffix
    for name in names:
        assert name.startswith(target + ".llmkube-tmp.")
        assert fnmatch.fnmatchcase(name, "*.llmkube-tmp.??????")
        assert fnmatch.fnmatchcase(posixpath.basename(name), "*.llmkube-tmp.??????")
        suffix = name.rsplit(".", 1)[1]
        assert len(suffix) == 6
        assert suffix.isascii() and suffix.isalnum()
        # Not a name the recursive `*.tmp` sweep or the never-swept stamp temp would claim.
        assert not fnmatch.fnmatchcase(name, "*.tmp")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("123", 123),
        ("0", 0),
        ("536870912", 536870912),
        ("123\n", 123),
        ("007", 7),
        ("", None),
        ("\n", None),
        ("   ", None),
        ("\t\n", None),
        ("abc", None),
        ("12ab", None),
        ("-5", None),
        ("+5", None),
        ("1.5", None),
        ("1e3", None),
        ("0x10", None),
        ("12 34", None),
        ("1_000", None),
        ("١٢٣", None),  # Arabic-Indic digits: not what the shell's [0-9] accepts
        ("²", None),
    ],
)
def test_parse_size_record(text: str, expected: int | None) -> None:
    assert parse_size_record(text) == expected
