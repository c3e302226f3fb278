"""`llmkube-stager --version` and the version in the success stats (#13
item 7): one source of truth (the package's `__version__`, which setuptools
also writes into the installed metadata), read without importlib.metadata so
the warm start pays nothing for it."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import llmkube_stager
from tests.harness.origin import Origin
from tests.harness.pod import Pod, import_lines

pytestmark = pytest.mark.e2e

MODEL = "/files/model.gguf"


def test_version_flag_prints_the_installed_version(pod: Pod) -> None:
    run = pod.run("--version")
    assert run.returncode == 0, str(run)
    assert run.stdout == f"llmkube-stager {llmkube_stager.__version__}\n"
    assert run.term_raw is None  # not a staging run: no termination message


def test_the_console_script_has_the_flag_too(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("llmkube-stager")
    proc = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["llmkube-stager", llmkube_stager.__version__]


def test_one_source_of_truth() -> None:
    """The metadata pip installed, the package attribute and pyproject agree:
    pyproject takes the version from the package (no second literal)."""
    assert importlib.metadata.version("llmkube-stager") == llmkube_stager.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:[.-]?\w+)*", llmkube_stager.__version__)
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"], "a second version literal"
    assert "version" in pyproject["project"]["dynamic"]
    dynamic = pyproject["tool"]["setuptools"]["dynamic"]
    assert dynamic["version"] == {"attr": "llmkube_stager.__version__"}


def test_success_stats_carry_the_version_and_warm_start_reads_no_metadata(
    pod: Pod, origin: Origin
) -> None:
    origin.put(MODEL, b"x" * 1000)
    pod.single(origin.url + MODEL)
    cold = pod.run("stage")
    doc = cold.ok(files=1, fetched=1, reused=0).term
    assert doc["stats"]["version"] == llmkube_stager.__version__

    warm = pod.run("stage", python_flags=("-X", "importtime"))
    doc = warm.ok(files=1, fetched=0, reused=1).term
    assert doc["stats"]["version"] == llmkube_stager.__version__
    modules = import_lines(warm.stderr)
    assert len(modules) > 20  # importtime output really was captured
    assert "importlib.metadata" not in modules
