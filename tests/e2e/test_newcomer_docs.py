"""#46 item 7, docs a newcomer can use: no tracker number in what a user
reads (every command's --help, the README, the user docs, the messages the
package prints), `stage --help` grouped as the README groups the variables
and with examples, the README's quickstart runs as written (against a
loopback origin instead of `python -m http.server`), its two commands stay,
and `make demo` prints the commands it runs."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from llmkube_stager.config import VARS
from llmkube_stager.helptext import GROUPS
from tests.harness.origin import Origin
from tests.harness.pod import ROOT

pytestmark = pytest.mark.e2e

# Our tracker's numbers (`#31`, `#31 item 6`, `issue 12`), not another
# project's (`LLMKube #2158`, `PR #3328`, `UTS #46`), not an HTML entity.
TRACKER = re.compile(
    r"(?<![&\w/])(?<!PR )(?<!UTS )(?<!LLMKube )(?<!KServe )#\d{1,3}\b|\bissue \d+\b",
)
# Pages for contributors that cite the tracker on purpose.
DESIGN_NOTES = {"design.md", "issues.md", "reliability.md", "performance.md", "architecture.md"}
# A string right after these is a docstring (or a bare string statement).
_STATEMENT_STARTS = (tokenize.ENCODING, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
COMMANDS = ["", "stage", "plan", "verify", "inspect", "diagnose", "check-command"]


def _python(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """`python ARGS` in this checkout, with a bare environment."""
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        timeout=timeout_s,
        check=False,
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return _python("-m", "llmkube_stager", *args)


def user_docs() -> list[Path]:
    docs = ROOT / "docs"
    pages = [p for p in docs.glob("*.md") if p.name not in DESIGN_NOTES]
    return [ROOT / "README.md", *pages, *sorted((docs / "kubernetes").rglob("*.*"))]


@pytest.mark.parametrize("command", COMMANDS)
def test_no_tracker_number_in_any_help(command: str) -> None:
    run = _cli(*([command] if command else []), "--help")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip()
    assert not TRACKER.findall(run.stdout + run.stderr), run.stdout


@pytest.mark.parametrize("page", user_docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_tracker_number_in_user_docs(page: Path) -> None:
    found = [
        f"{page.name}:{n}: {line.strip()}"
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if TRACKER.search(line)
    ]
    assert not found, "\n".join(found)


def test_no_tracker_number_in_the_packages_messages() -> None:
    """Every string of llmkube_stager/ but its docstrings (comments and
    docstrings may cite the tracker)."""
    found = []
    for path in sorted((ROOT / "llmkube_stager").rglob("*.py")):
        previous = tokenize.ENCODING
        for tok in tokenize.tokenize(io.BytesIO(path.read_bytes()).readline):
            docstring = previous in (
                tokenize.ENCODING,
                tokenize.NEWLINE,
                tokenize.INDENT,
                tokenize.DEDENT,
            )
            if tok.type == tokenize.STRING and not docstring and TRACKER.search(tok.string):
                found.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.string[:80]}")
            if tok.type not in (tokenize.COMMENT, tokenize.NL):
                previous = tok.type
    assert not found, "\n".join(found)


def test_stage_help_groups_the_variables_as_the_readme_and_has_examples() -> None:
    out = _cli("stage", "--help").stdout
    headings = [line[:-1] for line in out.splitlines() if line and not line[0].isspace()]
    titles = [title[:1].upper() + title[1:] for title, _ in GROUPS]
    assert [h for h in headings if h in titles] == titles, headings
    assert "Examples:" in out and "llmkube-stager stage" in out
    # Every variable's flag is under its group's heading.
    for title, envs in GROUPS:
        start = out.index(title[:1].upper() + title[1:] + ":")
        section = out[start:].split("\n\n", 1)[0]
        for env in envs:
            assert f"[{env}" in section.replace("\n", " ").replace("  ", ""), (title, env)


def test_every_variable_has_a_group() -> None:
    grouped = [env for _, envs in GROUPS for env in envs]
    assert sorted(grouped) == sorted(v.env for v in VARS)


def test_the_readme_table_is_the_help_groups() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| group | variables |") :].split("\n\n", 1)[0]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    known = {v.env for v in VARS}
    assert [title.strip() for title, _ in rows] == [title for title, _ in GROUPS]
    for (_, cell), (title, envs) in zip(rows, GROUPS, strict=True):
        named = [name for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cell) if name in known]
        assert list(dict.fromkeys(named)) == list(envs), title


def test_the_readme_keeps_its_two_commands_and_the_quickstart() -> None:
    readme = (ROOT / "README.md").read_text()
    first_block = readme[readme.index("```sh") : readme.index("```\n", readme.index("```sh"))]
    assert "make demo" in first_block and "make test" in first_block
    for needed in (
        "pip install .",
        "make image",
        "python3 -m http.server",
        "llmkube-stager stage",
        "llmkube-stager plan",
        "llmkube-stager verify",
        "llmkube-stager inspect",
        "What `CACHE_DIR` should be",
        "pvc://",
        "gs://",
        "docs/concepts.md",
    ):
        assert needed in readme, needed


def test_the_quickstart_runs_as_written(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("export MODEL_SOURCE=http://127.0.0.1:8000/tiny.gguf")
    block = readme[start : readme.index("```", start)]
    data = bytes(range(256)) * 64
    with Origin() as origin:
        origin.put("/tiny.gguf", data)
        script = (
            block.replace("http://127.0.0.1:8000", origin.url)
            .replace("/tmp/models", str(tmp_path / "models"))
            .replace("llmkube-stager", f"{sys.executable} -m llmkube_stager")
        )
        run = subprocess.run(
            ["bash", "-euc", script],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
            cwd=tmp_path,
            timeout=120,
            check=False,
        )
        gets = [r for r in origin.requests() if r.method == "GET"]
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "models" / "tiny" / "tiny.gguf").read_bytes() == data
    assert "Model already cached, skipping download" in run.stderr
    assert "tiny.gguf" in run.stdout  # plan and inspect name the file
    assert len(gets) == 1, "only the first stage fetches"


def test_make_demo_prints_the_commands_it_runs() -> None:
    run = _python("-m", "tests.harness.demo", timeout_s=300)
    assert run.returncode == 0, run.stdout + run.stderr
    commands = [line for line in run.stdout.splitlines() if line.startswith("$ ")]
    assert len(commands) == 4, run.stdout
    assert all(line.endswith("python -m llmkube_stager stage") for line in commands)
    assert all("MODEL_SOURCE=http://127.0.0.1:" in line for line in commands)
    assert "warm starts made 0 requests" in run.stdout
