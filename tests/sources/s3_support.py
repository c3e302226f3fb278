"""Helpers of the S3 tests: the pod environment for SeaweedFS (s3_env, from
tests/harness/seaweed.py), and a fetcher built the way the stage builds it."""

from __future__ import annotations

from collections.abc import Mapping

from llmkube_stager.config import load_config
from llmkube_stager.model import RemoteFile
from llmkube_stager.sources.s3.source import S3Fetcher, S3Source
from tests.harness.seaweed import s3_env

__all__ = ["KIB", "MIB", "fetcher_for", "s3_env", "without_keys"]

KIB = 1024
MIB = 1024 * KIB


def without_keys(env: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in env.items()
        if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
    }


def fetcher_for(
    env: Mapping[str, str], *, presign_expiry_s: int = 900
) -> tuple[S3Fetcher, RemoteFile]:
    config = load_config(dict(env), {})
    source = S3Source(config)
    fetcher = S3Fetcher(config, source.ref, source.settings, presign_expiry_s=presign_expiry_s)
    return fetcher, source.manifest().files[0]
