"""OnChange's revalidation (spec §8.5): one probe per present file, before
the plan is made again with what the origin said."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from urllib.parse import urlsplit

from llmkube_stager.acting.session import Session
from llmkube_stager.config import Config
from llmkube_stager.errors import SourceError
from llmkube_stager.model import Remote
from llmkube_stager.plan import probes_needed
from llmkube_stager.schemes import has_commits
from llmkube_stager.sources.base import RemoteMeta
from llmkube_stager.staging.prepare import Prepared, replan


def revalidate(config: Config, prepared: Prepared, session: Session) -> Prepared:
    own = prepared.mode.own(prepared.manifest)
    rels = probes_needed(own, prepared.cache, config.refresh_policy)
    remote: dict[str, Remote] = {}
    unreachable: dict[str, str] = {}
    for rel in rels:
        file = prepared.manifest.file(rel)
        remote[rel] = _probe_one(session, file.url, rel, unreachable, prepared)
    checked = _check_unrecorded(prepared, session, remote)
    return replan(config, replace(prepared, remote=remote, checked=checked))


def _check_unrecorded(
    prepared: Prepared, session: Session, remote: Mapping[str, Remote]
) -> dict[str, str]:
    """A Hugging Face copy without a recorded validator (staged by the
    scripts, or by a run that was interrupted) is not "unchanged" because
    its size matches: its bytes are checked against the hub's LFS sha256 or
    git blob id, once (#10 defect 12). The result stands in for the record."""
    from llmkube_stager.cache.state import holds_version

    checked: dict[str, str] = {}
    if not has_commits(prepared.manifest.kind):
        return checked
    for rel, answer in remote.items():
        local = prepared.cache.files[rel]
        meta = session.metas.get(rel)
        if local.validator or not answer.validator or meta is None or not local.present:
            continue
        same = holds_version(prepared.manifest.file(rel).dest, meta.sha256, meta.etag)
        checked[rel] = answer.validator if same else "unverified"
    return checked


def _probe_one(
    session: Session, url: str, rel: str, unreachable: dict[str, str], prepared: Prepared
) -> Remote:
    """One origin that did not answer is not asked again for every other
    file: a blackholed origin must not cost a timeout per shard (scenario 38)."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    if origin in unreachable:
        return Remote(answered=False, detail=unreachable[origin])
    try:
        # A share listed every file already (staging/share.py): asked once.
        meta: RemoteMeta = session.metas.get(rel) or session.probe(
            prepared.source, prepared.manifest.file(rel), prepared.manifest.root
        )
    except SourceError as err:
        if not err.answered:
            unreachable[origin] = err.detail
        elif prepared.source.get_without_probe:
            # Answered without a usable size (5xx/429 on HEAD): the transfer
            # tries the GET without asking again (spec §8.1 "try GET").
            from llmkube_stager.sources.wire.probe import unknown_meta

            session.metas[rel] = unknown_meta(url)
        return Remote(answered=err.answered, detail=err.detail)
    return Remote(answered=True, size_bytes=meta.size_bytes, validator=meta.validator)
