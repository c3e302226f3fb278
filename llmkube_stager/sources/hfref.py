"""Pure parsing of Hugging Face sources (spec §3.2).

`hf://org/repo[@rev][/file]`, and `https://huggingface.co/org/repo` URLs
(`/resolve|blob/<rev>/<file>`, `/resolve|tree/<rev>[/]`), also on the
HF_ENDPOINT mirror's origin. Host match is case-insensitive and tolerates
`www.`; the repo path keeps its case. The revision defaults to `main`.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

from llmkube_stager.errors import ConfigError
from llmkube_stager.sources.http_status import Origin, is_hf_auth_origin

HF_DEFAULT_ENDPOINT = "https://huggingface.co"
_FILE_KINDS = ("resolve", "blob")


@dataclass(frozen=True)
class HfRef:
    endpoint: str
    repo: str  # org/name
    revision: str
    # The file of a single-file source, or the folder of a multi-file one.
    path: str

    def resolve_url(self, revision: str, rel: str) -> str:
        rev = quote(revision, safe="")
        return f"{self.endpoint}/{self.repo}/resolve/{rev}/{quote(rel, safe='/')}"


def is_hf_url(source: str, hf_endpoint: str) -> bool:
    """hf://, any org/repo URL on huggingface.co, and repo-shaped URLs
    (`org/repo/resolve|blob|tree/<rev>`) under HF_ENDPOINT. Other URLs on
    the mirror stay plain HTTP (with the token, as the scripts sent it)."""
    parts = urlsplit(source)
    if parts.scheme.lower() == "hf":
        return True
    if parts.scheme.lower() != "https" and not hf_endpoint.strip():
        return False
    try:
        origin = Origin.of(source)
    except ValueError:
        return False
    if not is_hf_auth_origin(origin, hf_endpoint):
        return False
    if origin.host in ("huggingface.co", "www.huggingface.co"):
        return len(_segments(parts.path)) >= 2
    mirror = hf_endpoint.strip().rstrip("/")
    if not source.lower().startswith(mirror.lower() + "/"):
        return False
    segments = _segments(source[len(mirror) :])
    return len(segments) >= 4 and segments[2] in (*_FILE_KINDS, "tree")


def _segments(path: str) -> list[str]:
    return [unquote(p) for p in path.split("/") if p]


def parse_hf_source(source: str, hf_endpoint: str) -> HfRef:
    parts = urlsplit(source)
    mirror = hf_endpoint.strip().rstrip("/")
    if parts.scheme.lower() == "hf":
        return _parse_hf_scheme(parts.netloc + parts.path, mirror or HF_DEFAULT_ENDPOINT)
    if mirror and source.lower().startswith(mirror.lower() + "/"):
        # A mirror may live under a path (Artifactory's .../api/huggingfaceml/x).
        return _parse_url_path(_segments(source[len(mirror) :]), mirror)
    return _parse_url_path(_segments(parts.path), HF_DEFAULT_ENDPOINT)


def _parse_hf_scheme(body: str, endpoint: str) -> HfRef:
    segments = [s for s in body.split("/") if s]
    if len(segments) < 2:
        raise ConfigError("MODEL_SOURCE hf:// must name org/repo, e.g. hf://org/repo@main")
    org, name = segments[0], segments[1]
    revision = "main"
    if "@" in name:
        # The revision is the text after the FIRST `@` (spec §3.2).
        name, revision = name.split("@", 1)
    if not org or not name or not revision:
        raise ConfigError("MODEL_SOURCE hf:// has an empty org, repo or revision")
    return HfRef(endpoint, f"{org}/{name}", revision, "/".join(segments[2:]))


def _parse_url_path(segments: list[str], endpoint: str) -> HfRef:
    if len(segments) < 2:
        raise ConfigError("MODEL_SOURCE Hugging Face URL must name org/repo")
    repo = f"{segments[0]}/{segments[1]}"
    if len(segments) == 2:
        return HfRef(endpoint, repo, "main", "")
    if segments[2] not in (*_FILE_KINDS, "tree") or len(segments) < 4:
        raise ConfigError(
            "MODEL_SOURCE Hugging Face URL must look like https://huggingface.co/org/repo"
            "/resolve/<revision>/[path]"
        )
    return HfRef(endpoint, repo, segments[3], "/".join(segments[4:]))
