"""Runs INSIDE the image, with the image's Python (mounted read-only at /probe:
test code never goes into the image). Writes one JSON report to argv[1].

    probe.py REPORT bytecode [CLI ARGS...]  every .py of the venv against its
        .pyc, then the CLI in-process with CLI ARGS, recording each module
        Python had to compile from source (none may: read-only root).
    probe.py REPORT contents                what is installed: modules, tools,
        paths and the venv's distributions.
    probe.py REPORT timed ARGV...            ARGV as a child: wall seconds, exit
        code and the child's own peak RSS (wait4, as GNU time's %M).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

# Modules and tools that belong to building or testing, never to the image.
FORBIDDEN_MODULES = (
    "pip",
    "setuptools",
    "wheel",
    "ensurepip",
    "pytest",
    "_pytest",
    "moto",
    "mypy",
    "ruff",
    "pyfakefs",
    "trustme",
    "tests",
)
FORBIDDEN_TOOLS = ("pip", "pip3", "gcc", "cc", "c++", "ld", "make", "as", "weed")
FORBIDDEN_PATHS = ("/src", "/wheels", "/approot", "/opt/build", "/root/.cache", "/tmp/pip")


def pyc_problem(source: Path) -> str | None:
    """Why Python would compile `source` instead of loading its .pyc, or None."""
    cached = Path(importlib.util.cache_from_source(str(source)))
    try:
        header = cached.read_bytes()[:16]
    except OSError:
        return "no .pyc"
    if header[:4] != importlib.util.MAGIC_NUMBER:
        return "wrong magic"
    flags = int.from_bytes(header[4:8], "little")
    if flags & 0b1:  # hash-based (PEP 552)
        if flags & 0b10 and header[8:16] != importlib.util.source_hash(source.read_bytes()):
            return "stale (hash)"
        return None
    st = source.stat()
    if int.from_bytes(header[8:12], "little") != int(st.st_mtime) & 0xFFFFFFFF:
        return "stale (mtime)"
    if int.from_bytes(header[12:16], "little") != st.st_size & 0xFFFFFFFF:
        return "stale (size)"
    return None


def stale_under(root: Path) -> dict[str, str]:
    return {
        str(path): problem
        for path in sorted(root.rglob("*.py"))
        if (problem := pyc_problem(path)) is not None
    }


def bytecode(cli_args: list[str]) -> dict[str, Any]:
    paths = sysconfig.get_paths()
    site, stdlib = Path(paths["purelib"]), Path(paths["stdlib"])
    compiled: list[str] = []
    loader = importlib.machinery.SourceFileLoader
    original = loader.source_to_code

    def recording(self: Any, data: Any, path: Any, *, _optimize: int = -1) -> Any:
        # Called only when no valid .pyc could be used for a module.
        compiled.append(str(path))
        return original(self, data, path, _optimize=_optimize)

    loader.source_to_code = recording  # type: ignore[method-assign]
    from llmkube_stager.entry import main  # the console script's path

    try:
        main(cli_args)
        code: object = 0
    except SystemExit as done:
        code = done.code
    return {
        "site": str(site),
        "stale": stale_under(site),
        "stdlib": str(stdlib),
        "stdlib_stale": stale_under(stdlib),
        "compiled": compiled,
        "exit": code,
    }


def contents() -> dict[str, Any]:
    from importlib.metadata import distributions

    return {
        "executable": sys.executable,
        "prefix": sys.prefix,
        "version": sys.version.split()[0],
        "modules": {name: importlib.util.find_spec(name) is not None for name in FORBIDDEN_MODULES},
        "tools": {name: shutil.which(name) for name in FORBIDDEN_TOOLS},
        "paths": {path: os.path.lexists(path) for path in FORBIDDEN_PATHS},
        "distributions": sorted(
            (dist.metadata["Name"], dist.version) for dist in distributions(path=sys.path)
        ),
        "dont_write_bytecode": sys.dont_write_bytecode,
        "uid": os.getuid(),
        "gid": os.getgid(),
        "home": os.environ.get("HOME"),
    }


def timed(argv: list[str]) -> dict[str, Any]:
    started = time.perf_counter()
    pid = os.posix_spawnp(argv[0], argv, os.environ)
    _, status, usage = os.wait4(pid, 0)
    return {
        "seconds": time.perf_counter() - started,
        "exit": os.waitstatus_to_exitcode(status),
        "max_rss_kib": usage.ru_maxrss,
    }


def main() -> None:
    report, command, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    if command == "bytecode":
        doc = bytecode(rest)
    elif command == "contents":
        doc = contents()
    elif command == "timed":
        doc = timed(rest)
    else:
        raise SystemExit(f"unknown probe {command!r}")
    Path(report).write_text(json.dumps(doc))


if __name__ == "__main__":
    main()
