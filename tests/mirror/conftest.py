"""Fixtures of the mirror tests (docs/mirror.md): SeaweedFS as the mirror,
the fake hub or a loopback origin as the origin."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from tests.harness.pod import SOURCE_BUDGET


@pytest.fixture
def pod_budget() -> Mapping[str, str]:
    return SOURCE_BUDGET
