"""docs/design.md's module table names every module of the package (#23
item 4: five were missing): a module added without its row fails here."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "llmkube_stager"
DOC = ROOT / "docs" / "design.md"


def _rows() -> list[tuple[str, str]]:
    """(first cell, whole row) of the table that starts with `| module | role |`."""
    lines = DOC.read_text().splitlines()
    start = lines.index("| module | role |")
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append((line.split("|")[1], line))
    return rows


def unnamed(rows: list[tuple[str, str]]) -> list[str]:
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.name == "__init__.py":
            continue  # a package is named by its row
        parts = rel.parts
        if len(parts) == 1:
            named = any(f"`{rel.name}`" in first for first, _ in rows)
        else:
            # A package's row names each module by its file name, and the
            # sub-package it is in (`s3/` ... `clients.py`).
            inner = [f"`{p}/" for p in parts[1:-1]]
            named = any(
                f"`{parts[0]}/`" in first
                and f"`{rel.name}`" in row
                and all(s in row for s in inner)
                for first, row in rows
            )
        if not named:
            missing.append(str(rel))
    return missing


def test_the_module_table_names_every_module() -> None:
    assert unnamed(_rows()) == []


def test_the_check_sees_a_module_without_its_row() -> None:
    rows = [(first, row) for first, row in _rows() if "`plan.py`" not in first]
    assert unnamed(rows) == ["plan.py"]
