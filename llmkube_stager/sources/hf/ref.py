"""Pure parsing of Hugging Face sources (spec §3.2).

`hf://org/repo[@rev][/file]`, and `https://huggingface.co/org/repo` URLs
(`/resolve|blob/<rev>/<file>`, `/resolve|tree/<rev>[/]`), also on the
HF_ENDPOINT mirror's origin. Host match is case-insensitive and tolerates
`www.`; the repo path keeps its case. The revision defaults to `main`.

The two forms are read differently, and what could mean two things is
refused (#11 item 11: `hf://org/t/a#b.gguf` used to publish the repo file `a`):

- `hf://` is a path, as in huggingface_hub's HfFileSystem: `#`, `?` and `%`
  in the file part are characters of the file name (percent-encoded when
  requested). Only the revision is percent-decoded, so that a ref with a
  slash can be written `@refs%2Fpr%2F1`.
- An `https://` form is a URL: its path is percent-decoded, a `?download=`
  query (what the website's links carry) is ignored, any other query or a
  `#fragment` is refused, as is an encoded `/` inside a file name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from llmkube_stager.errors import ConfigError
from llmkube_stager.sources.wire.status import Origin, is_hf_auth_origin

HF_DEFAULT_ENDPOINT = "https://huggingface.co"
_FILE_KINDS = ("resolve", "blob")
# huggingface_hub's validate_repo_id: word characters, '-' and '.'.
_REPO_PART_RE = re.compile(r"[A-Za-z0-9_.-]{1,96}")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# Query parameters of the website's own file links: they change nothing.
_HARMLESS_QUERY = frozenset({"download"})


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

    @property
    def display(self) -> str:
        where = f"hf://{self.repo}@{self.revision}"
        return f"{where}/{self.path}" if self.path else where


def check_endpoint(hf_endpoint: str) -> str:
    """HF_ENDPOINT as the base of every hub URL: `http(s)://host[:port][/path]`
    (trimmed, no trailing slash). Anything else is a configuration error, not
    an unreachable origin to retry forever (#11 item 12)."""
    endpoint = hf_endpoint.strip().rstrip("/")
    shown = endpoint[:80]
    try:
        parts = urlsplit(endpoint)
    except ValueError:  # "https://[::1"
        raise ConfigError(f"HF_ENDPOINT is not a URL: {shown!r}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"HF_ENDPOINT must be an http(s) URL with a host, like https://hf-mirror.example, "
            f"got {shown!r}"
        )
    try:
        _ = parts.port
    except ValueError:
        raise ConfigError(f"HF_ENDPOINT has an invalid port: {shown!r}") from None
    if parts.query or parts.fragment or "?" in endpoint or "#" in endpoint:
        raise ConfigError(f"HF_ENDPOINT must not carry a query or a fragment: {shown!r}")
    return endpoint


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
    segments = _segments(urlsplit(source[len(mirror) :]).path)
    return len(segments) >= 4 and segments[2] in (*_FILE_KINDS, "tree")


def _segments(path: str) -> list[str]:
    return [unquote(p) for p in path.split("/") if p]


def parse_hf_source(source: str, hf_endpoint: str) -> HfRef:
    mirror = check_endpoint(hf_endpoint) if hf_endpoint.strip() else ""
    if source[:5].lower() == "hf://":
        return _parse_hf_scheme(source[5:], mirror or HF_DEFAULT_ENDPOINT)
    if mirror and source.lower().startswith(mirror.lower() + "/"):
        # A mirror may live under a path (Artifactory's .../api/huggingfaceml/x).
        return _parse_url(source[len(mirror) :], mirror)
    parts = urlsplit(source)
    return _parse_url(source[len(f"{parts.scheme}://{parts.netloc}") :], HF_DEFAULT_ENDPOINT)


def _parse_hf_scheme(body: str, endpoint: str) -> HfRef:
    segments = [s for s in body.split("/") if s]
    if len(segments) < 2:
        raise ConfigError("MODEL_SOURCE hf:// must name org/repo, e.g. hf://org/repo@main")
    org, name = segments[0], segments[1]
    revision = "main"
    if "@" in name:
        # The revision is the text after the FIRST `@` (spec §3.2),
        # percent-decoded as HfFileSystem does (`@refs%2Fpr%2F1`).
        name, raw_revision = name.split("@", 1)
        revision = unquote(raw_revision)
    if not revision:
        raise ConfigError("MODEL_SOURCE hf:// has an empty revision after '@'")
    return _ref(endpoint, org, name, revision, segments[2:])


def _parse_url(rest: str, endpoint: str) -> HfRef:
    """`/org/repo[/resolve|blob|tree/<rev>[/path]]` of a URL, already cut
    from its endpoint; query and fragment still attached."""
    parts = urlsplit(rest)
    if parts.fragment or rest.endswith("#"):
        raise ConfigError(
            "MODEL_SOURCE Hugging Face URL has a '#fragment': a '#' in a file name must be "
            "written %23 (or use hf://org/repo@rev/path, where it is taken literally)"
        )
    extra = {k for k, _ in parse_qsl(parts.query, keep_blank_values=True)} - _HARMLESS_QUERY
    if extra or (parts.query and not parse_qsl(parts.query, keep_blank_values=True)):
        raise ConfigError(
            "MODEL_SOURCE Hugging Face URL has a query string the agent would drop: a '?' in a "
            "file name must be written %3F (or use hf://org/repo@rev/path)"
        )
    raw = [p for p in parts.path.split("/") if p]
    segments = [unquote(p) for p in raw]
    if len(segments) < 2:
        raise ConfigError("MODEL_SOURCE Hugging Face URL must name org/repo")
    if len(segments) == 2:
        return _ref(endpoint, segments[0], segments[1], "main", [])
    if segments[2] not in (*_FILE_KINDS, "tree") or len(segments) < 4:
        raise ConfigError(
            "MODEL_SOURCE Hugging Face URL must look like https://huggingface.co/org/repo"
            "/resolve/<revision>/[path]"
        )
    if any("/" in s for s in segments[4:]):
        raise ConfigError("MODEL_SOURCE Hugging Face URL has an encoded '/' (%2F) in a file name")
    return _ref(endpoint, segments[0], segments[1], segments[3], segments[4:])


def _ref(endpoint: str, org: str, name: str, revision: str, path: list[str]) -> HfRef:
    for part in (org, name):
        if not _REPO_PART_RE.fullmatch(part) or part in (".", "..") or ".." in part:
            raise ConfigError(
                f"MODEL_SOURCE names an invalid Hugging Face repo id {f'{org}/{name}'[:100]!r}: "
                "org and name are letters, digits, '_', '-' and '.'"
            )
    if _CONTROL_RE.search(revision) or any(_CONTROL_RE.search(p) for p in path):
        raise ConfigError("MODEL_SOURCE has a control character in its revision or path")
    if any(p in (".", "..") for p in path):
        raise ConfigError("MODEL_SOURCE Hugging Face path must not contain '.' or '..' parts")
    return HfRef(endpoint, f"{org}/{name}", revision, "/".join(path))
