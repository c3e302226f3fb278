"""The agent's S3 fetcher built the way the stage builds it, from a pod's
variables (`seaweed.s3_env`), with the one file the source lists: for the
tests that drive a fetch directly (presign expiry, ranged reads)."""

from __future__ import annotations

from collections.abc import Mapping

from llmkube_stager.config import load_config
from llmkube_stager.model import RemoteFile
from llmkube_stager.sources.s3.source import S3Fetcher, S3Source


def fetcher_for(
    env: Mapping[str, str], *, presign_expiry_s: int = 900
) -> tuple[S3Fetcher, RemoteFile]:
    config = load_config(dict(env), {})
    source = S3Source(config)
    fetcher = S3Fetcher(config, source.ref, source.settings, presign_expiry_s=presign_expiry_s)
    return fetcher, source.manifest().files[0]
