"""`inspect` from the command line: which directory it reports. The
argument wins; without one, CACHE_DIR as config/ reads it (#23 item 4:
cli.py read os.environ itself); neither a directory: InvalidConfiguration,
exit 2, and no termination message (inspect is not a staging run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness.pod import Pod

pytestmark = pytest.mark.e2e


def _reported(run_stdout: str) -> str:
    return str(json.loads(run_stdout)["root"])


def test_without_an_argument_inspect_reports_cache_dir(pod: Pod, tmp_path: Path) -> None:
    cache = tmp_path / "models" / "k"
    cache.mkdir(parents=True)
    run = pod.run("inspect", "--json", CACHE_DIR=str(cache))
    assert run.returncode == 0, str(run)
    assert _reported(run.stdout) == str(cache)


def test_the_argument_wins_over_cache_dir(pod: Pod, tmp_path: Path) -> None:
    given, env = tmp_path / "given", tmp_path / "env"
    given.mkdir()
    env.mkdir()
    run = pod.run("inspect", "--json", str(given), CACHE_DIR=str(env))
    assert run.returncode == 0, str(run)
    assert _reported(run.stdout) == str(given)


@pytest.mark.parametrize("cache_dir", [None, "missing"])
def test_no_directory_is_invalid_configuration(
    pod: Pod, tmp_path: Path, cache_dir: str | None
) -> None:
    target = "" if cache_dir is None else str(tmp_path / cache_dir)
    run = pod.run("inspect", CACHE_DIR=target or None)
    assert run.returncode == 2, str(run)
    assert f"ERROR: InvalidConfiguration: CACHE_DIR {target!r} is not a directory" in run.stderr
    assert run.stdout == "" and run.term_raw is None
