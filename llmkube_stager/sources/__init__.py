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
from llmkube_stager.schemes import SCHEMES, of_https_host, of_url_scheme
from llmkube_stager.sources.base import Source
from llmkube_stager.sources.deps import FLOORS, require

# The registry is the scheme table's (#32 item 1); a scheme refused as
# not yet built would be named here.
_PLANNED: tuple[str, ...] = ()


def scheme_of(source: str) -> str:
    if source.startswith("/"):
        return "file"
    try:
        return urlsplit(source).scheme.lower()
    except ValueError:  # "http://[::1" and other unparsable netlocs
        raise ConfigError("MODEL_SOURCE is not a URL the agent can parse") from None


def open_source(config: Config, log: Log | None = None) -> Source:
    scheme = scheme_of(config.source)
    # An https host a row names (Azure Blob, #33 item 2) before the hub's.
    row = of_https_host(config.source)
    if row is None and _may_be_hf(scheme, config.hf_endpoint):
        from llmkube_stager.sources.hf.ref import is_hf_url

        if is_hf_url(config.source, config.hf_endpoint):
            scheme = "hf"
    row = row or of_url_scheme(scheme)
    if row is None:
        if scheme in _PLANNED:
            raise ConfigError(f"MODEL_SOURCE scheme {scheme}:// is not supported by this build yet")
        raise ConfigError(f"MODEL_SOURCE has an unknown scheme {scheme!r}")
    module_name, _, class_name = row.source.partition(":")
    factory = getattr(importlib.import_module(module_name), class_name)
    source: Source = factory(config, log) if row.takes_log else factory(config)
    return source


def check_libraries(source: Source) -> None:
    """InvalidConfiguration when a library the source will import is missing
    or too old (#13 item 1). Metadata only; called before anything is written,
    and only when the origin will be asked (never on a warm start)."""
    for row in SCHEMES:
        if row.source.partition(":")[0] == type(source).__module__:
            for dist in row.libraries:
                require(FLOORS[dist])
            return


def _may_be_hf(scheme: str, hf_endpoint: str) -> bool:
    """What is_hf_url can answer yes to: an https URL (huggingface.co), or
    any http(s) URL under an HF_ENDPOINT mirror. A plain http origin with
    no mirror set never is: its start skips hf/ref.py and its header math
    (~5 ms, #16)."""
    return scheme == "https" or (scheme == "http" and bool(hf_endpoint.strip()))
