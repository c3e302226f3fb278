"""Run by `make floors` only (not collected by the suite: its name does not
start with test_): the floor venv really holds the floor releases, and both
HTTP stacks, so that the hub client is picked by the hub's version."""

from __future__ import annotations

from importlib import metadata

import pytest

from llmkube_stager.sources.deps import AZURE_IDENTITY, BOTO3, BOTOCORE, GOOGLE_AUTH, HF_HUB

pytestmark = pytest.mark.floors


def test_the_floor_venv_holds_the_floor_releases() -> None:
    floors = (HF_HUB, BOTO3, BOTOCORE, GOOGLE_AUTH, AZURE_IDENTITY)
    found = {r.dist: metadata.version(r.dist) for r in floors}
    assert found == {r.dist: r.floor for r in floors}


def test_both_http_stacks_are_installed() -> None:
    # huggingface_hub 1.x speaks httpx; handing it an httpx2 client (2.x's
    # stack) breaks its error types. With both present, the choice shows.
    assert metadata.version("httpx") and metadata.version("httpx2")
