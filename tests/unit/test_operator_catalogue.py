"""#39: a script runs as the agent only when it is, byte for byte, a command
in the catalogue; near misses made mechanically from each of the suite's
commands are refused or left to /bin/sh, never run as the agent; a refusal
names the nearest command and where the script differs, never a word of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmkube_stager.operator.catalogue import (
    Catalogue,
    CatalogueError,
    Meaning,
    dump,
    entry_for,
    load,
    parse,
)
from llmkube_stager.operator.shell import agent_flags, decide, would_download
from tests.harness.operator_commands import (
    NOT_DOWNLOADS,
    by_name,
    catalogue,
    entries,
    shapes,
    write_catalogue,
)

SUITE = catalogue()
ENV = {"MODEL_SOURCE": "https://origin.example/m/model.gguf"}
CANARY = "CANARY-7f3e9a"


def decided(script: str, env: dict[str, str] | None = None, known: Catalogue = SUITE) -> str:
    """One of: agent, refused: WHY, sh."""
    decision = decide(["-c", script], env or ENV, known)
    if decision.refused:
        return f"refused: {decision.refused}"
    return "agent" if decision.entry is not None else "sh"


# -- the catalogue itself ---------------------------------------------------


def test_each_of_the_suites_commands_is_found_with_its_meaning() -> None:
    for shape in shapes():
        found = SUITE.find(shape.script)
        assert found is not None, shape.name
        assert found.meaning == shape.meaning, shape.name


def test_the_catalogue_file_round_trips_and_holds_no_script_text(tmp_path: Path) -> None:
    path = write_catalogue(tmp_path)
    text = path.read_text()
    assert [e.sha256 for e in parse(text)] == [e.sha256 for e in entries()]
    assert [e.meaning for e in parse(text)] == [e.meaning for e in entries()]
    for shape in shapes():  # facts about the commands, never their words
        for line in shape.script.splitlines():
            assert len(line.strip()) < 12 or line.strip() not in text, shape.name


def test_the_packaged_catalogue_parses_and_names_versions() -> None:
    packaged = load(site=None)
    assert len(packaged.entries) >= 24, "the operator's 24 goldens at least"
    for entry in packaged.entries:
        assert entry.versions and entry.read_from and entry.segments, entry.name
        assert entry.name.startswith("LLMKube ") and not entry.site
        flags = agent_flags(entry.meaning, {"MODEL_SOURCE": "hf://org/repo", "HF_TOKEN": "t"})
        assert flags["LLMKUBE_REFRESH_POLICY"] == entry.meaning.policy
    assert len({e.sha256 for e in packaged.entries}) == len(packaged.entries)
    assert len({e.name for e in packaged.entries}) == len(packaged.entries)


def test_a_site_entry_never_replaces_a_packaged_one(tmp_path: Path) -> None:
    packaged = load(site=None)
    assert packaged.entries, "the image knows the operator's commands"
    first = packaged.entries[0]
    other = Meaning("multi", "s3", "OnChange", cached=False)
    site = tmp_path / "site.json"
    shadow = entry_for("x", other, name="shadow")
    shadow_raw = json.loads(dump([shadow]))
    shadow_raw["entries"][0]["sha256"] = first.sha256
    site.write_text(json.dumps(shadow_raw))
    merged = load(site=site)
    assert merged._by_digest[first.sha256].meaning == first.meaning


def test_a_missing_site_file_is_no_error_and_a_broken_one_is(tmp_path: Path) -> None:
    assert load(site=tmp_path / "absent.json").entries == load(site=None).entries
    broken = tmp_path / "broken.json"
    for text in ("{", '{"format": 2, "entries": []}', '{"format": 1}', "[]"):
        broken.write_text(text)
        with pytest.raises(CatalogueError):
            load(site=broken)
    broken.write_text(
        '{"format": 1, "entries": [{"sha256": "' + "0" * 64 + '", "name": "n", "segments": [],'
        ' "meaning": {"layout": "single", "kind": "http", "policy": "OnChange", "cached": true,'
        ' "runs_rm": true}}]}'
    )
    with pytest.raises(CatalogueError, match="unknown"):
        load(site=broken)


# -- what `sh` does -----------------------------------------------------------


def test_the_suites_commands_run_as_the_agent() -> None:
    for shape in shapes():
        scheme = {"s3": "s3://b/k", "local": "/host-model/model.gguf", "pvc": "pvc://c/m"}
        env = {"MODEL_SOURCE": scheme.get(shape.meaning.kind, ENV["MODEL_SOURCE"])}
        assert decided(shape.script, env) == "agent", shape.name


def test_a_known_command_with_a_source_of_another_kind_is_refused() -> None:
    verify = by_name("pvc verify").script
    assert decided(verify, {"MODEL_SOURCE": "https://x/m.gguf"}).startswith("refused: ")
    local = by_name("single local cache").script
    assert "http" in decided(local, {"MODEL_SOURCE": "http://x/m.gguf"})


def test_scripts_that_never_download_go_to_the_real_shell() -> None:
    for script in NOT_DOWNLOADS:
        assert decided(script) == "sh", script
    assert decided('ls -l "$MODEL_PATH"') == "sh"  # names MODEL_ but fetches nothing


def test_an_unknown_download_is_refused_with_no_catalogue_at_all() -> None:
    empty = Catalogue.of([])
    said = decided('curl -fLo "$MODEL_PATH" "$MODEL_SOURCE"', known=empty)
    assert said.startswith("refused: the script is not a command of any LLMKube version")
    assert decided("wget -O /models/m https://x/m", known=empty).startswith("refused: ")


# -- near misses, made mechanically -------------------------------------------

_WORD = re.compile(r"\S+")
_VAR = re.compile(r"\$\{?([A-Z_]+)")


_ADDED = (
    'rm -rf "$CACHE_DIR"', "touch /models/x", "trap 'rm -f /models/*' EXIT", "exit 0",
    "if false; then :; fi", "mv() { :; }", 'echo x >> "$MODEL_PATH"',
    'MODEL_SOURCE="$(echo "$MODEL_SOURCE" | sed s/a/b/)"', "curl -o /dev/null x",
)  # fmt: skip


def near_misses(script: str) -> Iterator[tuple[str, str]]:
    """(what changed, the variant): one token changed, or one command added."""
    words = list(_WORD.finditer(script))
    for m in words[:: max(1, len(words) // 16)]:  # about 16 places a script
        start, end = m.span()
        yield f"suffix on word {start}", script[:end] + "x" + script[end:]
        yield f"word {start} dropped", script[:start] + script[end:]
        yield f"word {start} doubled", script[:end] + " " + m.group() + script[end:]
    for m in list(_VAR.finditer(script))[:12]:
        start, end = m.span(1)
        yield f"variable at {start}", script[:start] + m.group(1) + "2" + script[end:]
    for old, new in (("&&", "||"), ("||", "&&"), (";", "&"), ("|", "||"), ("=", "!="),
                     ('"', "'"), ("mv ", "cp "), ("-f", "-e"), ("exit 1", "exit 0"),
                     ("$CACHE_DIR", "$CACHE_DIR/v2"), ("$MODEL_PATH", "${MODEL_PATH%/*}/other"),
                     ("$MODEL_SOURCE", "${MODEL_SOURCE:+http://evil/}")):  # fmt: skip
        at = script.find(old)
        if at >= 0:
            yield f"{old!r} -> {new!r} at {at}", script[:at] + new + script[at + len(old) :]
    for added in _ADDED:
        yield f"leading {added!r}", f"{added}; {script}"
        yield f"trailing {added!r}", f"{script}\n{added}"
    yield "a trailing newline", script + "\n"
    yield "a leading space", " " + script
    yield "CRLF line ends", script.replace("\n", "\r\n")


_CASES = [
    pytest.param(shape.name, change, variant, id=f"{shape.name}: {change}")
    for shape in shapes()
    for change, variant in near_misses(shape.script)
    if variant != shape.script
]


def test_hundreds_of_near_misses_are_made() -> None:
    assert len(_CASES) > 1000


@pytest.mark.parametrize(("name", "change", "variant"), _CASES)
def test_a_near_miss_never_runs_as_the_agent(name: str, change: str, variant: str) -> None:
    shape = by_name(name)
    env = {"MODEL_SOURCE": {"s3": "s3://b/k", "local": "/h/m", "pvc": "pvc://c/m"}.get(
        shape.meaning.kind, ENV["MODEL_SOURCE"])}  # fmt: skip
    said = decided(variant, env)
    if SUITE.find(variant) is not None:  # the change made another suite command
        return
    assert said != "agent", change
    if would_download(variant):
        assert said.startswith("refused: the script is not a command"), said
        assert "nearest known command: the suite's" in said


# -- a refusal shows no word of the script ----------------------------------------


@pytest.mark.parametrize(
    "insert",
    [f"-uadmin:{CANARY}", f"-HX-Api-Key:{CANARY}", f'--header "Authorization: {CANARY}"',
     f"https://user:{CANARY}@origin/m", f"--user={CANARY}", f"'{CANARY}'"],
)  # fmt: skip
def test_a_refusal_prints_no_value_of_the_script(insert: str) -> None:
    for shape in shapes():
        if "curl" not in shape.script:
            continue
        variant = shape.script.replace("curl ", f"curl {insert} ", 1)
        said = decided(variant)
        assert said.startswith("refused: "), shape.name
        assert CANARY not in said
        named = said.replace(f"the suite's {shape.name} command", "")
        for word in ("curl", "$", "MODEL_", '"', "Bearer", "-u", "-H"):
            assert word not in named, (word, said)


# -- what the agent is told --------------------------------------------------------


def test_the_meaning_becomes_the_agents_flags() -> None:
    pinned = by_name("single http token pinned").meaning
    flags = agent_flags(pinned, {"HF_TOKEN": "t"})
    assert flags["MODEL_SHA256"] == "" and flags["HF_TOKEN"] is None
    assert flags["LLMKUBE_REFRESH_POLICY"] == "IfNotPresent"
    plain = by_name("single http OnChange cache").meaning
    flags = agent_flags(plain, {"HF_TOKEN": "t", "LLMKUBE_REFRESH_POLICY": "IfNotPresent"})
    assert flags["HF_TOKEN"] == "", "a command that never sends the token: neither does the agent"
    assert flags["LLMKUBE_REFRESH_POLICY"] == "OnChange"
    ca = by_name("single http with CA").meaning
    assert agent_flags(ca, {})["LLMKUBE_CA_DIR"] == "/custom-certs"
    local = by_name("single local cache").meaning
    assert agent_flags(local, {})["LLMKUBE_HOST_MODEL"] == "/host-model/model.gguf"
    main = by_name("multi http resolve-main").meaning
    for source, base in (
        ("https://huggingface.co/org/repo", "https://huggingface.co/org/repo/resolve/main/"),
        ("hf://org/repo", "https://huggingface.co/org/repo/resolve/main/"),
        ("http://127.0.0.1:9/org/repo/", "http://127.0.0.1:9/org/repo/resolve/main/"),
    ):
        assert agent_flags(main, {"MODEL_SOURCE": source})["MODEL_SOURCE"] == base


def test_a_broken_site_catalogue_refuses_every_download_by_name(tmp_path: Path) -> None:
    """A site's ConfigMap that is no catalogue, a directory or unreadable:
    a refusal naming the file, never a traceback (#39 review)."""
    script = by_name("single http IfNotPresent cache").script
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": 1, "entries": [{"name": "x"}]}')
    folder = tmp_path / "folder"
    folder.mkdir()
    for site in (broken, folder):
        decision = decide(["-c", script], ENV, site=str(site))
        assert decision.entry is None
        assert decision.refused.startswith(f"the site catalogue {site} cannot be read: "), decision
    # A script that cannot download never reads it: the prep container runs.
    assert decide(["-c", "chown 100:100 /models"], ENV, site=str(broken)).refused == ""
    # No site file at all: the image's own catalogue, and the script is unknown.
    decision = decide(["-c", script], ENV, site=str(tmp_path / "absent.json"))
    assert decision.refused.startswith("the script is not a command of any LLMKube version")
