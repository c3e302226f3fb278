"""#13 item 1: the floors are written in three places that must agree: pyproject's
dependencies (what pip admits), deps.py (what the agent checks at run time)
and constraints.txt (what `make floors` installs to run the source tests)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from llmkube_stager.sources.deps import (
    AZURE_IDENTITY,
    BOTO3,
    BOTOCORE,
    GOOGLE_AUTH,
    HF_HUB,
    release,
)

ROOT = Path(__file__).resolve().parents[2]
# By the name as pins are compared (google-auth: google_auth).
FLOORS = {
    r.dist.replace("-", "_"): r.floor
    for r in (HF_HUB, BOTO3, BOTOCORE, GOOGLE_AUTH, AZURE_IDENTITY)
}


def _pins(lines: list[str], op: str) -> dict[str, str]:
    pins = {}
    for line in lines:
        match = re.fullmatch(rf"\s*([A-Za-z0-9_.-]+)\s*{re.escape(op)}\s*([0-9][^\s,;]*)\s*", line)
        if match:
            pins[match.group(1).replace("-", "_").lower()] = match.group(2)
    return pins


def test_pyproject_admits_exactly_the_floors() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _pins(project["dependencies"], ">=")
    assert {dist: pins.get(dist) for dist in FLOORS} == FLOORS


def test_make_floors_installs_exactly_the_floors() -> None:
    lines = (ROOT / "tests" / "floors" / "constraints.txt").read_text().splitlines()
    assert _pins([ln for ln in lines if not ln.startswith("#")], "==") == FLOORS


def test_release_order() -> None:
    assert release("1.0.0rc1") < release("1.0.0") == release("1.0") < release("1.0.1")
    assert release("0.36.2") < release("1.0.0") < release("2.4.0") < release("10.0")
    assert release("1.0.0.dev0") < release("1.0.0") <= release("1.0.0.post1")
    assert release("1.29.0") >= release("1.29.0")
