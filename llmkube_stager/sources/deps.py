"""The third-party libraries a source kind needs, checked before first use.

boto3 and huggingface_hub are regular dependencies (pyproject.toml), still
imported only when their source is used, so a warm start pays for neither.
An image built without one, or with a release older than the APIs called
here, is a configuration problem of that image, not a bug in the agent:
`require` reports it as InvalidConfiguration naming the package, the floor
and what was found, before anything is imported or written.

The floors, each the first release with every API the code calls
(docs/sources.md "Library floors" has the evidence; `make floors` runs
the source tests against exactly these releases):

- huggingface_hub 1.0.0: `set_client_factory` (httpx migration, PR #3328,
  first in 1.0.0.rc0) and `close_session` (PR #3357, first in 1.0.0.rc1).
  0.x speaks `requests` and has neither.
- botocore 1.32.0 / boto3 1.29.0: EKS Pod Identity container credentials
  (`AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`, botocore 1.32.0) and
  `Config(ignore_configured_endpoint_urls=...)` (botocore 1.31.0: the S3
  source passes its endpoints itself, s3/session.py); the credential
  providers and config chains built from an explicit environment, and
  everything else the S3 modules call, are older.
- azure-identity 1.13.0: `WorkloadIdentityCredential` (AKS workload
  identity) and `disable_instance_discovery` (MSAL never asks
  login.microsoftonline.com which authorities exist) are both first in
  1.13.0 (checked in the 1.12.0 and 1.13.0 wheels); the Azure source
  imports it only for a service principal or workload identity (#33 item 2).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from llmkube_stager.errors import ConfigError

_RELEASE_RE = re.compile(r"(\d+(?:\.\d+)*)(.*)")


@dataclass(frozen=True)
class Requirement:
    dist: str  # the distribution name pip installs
    floor: str
    purpose: str  # "hf:// sources"


HF_HUB = Requirement("huggingface_hub", "1.0.0", "hf:// sources")
BOTO3 = Requirement("boto3", "1.29.0", "s3:// sources")
BOTOCORE = Requirement("botocore", "1.32.0", "s3:// sources")
# #33 item 1: gs:// credentials and token refresh (sources/gcs/auth.py).
GOOGLE_AUTH = Requirement("google-auth", "2.0.0", "gs:// sources")
AZURE_IDENTITY = Requirement("azure_identity", "1.13.0", "Azure Blob sources")
# By distribution name, as the scheme table names them (schemes.py, #32 item 1).
FLOORS: dict[str, Requirement] = {
    r.dist: r for r in (HF_HUB, BOTO3, BOTOCORE, GOOGLE_AUTH, AZURE_IDENTITY)
}


def release(version: str) -> tuple[tuple[int, ...], int]:
    """A sortable key: the numeric release, then 0 for a pre-release or
    development build (1.0.0rc0 < 1.0.0), 1 for a final or post release."""
    match = _RELEASE_RE.match(version.strip())
    if match is None:
        return (), 0
    numbers = tuple(int(n) for n in match.group(1).split("."))
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers = numbers[:-1]
    suffix = match.group(2).lower().lstrip(".-_")
    final = not suffix or suffix.startswith(("post", "+"))
    return numbers, 1 if final else 0


@functools.cache
def require(req: Requirement) -> str:
    """The installed version of `req.dist`; ConfigError when it is missing
    or older than the floor. Reads package metadata only (no import)."""
    from importlib import metadata

    try:
        found = metadata.version(req.dist)
    except metadata.PackageNotFoundError:
        raise ConfigError(
            f"{req.dist} >= {req.floor} is required for {req.purpose}; it is not installed "
            f"(pip install 'llmkube-stager' installs it)"
        ) from None
    if release(found) < release(req.floor):
        raise ConfigError(f"{req.dist} >= {req.floor} is required for {req.purpose}; found {found}")
    return found
