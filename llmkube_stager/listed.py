"""The manifest of a model without MODEL_FILES (#24 item 5): from the
recorded listing or from a fresh one.

IfNotPresent uses the listing this directory recorded (cache/listrec.py)
when it answers the same MODEL_SOURCE: a warm start asks nothing, and an
interrupted run finishes the set it started, never a newer one (each GET
carries the listed ETag as If-Match: an object changed since is
ModelSourceChanged, not a mixed set). OnChange, and a directory without a
record, list the source again; OnChange then compares every file's recorded
ETag with the listed one (executor.py records them) and refreshes the set
as a whole. The new listing is recorded before the run's first publish
(executor.py), as a Hugging Face run records its commit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmkube_stager.cache.listrec import read_listing
from llmkube_stager.config import Config
from llmkube_stager.layout import check_path_room
from llmkube_stager.logs import Log
from llmkube_stager.model import Manifest
from llmkube_stager.sources.base import ListingSource


def listed_manifest(
    config: Config, source: ListingSource, log: Log, sleep: Callable[[float], None]
) -> Manifest:
    recorded = read_listing(config.cache_dir)
    if (
        config.refresh_policy == "IfNotPresent"
        and recorded is not None
        and recorded.source == _answers(source)
    ):
        source.use_listing(recorded)
        return source.manifest()
    from llmkube_stager.transfer.retry import RetryBudget

    budget = RetryBudget(config.timeouts, sleep, log)

    def retry(ask: Callable[[], Any]) -> Any:
        return budget.call(ask, "the listing")

    listing = source.list_files(retry)
    check_path_room(config.cache_dir, tuple(f.rel for f in listing.files), pinned=frozenset())
    log.info(
        "listed",
        f"Listed {len(listing.files)} files under {listing.source}",
        files=len(listing.files),
        size_bytes=sum(f.size_bytes for f in listing.files),
    )
    source.use_listing(listing)
    return source.manifest()


def _answers(source: ListingSource) -> str:
    return source.listing_source
