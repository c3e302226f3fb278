"""`oci://host[:port]/repo[:tag|@sha256:<hex>]`, parsed (pure).

Short names are Docker Hub's, mapped as docker maps them: a first path
part with no '.' or ':' that is not `localhost` is a Docker Hub repository
(`oci://ai/smollm2` is `docker.io/ai/smollm2`), and a one-part name is an
official image under `library/`. Docker Hub's API host is
`registry-1.docker.io`. KServe's `oci+fetch://` spelling is the same
reference.

A registry on a loopback address is asked over plain http, as docker
treats 127.0.0.0/8 as an insecure registry by default; any other host over
https.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llmkube_stager.errors import ConfigError

OCI_SCHEMES = ("oci", "oci+fetch")
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
DEFAULT_TAG = "latest"
# The distribution spec's grammar for a repository name and a tag.
_REPO_RE = re.compile(
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
)
_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
_LOOPBACK_RE = re.compile(r"(localhost|127(?:\.[0-9]{1,3}){3}|\[::1\])(?::[0-9]{1,5})?")


@dataclass(frozen=True)
class OciRef:
    registry: str  # host[:port] as the user wrote it (docker.io for short names)
    repo: str
    tag: str | None
    digest: str | None  # "sha256:<hex>" when the reference pins one

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.registry in _HUB_ALIASES else self.registry

    @property
    def base_url(self) -> str:
        scheme = "http" if _LOOPBACK_RE.fullmatch(self.registry) else "https"
        return f"{scheme}://{self.api_host}"

    @property
    def reference(self) -> str:
        """What the manifest is asked by: the digest when pinned."""
        return self.digest or self.tag or DEFAULT_TAG

    @property
    def display(self) -> str:
        tail = f":{self.tag}" if self.tag else ""
        tail += f"@{self.digest}" if self.digest else ""
        return f"oci://{self.registry}/{self.repo}{tail or ':' + DEFAULT_TAG}"

    def manifest_url(self, reference: str | None = None) -> str:
        return f"{self.base_url}/v2/{self.repo}/manifests/{reference or self.reference}"

    def blob_url(self, digest: str) -> str:
        return f"{self.base_url}/v2/{self.repo}/blobs/{digest}"

    @property
    def scope(self) -> str:
        return f"repository:{self.repo}:pull"


def parse_oci_source(source: str) -> OciRef:
    scheme, sep, rest = source.partition("://")
    if not sep or scheme.lower() not in OCI_SCHEMES:
        raise ConfigError("MODEL_SOURCE is not an oci:// reference")
    if not rest or any(c in rest for c in "?#\\ ") or "@" in rest.split("/", 1)[0]:
        raise ConfigError(
            "MODEL_SOURCE must be oci://host[:port]/repository[:tag][@sha256:<digest>]"
        )
    name, digest = _split_digest(rest)
    name, tag = _split_tag(name)
    registry, repo = _split_registry(name)
    if not _REPO_RE.fullmatch(repo):
        raise ConfigError(
            f"MODEL_SOURCE names the repository {repo[:100]!r}, which is not a valid OCI "
            "repository name (lower case, digits, and . _ - / separators)"
        )
    return OciRef(registry, repo, tag, digest)


def _split_digest(rest: str) -> tuple[str, str | None]:
    name, at, digest = rest.partition("@")
    if not at:
        return rest, None
    if not _DIGEST_RE.fullmatch(digest):
        raise ConfigError(
            "MODEL_SOURCE pins a digest that is not sha256:<64 lower-case hex digits>"
        )
    return name, digest


def _split_tag(name: str) -> tuple[str, str | None]:
    head, slash, last = name.rpartition("/")
    base, colon, tag = last.partition(":")
    if not colon:
        return name, None
    if not _TAG_RE.fullmatch(tag):
        raise ConfigError(f"MODEL_SOURCE has the tag {tag[:130]!r}, which is not a valid OCI tag")
    return f"{head}{slash}{base}", tag


def _split_registry(name: str) -> tuple[str, str]:
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        if not rest:
            raise ConfigError("MODEL_SOURCE names a registry but no repository")
        registry = first.lower()
        if registry in _HUB_ALIASES and "/" not in rest:
            rest = f"library/{rest}"
        return registry, rest
    # Docker Hub, as docker reads a short name.
    return DOCKER_HUB, name if slash else f"library/{name}"
