"""The agent as it ships, for the bench to run: a virtualenv of its own with
the image's locked dependencies (image/requirements.lock, hashes checked)
and this tree built into a wheel and installed without `-e`, as the image's
Dockerfile does.

Why not the dev virtualenv: its editable install puts a meta-path finder on
every start (setuptools' `__editable___*_finder`, which imports pathlib and
urllib.parse: ~20 ms of a ~300 ms warm start) and its httpx imports rich; a
pod runs neither. The venv is built once per source digest under
`.bench/agent-<digest>` and reused; `BENCH_PYTHON` names another
interpreter instead (e.g. the dev venv's, to compare).
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LOCK = os.path.join(ROOT, "image", "requirements.lock")
_BUILD_LOCK = os.path.join(ROOT, "image", "build-requirements.lock")


def agent_python() -> str:
    """The interpreter the bench runs the agent (and its Python peers) with."""
    override = os.environ.get("BENCH_PYTHON")
    if override:
        return override
    venv = os.path.join(ROOT, ".bench", f"agent-{_source_digest()[:16]}")
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(os.path.join(venv, ".ready")):
        _build(venv, python)
    return python


def _source_digest() -> str:
    """What the venv holds: the locked dependencies and the package."""
    sha = hashlib.sha256()
    files = [_LOCK, os.path.join(ROOT, "pyproject.toml")]
    files += sorted(glob.glob(os.path.join(ROOT, "llmkube_stager", "**", "*.py"), recursive=True))
    for path in files:
        sha.update(os.path.relpath(path, ROOT).encode() + b"\0")
        with open(path, "rb") as handle:
            sha.update(hashlib.sha256(handle.read()).digest())
    return sha.hexdigest()


def _build(venv: str, python: str) -> None:
    print(f"building the agent's venv {os.path.relpath(venv, ROOT)} ...", flush=True)
    for old in glob.glob(os.path.join(ROOT, ".bench", "agent-*")):
        shutil.rmtree(old, ignore_errors=True)
    _locked_venv(venv, _LOCK)
    with tempfile.TemporaryDirectory(prefix="bench-wheel-") as wheels:
        # Built with the image's pinned build tools in a venv of their own
        # (reused), installed without dependencies (the lock has them).
        builder = os.path.join(ROOT, ".bench", "build-venv")
        if not os.path.exists(os.path.join(builder, ".ready")):
            _locked_venv(builder, _BUILD_LOCK)
            _mark_ready(builder)
        build_py = os.path.join(builder, "bin", "python")
        _pip(build_py, "wheel", "--no-build-isolation", "--no-deps", "--wheel-dir", wheels, ROOT)
        built = glob.glob(os.path.join(wheels, "llmkube_stager-*.whl"))
        _pip(python, "install", "--no-deps", "--no-index", *built)
    _mark_ready(venv)


def _locked_venv(venv: str, lock: str) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    _pip(python, "install", "--require-hashes", "--no-deps", "--only-binary", ":all:", "-r", lock)


def _pip(python: str, *args: str) -> None:
    """The dev venv's pip acting on `python`'s environment; its chatter
    shown only when it fails."""
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", python]
    done = subprocess.run([*cmd, *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise RuntimeError(f"pip {args[0]} for the bench's agent venv failed")


def _mark_ready(venv: str) -> None:
    open(os.path.join(venv, ".ready"), "w").close()
