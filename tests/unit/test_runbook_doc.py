"""The runbook in docs/operations.md (#13 item 8) covers every reason, states
its exit code and retryability as the code has them, and quotes its remedy
verbatim (the text the user sees in the message)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from llmkube_stager.errors import (
    REMEDIES_BY_KIND,
    Reason,
    SourceKind,
    StagerError,
    exit_code_for,
    remedy_for,
)

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "docs" / "operations.md").read_text()
RUNBOOK = TEXT.split("## Runbook\n", 1)[1].split("\n## ", 1)[0]
FAILURES = [r for r in Reason if r is not Reason.SUCCEEDED]


def _sections() -> dict[str, str]:
    parts = re.split(r"^### (\S+)\n", RUNBOOK, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_one_section_per_failure_reason() -> None:
    assert sorted(_sections()) == sorted(r.value for r in FAILURES)


@pytest.mark.parametrize("reason", FAILURES, ids=str)
def test_the_section_states_the_exit_code_and_retryability(reason: Reason) -> None:
    section = _sections()[reason.value]
    assert re.match(rf"Exit {exit_code_for(reason)}\b", section.strip()), section[:80]
    retryable = StagerError("x", reason=reason).retryable
    assert ("retryable" in section.split(".", 1)[0]) is retryable


@pytest.mark.parametrize("reason", FAILURES, ids=str)
def test_the_section_quotes_the_remedy_verbatim(reason: Reason) -> None:
    section = _flat(_sections()[reason.value])
    kinds: tuple[SourceKind | None, ...] = (None,)
    if reason in REMEDIES_BY_KIND:
        kinds = (None, *get_args(SourceKind))
    for kind in kinds:
        assert _flat(remedy_for(reason, kind)) in section, (reason, kind)
