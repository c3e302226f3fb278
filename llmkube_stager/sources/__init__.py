"""Scheme registry: MODEL_SOURCE -> the Source that handles it.

Modules are imported only when their scheme is used, so a warm start over
HTTP never imports boto3 or huggingface_hub (ARCHITECTURE idea 4).
"""

from __future__ import annotations

import importlib
from urllib.parse import urlsplit

from llmkube_stager.config import Config
from llmkube_stager.errors import ConfigError
from llmkube_stager.sources.base import Source

_REGISTRY: dict[str, str] = {
    "http": "llmkube_stager.sources.http:HttpSource",
    "https": "llmkube_stager.sources.http:HttpSource",
    "hf": "llmkube_stager.sources.hf:HfSource",
    "s3": "llmkube_stager.sources.s3:S3Source",
    "file": "llmkube_stager.sources.local:LocalSource",
    "pvc": "llmkube_stager.sources.local:PvcSource",
}
_PLANNED: tuple[str, ...] = ()


def scheme_of(source: str) -> str:
    if source.startswith("/"):
        return "file"
    return urlsplit(source).scheme.lower()


def open_source(config: Config) -> Source:
    from llmkube_stager.sources.hfref import is_hf_url

    scheme = scheme_of(config.source)
    if scheme in ("http", "https") and is_hf_url(config.source, config.hf_endpoint):
        scheme = "hf"
    target = _REGISTRY.get(scheme)
    if target is None:
        if scheme in _PLANNED:
            raise ConfigError(f"MODEL_SOURCE scheme {scheme}:// is not supported by this build yet")
        raise ConfigError(f"MODEL_SOURCE has an unknown scheme {scheme!r}")
    module_name, _, class_name = target.partition(":")
    factory = getattr(importlib.import_module(module_name), class_name)
    source: Source = factory(config)
    return source
