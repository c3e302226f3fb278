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
}
# Schemes of the contract whose adapters are not part of this build yet.
_PLANNED = ("hf", "s3", "file", "pvc")


def scheme_of(source: str) -> str:
    if source.startswith("/"):
        return "file"
    return urlsplit(source).scheme.lower()


def open_source(config: Config) -> Source:
    scheme = scheme_of(config.source)
    target = _REGISTRY.get(scheme)
    if target is None:
        if scheme in _PLANNED:
            raise ConfigError(f"MODEL_SOURCE scheme {scheme}:// is not supported by this build yet")
        raise ConfigError(f"MODEL_SOURCE has an unknown scheme {scheme!r}")
    module_name, _, class_name = target.partition(":")
    factory = getattr(importlib.import_module(module_name), class_name)
    source: Source = factory(config)
    return source
