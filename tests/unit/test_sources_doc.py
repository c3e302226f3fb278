"""docs/sources.md cannot drift from the code: the S3 error mapping tables
are the code's tables (sources/s3/errors.py), and every variable the S3
source hands to botocore is documented there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmkube_stager.config import AWS_ENV_VARS
from llmkube_stager.errors import Reason
from llmkube_stager.sources.s3.errors import ERROR_CODES, STATUSES, reason_for

DOC = Path(__file__).resolve().parents[2] / "docs" / "sources.md"
_ROW_RE = re.compile(r"\|\s*`?([^|`]+?)`?\s*\|\s*`(\w+)`\s*\|")


def _table(marker: str) -> list[tuple[str, Reason]]:
    text = DOC.read_text()
    start = text.index(f"<!-- {marker}")
    end = text.index(f"<!-- /{marker} -->", start)
    rows = [_ROW_RE.match(line.strip()) for line in text[start:end].splitlines()]
    return [(m.group(1), Reason(m.group(2))) for m in rows if m is not None]


def test_the_error_code_table_is_the_code_s_table() -> None:
    rows = _table("s3-error-codes")
    assert len(rows) == len({code for code, _ in rows}), "a code is listed twice"
    assert dict(rows) == ERROR_CODES


def test_the_status_table_is_the_code_s_table() -> None:
    rows = dict(_table("s3-statuses"))
    other_5xx = rows.pop("other 5xx")
    any_other = rows.pop("any other")
    assert {int(status): reason for status, reason in rows.items()} == STATUSES
    for status in (500, 502, 504, 599):
        assert status not in STATUSES
        assert reason_for("", status) is other_5xx
    for status in (400, 405, 409, 416, 418):
        assert reason_for("", status) is any_other


@pytest.mark.parametrize("code", sorted(ERROR_CODES))
def test_a_code_wins_over_its_status(code: str) -> None:
    assert reason_for(code, 400) is ERROR_CODES[code]


def test_every_variable_botocore_gets_is_documented() -> None:
    text = DOC.read_text()
    section = text[text.index("## S3") : text.index("## Local files")]
    documented = set(re.findall(r"`(AWS_[A-Z0-9_]+)`", section))
    handed = {name for name in AWS_ENV_VARS if name.startswith("AWS_")}
    assert handed <= documented, sorted(handed - documented)
