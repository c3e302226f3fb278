"""Scheme registry: MODEL_SOURCE -> the Source that handles it.

Modules are imported only when their scheme is used, so a warm start over
HTTP never imports boto3 or huggingface_hub (ARCHITECTURE idea 4).
"""

from __future__ import annotations

import importlib
from urllib.parse import urlsplit

from llmkube_stager.config import Config
from llmkube_stager.errors import ConfigError
from llmkube_stager.logs import Log
from llmkube_stager.sources.base import Source
from llmkube_stager.sources.deps import BOTO3, BOTOCORE, HF_HUB, Requirement, require

_REGISTRY: dict[str, str] = {
    "http": "llmkube_stager.sources.http:HttpSource",
    "https": "llmkube_stager.sources.http:HttpSource",
    "hf": "llmkube_stager.sources.hf.source:HfSource",
    "s3": "llmkube_stager.sources.s3.source:S3Source",
    "file": "llmkube_stager.sources.local:LocalSource",
    "pvc": "llmkube_stager.sources.local:PvcSource",
}
_PLANNED: tuple[str, ...] = ()
# Sources that log what they decide (the hub mirror fallback) take the run's log.
_TAKES_LOG = frozenset({"hf"})
# The libraries each source module imports lazily; deps.py has the floors.
_LIBRARIES: dict[str, tuple[Requirement, ...]] = {
    "llmkube_stager.sources.hf.source": (HF_HUB,),
    "llmkube_stager.sources.s3.source": (BOTO3, BOTOCORE),
}


def scheme_of(source: str) -> str:
    if source.startswith("/"):
        return "file"
    try:
        return urlsplit(source).scheme.lower()
    except ValueError:  # "http://[::1" and other unparsable netlocs
        raise ConfigError("MODEL_SOURCE is not a URL the agent can parse") from None


def open_source(config: Config, log: Log | None = None) -> Source:
    scheme = scheme_of(config.source)
    if _may_be_hf(scheme, config.hf_endpoint):
        from llmkube_stager.sources.hf.ref import is_hf_url

        if is_hf_url(config.source, config.hf_endpoint):
            scheme = "hf"
    target = _REGISTRY.get(scheme)
    if target is None:
        if scheme in _PLANNED:
            raise ConfigError(f"MODEL_SOURCE scheme {scheme}:// is not supported by this build yet")
        raise ConfigError(f"MODEL_SOURCE has an unknown scheme {scheme!r}")
    module_name, _, class_name = target.partition(":")
    factory = getattr(importlib.import_module(module_name), class_name)
    source: Source = factory(config, log) if scheme in _TAKES_LOG else factory(config)
    return source


def check_libraries(source: Source) -> None:
    """InvalidConfiguration when a library the source will import is missing
    or too old (#13 item 1). Metadata only; called before anything is written,
    and only when the origin will be asked (never on a warm start)."""
    for requirement in _LIBRARIES.get(type(source).__module__, ()):
        require(requirement)


def _may_be_hf(scheme: str, hf_endpoint: str) -> bool:
    """What is_hf_url can answer yes to: an https URL (huggingface.co), or
    any http(s) URL under an HF_ENDPOINT mirror. A plain http origin with
    no mirror set never is: its start skips hf/ref.py and its header math
    (~5 ms, #16)."""
    return scheme == "https" or (scheme == "http" and bool(hf_endpoint.strip()))
