"""Exit codes a Job can act on (#13 item 4, CONTRACT §5): every reason's
`retryable` flag and exit code agree with the contract's table, and the
table in docs/operations.md says the same."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmkube_stager.errors import Reason, StagerError, exit_code_for
from tests.harness.contract import EXIT_PERMANENT, EXIT_RETRYABLE, REASONS

ROOT = Path(__file__).resolve().parents[2]


def test_the_table_names_every_reason_and_nothing_else() -> None:
    assert set(REASONS) == {r.value for r in Reason}


@pytest.mark.parametrize("reason", [r for r in Reason if r is not Reason.SUCCEEDED], ids=str)
def test_retryable_and_exit_code_agree_with_the_contract(reason: Reason) -> None:
    retryable, code = REASONS[reason.value]
    err = StagerError("x", reason=reason)
    assert err.retryable is retryable
    assert err.exit_code == code
    assert exit_code_for(reason) == code


def test_success_exits_zero() -> None:
    assert exit_code_for(Reason.SUCCEEDED) == 0


@pytest.mark.parametrize("reason", list(Reason), ids=str)
def test_exit_code_one_means_retryable_and_four_means_not(reason: Reason) -> None:
    """A podFailurePolicy keys on the exit code alone: 1 must never hide a
    failure that retrying cannot fix, and 4 never one it can."""
    code = exit_code_for(reason)
    retryable = StagerError("x", reason=reason).retryable
    if code == EXIT_RETRYABLE:
        assert retryable
    if retryable:
        assert code == EXIT_RETRYABLE
    if code == EXIT_PERMANENT:
        assert not retryable


def _doc_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([A-Za-z]+)`", cells[0]) if len(cells) > 2 else None
        if match and match.group(1) in REASONS:
            rows[match.group(1)] = cells
    return rows


def test_operations_doc_lists_every_reason_with_its_exit_code_and_retryable() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Reasons", 1)[1].split("\n## ", 1)[0]
    rows = _doc_rows(section)
    assert set(rows) == set(REASONS)
    for reason, cells in rows.items():
        retryable, code = REASONS[reason]
        assert cells[1] == ("yes" if retryable else "no"), (reason, cells)
        assert cells[2] == str(code), (reason, cells)
        assert cells[3], f"{reason}: the doc must say why it is (not) retryable"


@pytest.mark.parametrize("doc", ["README.md", "docs/contract.md"])
def test_exit_code_four_is_documented(doc: str) -> None:
    text = (ROOT / doc).read_text()
    assert re.search(r"\b4\b[^.]*(retry|cannot)", text), f"{doc} does not document exit code 4"
