"""Suite-wide rules.

In CI (CI=true) a skipped test is a failure: skips exist only to name a
missing system feature on a developer's machine (bindfs, /dev/fuse, root),
and CI installs and has all of them (developers' guide: skips must not happen
in CI).
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every system feature must exist: {report.longrepr}"
