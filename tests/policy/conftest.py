"""Fixtures of the refresh-policy and sha256-pin tests (see policy_support)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from policy_support import Pod

from tests.harness.origin import Origin


@pytest.fixture
def pod(tmp_path: Path) -> Pod:
    return Pod(tmp_path)


@pytest.fixture
def origin() -> Iterator[Origin]:
    with Origin() as srv:
        yield srv
