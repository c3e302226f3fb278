"""The cache package (llmkube_stager/cache/) keeps no function only tests
call (review of #32: `runrecord.writer_of` was used by tests alone, which
then asserted a helper instead of the behaviour). Every public top-level
function and class of it is used by the agent itself: called, imported or
referenced somewhere in llmkube_stager/ beyond its own definition.

The same holds for sources/ (wire/probe.py's httpx `make_client` and
`probe_head`, and tls.py's `is_cert_failure`, outlived their last caller
by many issues): a source class the scheme table names by its import
path ("llmkube_stager.sources.s3.source:S3Source") counts as used."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "llmkube_stager"


def _used_names() -> set[str]:
    """Every name the package reads: plain names, attributes, imports."""
    used: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.ImportFrom):
                used.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                # schemes.py's rows name each Source class as "module:Class".
                module, sep, name = node.value.partition(":")
                if sep and module.startswith("llmkube_stager.") and name.isidentifier():
                    used.add(name)
    return used


def _defined(module: Path) -> list[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [n.name for n in tree.body if isinstance(n, kinds) and not n.name.startswith("_")]


def _unused(package: str) -> list[str]:
    used = _used_names()
    return [
        f"{module.relative_to(PACKAGE)}: {name}"
        for module in sorted((PACKAGE / package).rglob("*.py"))
        for name in _defined(module)
        if name not in used
    ]


def test_every_public_function_of_the_cache_package_is_used_by_the_agent() -> None:
    assert _unused("cache") == []


def test_every_public_function_of_the_sources_package_is_used_by_the_agent() -> None:
    assert _unused("sources") == []
