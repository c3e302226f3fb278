"""Scratch virtual environments for the dependency tests (#13 item 1).

Built once with the development venv's pip (`pip --python`, so the scratch
venv needs no pip of its own; wheels come from pip's cache or the local
index), kept under `.venvs/<name>-<hash>` at the repository root (ignored
by git) and reused while the package list and the interpreter are the same.
The agent is run from the checkout (`python -m llmkube_stager` with the
repository as working directory), never installed into them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".venvs"
_SOURCE_LIBRARIES = frozenset({"boto3", "botocore", "huggingface_hub", "huggingface-hub"})


def _core() -> tuple[str, ...]:
    """What the agent itself needs to start: pyproject's dependencies but the
    source libraries these tests take away."""
    import re
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as handle:
        deps = tomllib.load(handle)["project"]["dependencies"]
    name = re.compile(r"[A-Za-z0-9_.-]+")
    return tuple(d for d in deps if (m := name.match(d)) and m.group(0) not in _SOURCE_LIBRARIES)


CORE = _core()
_INSTALL_TIMEOUT_S = 600


def scratch_venv(name: str, packages: Sequence[str]) -> Path:
    """The python of a venv holding exactly `packages` (and their deps)."""
    key = hashlib.sha256(json.dumps([sys.version, list(packages)]).encode()).hexdigest()[:12]
    target = CACHE / f"{name}-{key}"
    if (target / ".ready").exists():
        return target / "bin" / "python"
    building = CACHE / f".{name}-{key}.{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    CACHE.mkdir(exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(building)],
        check=True,
        capture_output=True,
    )
    if packages:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(building / "bin" / "python"),
                "install",
                "--quiet",
                "--disable-pip-version-check",
                *packages,
            ],
            capture_output=True,
            text=True,
            timeout=_INSTALL_TIMEOUT_S,
            check=False,
        )
        assert proc.returncode == 0, f"pip install {packages} failed:\n{proc.stderr[-3000:]}"
    (building / ".ready").touch()
    try:
        building.rename(target)
    except OSError:  # another run built it meanwhile
        shutil.rmtree(building, ignore_errors=True)
    return target / "bin" / "python"
