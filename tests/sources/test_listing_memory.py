"""#41 item 5, memory: a listing of a cloud prefix stays within the agent's
64 MiB up to the file-count bound (MAX_LISTED_OBJECTS, sources/prefix.py),
for s3://, gs:// and Azure by the same code, and one object more is
refused naming the bound. The objects come from a fast fake of each
cloud's listing answers (tests/harness/listings.py), one page at a time;
each listing runs in a process of its own, whose peak RSS is read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.sources.prefix import MAX_LISTED_OBJECTS
from tests.harness.listings import list_through_the_agent

_ROOT = Path(__file__).resolve().parents[2]
_BUDGET_MIB = 64


@pytest.mark.parametrize("cloud", ["s3", "gs", "az"])
def test_a_listing_at_the_file_count_bound_stays_within_64_mib(cloud: str) -> None:
    """Peak RSS of a process that only lists (the interpreter and the
    listing modules, ~12 MiB, included), MAX_LISTED_OBJECTS objects of
    ~90-byte names. Failed before: s3 64.4, gs 70.2, Azure 70.7 MiB (at
    1,000 blobs a page; ~80 at the 5,000 asked then): every name held a
    second time by the repeat check, a __dict__ per listed file."""
    env = {**os.environ, "PYTHONPATH": str(_ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "tests.harness.listings", cloud, str(MAX_LISTED_OBJECTS)],
        cwd=_ROOT, env=env, capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    figures = json.loads(out)
    assert figures["files"] == MAX_LISTED_OBJECTS
    peak_mib = figures["peak_kib"] / 1024
    assert peak_mib < _BUDGET_MIB, f"{cloud}: peak RSS {peak_mib:.1f} MiB"


def test_one_object_past_the_bound_is_refused_naming_it() -> None:
    with pytest.raises(SourceError) as caught:
        list_through_the_agent("s3", MAX_LISTED_OBJECTS + 1)
    assert caught.value.reason is Reason.SOURCE_REJECTED
    assert f"more than {MAX_LISTED_OBJECTS} files" in str(caught.value)
    assert "MODEL_FILES" in str(caught.value)
