"""The one way a test says that this machine lacks a system feature it needs
(root, a tmpfs mount, setpriv, sparse files): on a developer's machine the
test is skipped with the feature named; in CI (CI=true), where every feature
is installed, it fails at once with the same words (tests/conftest.py turns
any other skip into a failure there too)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing_feature(feature: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"missing system feature in CI: {feature}")
    pytest.skip(f"missing system feature: {feature}")
