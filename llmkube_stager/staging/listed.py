"""The manifest of a model without MODEL_FILES (#24 item 5): from the
recorded listing or from a fresh one.

IfNotPresent uses the listing this directory recorded (cache/listrec.py)
when it answers the same MODEL_SOURCE: a warm start asks nothing, and an
interrupted run finishes the set it started, never a newer one (each GET
carries the listed ETag as If-Match: an object changed since is
ModelSourceChanged, not a mixed set). OnChange, and a directory without a
record, list the source again; OnChange then compares every file's recorded
ETag with the listed one (acting/recorder.py records them) and refreshes the set
as a whole. With a trust anchor set, a listing no verification under that
anchor vouches for is listed again (`_first_signed_run`). The new listing
is recorded before the run's first publish (acting/recorder.py), as a
Hugging Face run records its commit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from llmkube_stager.cache.listrec import read_listing
from llmkube_stager.config import Config
from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.layout import check_path_room, staged_rel
from llmkube_stager.listing import Listing
from llmkube_stager.logs import Log
from llmkube_stager.model import Manifest
from llmkube_stager.sources.base import DigestListingSource, ListingSource, check_listed


class NotAsked(Exception):
    """The source was not asked: `plan` without `--probe` opens no
    connection (CONTRACT §2), so what only the source could say is left
    unknown, and `what` names it."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


Ask = Callable[[Callable[[], Any]], Any]


def asking(config: Config, log: Log, sleep: Callable[[float], None]) -> Ask:
    """Every request of the listing through one retry budget."""
    from llmkube_stager.transfer.retry import RetryBudget

    budget = RetryBudget(config.timeouts, sleep, log)

    def retry(ask: Callable[[], Any]) -> Any:
        return budget.call(ask, "the listing")

    return retry


def refusing(what: str) -> Ask:
    """In place of `asking` where the source may not be asked: every
    request the listing would make ends before it connects."""

    def refuse(ask: Callable[[], Any]) -> Any:
        raise NotAsked(what)

    return refuse


def listed_manifest(
    config: Config, source: ListingSource, log: Log, retry: Ask
) -> tuple[Manifest, tuple[str, ...]]:
    """The manifest, and what it could not know because `retry` refused to
    ask (`refusing`): only where a listing is recorded; without one,
    NotAsked propagates (nothing is known of the files)."""
    apart = config.kserve_mode  # a `x.sha256` is a file like any other (#31 item 4)
    recorded = read_listing(config.cache_dir, stamps_beside=not apart)
    if recorded is not None and recorded.source != _answers(config, source):
        recorded = None
    if (
        config.refresh_policy == "IfNotPresent"
        and recorded is not None
        and not _first_signed_run(config)
    ):
        source.use_listing(recorded)
        return source.manifest(), ()
    try:
        if (
            recorded is not None
            and isinstance(source, DigestListingSource)
            and source.listing_digest(retry) == recorded.base
        ):
            # OnChange of an artifact whose digest has not moved: one HEAD,
            # the recorded listing stands (#43).
            source.use_listing(recorded)
            return source.manifest(), ()
        listing = _filtered(config, source, source.list_files(retry))
    except NotAsked as not_asked:
        if recorded is None:
            raise
        # Not asked whether the source still lists these files: the
        # recorded listing is what the plan can be made from.
        source.use_listing(recorded)
        changed = f"whether {not_asked.what} changed since their listing was recorded"
        return source.manifest(), (changed,)
    # After the patterns, as KServe filters first (#31 item 4): a key the
    # user leaves out (a name of the agent's records) refuses nothing.
    check_listed(source.listing_source, listing.files, stamps_beside=not apart)
    rels = tuple(staged_rel(f.rel) if apart else f.rel for f in listing.files)
    check_path_room(config.cache_dir, rels, pinned=frozenset())
    log.info(
        "listed",
        f"Listed {len(listing.files)} files under {listing.source}",
        files=len(listing.files),
        size_bytes=sum(f.size_bytes for f in listing.files),
    )
    source.use_listing(listing)
    return source.manifest(), ()


def _first_signed_run(config: Config) -> bool:
    """A key's first run judges the source's listing, not one recorded by
    an earlier run without it (#40 item 6): that listing was never checked
    against a signature, and the set the publisher signed since may differ
    (a file added or removed), which the old listing would misreport as a
    signed set the source does not match. A verification recorded under
    this anchor means the recorded listing was the signed set."""
    if config.signing is None:
        return False
    from llmkube_stager.cache.sigrecord import read_verification, record_path

    recorded = read_verification(record_path(config.cache_dir, (), multi_file=True))
    return recorded is None or recorded.anchor_fingerprint != config.signing.fingerprint


def _answers(config: Config, source: ListingSource) -> str:
    """What a recorded listing must answer: the source, and the patterns
    that filtered it (other patterns list again)."""
    if not (config.allow_patterns or config.ignore_patterns):
        return source.listing_source
    allow, ignore = ",".join(config.allow_patterns), ",".join(config.ignore_patterns)
    return f"{source.listing_source} allow={allow} ignore={ignore}"


def _filtered(config: Config, source: ListingSource, listing: Listing) -> Listing:
    """KServe's _should_download: fnmatch on the relative path; allow first."""
    if not (config.allow_patterns or config.ignore_patterns) or listing.exact:
        return listing
    from fnmatch import fnmatch

    def wanted(rel: str) -> bool:
        if config.allow_patterns and not any(fnmatch(rel, p) for p in config.allow_patterns):
            return False
        return not any(fnmatch(rel, p) for p in config.ignore_patterns)

    files = tuple(f for f in listing.files if wanted(f.rel))
    if not files:
        raise SourceError(
            f"no file of {listing.source} matches STORAGE_ALLOW_PATTERNS / STORAGE_IGNORE_PATTERNS",
            reason=Reason.SOURCE_NOT_FOUND,
            answered=True,
        )
    return replace(listing, source=_answers(config, source), files=files)
