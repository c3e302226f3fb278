"""Listings at the page size the agent asks (#33 item 4), of Azurite's own
making: List Blobs with maxresults=PAGE_BLOBS (1,000 since #41 item 5; the
service allows 5,000), so PAGE_BLOBS + 1 blobs take two pages with no
front lowering the size. `slow`: `make torture` runs it, the quick scale
leaves it out; tests/sources/test_azure.py crosses pages capped by the
front in every run.
"""

from __future__ import annotations

import pytest

from llmkube_stager.sources.azure.listing import PAGE_BLOBS
from tests.harness.azurite import Azurite, put, put_many
from tests.harness.sample import KIB, payload

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("azure_loopback_only")]


def test_an_azure_listing_past_the_services_own_page_is_followed(pod, az, container) -> None:
    """More than one page of List Blobs (PAGE_BLOBS each): NextMarker is
    followed; the patterns keep the transfer small."""
    put_many(az, container, [f"m/shard-{i:05d}.bin" for i in range(PAGE_BLOBS + 1)], b"x")
    keep = payload(8 * KIB, 2)
    put(az, container, "m/zz-keep.bin", keep)
    env = pod.env | {
        "MODEL_SOURCE": Azurite.source(container, "m"),
        "CACHE_DIR": str(pod.cache_dir),
        "STORAGE_ALLOW_PATTERNS": '["zz-*", "shard-00000.bin"]',
        "AZURE_STORAGE_CONNECTION_STRING": az.connection_string(),
    }

    pod.run(env=env).ok(files=2, fetched=2)

    assert (pod.cache_dir / "zz-keep.bin").read_bytes() == keep
    lists = [r for r in az.requests("GET") if "comp=list" in r.query]
    assert len(lists) == 2
    assert "marker" not in lists[0].params and lists[1].params["marker"][0]
