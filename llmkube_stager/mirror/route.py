"""What a run with a mirror knows before it asks anything, and the values
its fetcher (reader.py) passes around: where the origin lives in the
mirror, what the origin and the mirror said of a file, and the rules by
which a manifest's entry is taken as the origin's version (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from llmkube_stager.config import Config
from llmkube_stager.errors import SourceError
from llmkube_stager.mirror.layout import (
    SINGLE_NAME,
    Entry,
    Place,
    hf_identity,
    origin_key,
    ref_name,
    url_identity,
)
from llmkube_stager.model import RemoteFile
from llmkube_stager.sources.base import RemoteMeta, Source


@dataclass(frozen=True)
class Route:
    """What the run knows of its origin before asking anything."""

    identity: str
    place: Place
    ref: str  # refs/<ref>.json: the revision, or "latest"
    multi: bool
    commits: bool  # the origin's versions are commits (Hugging Face)
    only: bool  # LLMKUBE_MIRROR_ONLY
    ask_origin: bool  # the origin's validators are wanted per file

    def name_of(self, file: RemoteFile) -> str:
        return file.rel if self.multi else SINGLE_NAME


def route_of(config: Config, source: Source) -> Route:
    from llmkube_stager.sources.hf.source import HfSource

    mirror = config.mirror
    assert mirror is not None
    if isinstance(source, HfSource):
        identity = hf_identity(source.ref.repo, source.ref.path)
        ref, commits = ref_name(source.revision or "main"), True
    else:
        identity, ref, commits = url_identity(source.kind, config.source), ref_name(None), False
    ask = not mirror.only and (mirror.publish or config.refresh_policy == "OnChange")
    return Route(
        identity,
        Place(origin_key(identity)),
        ref,
        config.multi_file,
        commits,
        mirror.only,
        ask,
    )


class MirrorMiss(Exception):
    """The mirror does not hold what is asked: absent, or not this version."""


class MirrorDown(Exception):
    """The mirror did not answer as a store does (unreachable, 403, 5xx)."""

    def __init__(self, error: SourceError) -> None:
        super().__init__(error.detail)
        self.error = error


@dataclass(frozen=True)
class Asked:
    """What the origin said before the mirror was asked: its answer, its
    failure, or nothing (it was not asked)."""

    answer: RemoteMeta | None = None
    failure: SourceError | None = None


@dataclass(frozen=True)
class Why:
    """Why the mirror does not serve a file; `error` when it failed (not
    merely lacks the file)."""

    text: str
    error: SourceError | None = None


@dataclass(frozen=True)
class Chosen:
    """A file served from the mirror: its object, the mirror's own answer,
    and the manifest's entry."""

    file: RemoteFile
    meta: RemoteMeta
    key: str
    entry: Entry


def check_entry(entry: Entry, origin: RemoteMeta | None, file: RemoteFile) -> None:
    """A manifest entry the origin or the user contradicts is not used."""
    if file.sha256 is not None and file.sha256 != entry.sha256:
        raise MirrorMiss(f"the mirror's sha256 of {file.rel} is not the pinned one")
    if origin is None:
        return
    if origin.size_bytes is not None and origin.size_bytes != entry.size_bytes:
        raise MirrorMiss(f"the mirror's size of {file.rel} is not the origin's")
    if origin.sha256 is not None and origin.sha256 != entry.sha256:
        raise MirrorMiss(f"the mirror's sha256 of {file.rel} is not the one the origin lists")
    if origin.validator != (entry.etag or entry.last_modified):
        # A hub's validator is the file's LFS sha256 or git blob id: a
        # manifest that names another is not of this version.
        raise MirrorMiss(f"the origin holds another version of {file.rel} than the mirror")


def as_origin(chosen: Chosen, origin: RemoteMeta | None) -> RemoteMeta:
    """The mirror's bytes as the origin's version: the origin's validators
    (recorded), the manifest's sha256 (checked while received), the mirror
    object's validators as the pins of its GETs."""
    entry, meta = chosen.entry, chosen.meta
    return RemoteMeta(
        url=meta.url,
        size_bytes=entry.size_bytes,
        etag=entry.etag if origin is None else origin.etag,
        accept_ranges=meta.accept_ranges,
        if_range=meta.if_range,
        if_match=meta.if_match,
        sha256=entry.sha256,
        last_modified=entry.last_modified if origin is None else origin.last_modified,
    )
