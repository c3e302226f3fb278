"""OCI and Docker manifests, read (pure): what a manifest or an index says,
the platform an index resolves to, and which layers are which files.

Media types taken: the OCI image manifest and index, Docker's v2 manifest
and manifest list. The digest of a manifest is the sha256 of its bytes as
served; the caller checks it (registry.py) before anything here reads them.

A layer is a file where it is one (ModelPack's `*.raw` layers, in the CNCF
and the older CNAI names, Docker Model Runner's file layers, and any layer
that carries a file name annotation as ORAS pushes them); it is named by its
annotation. A manifest of archive layers (tar, tar+gzip: ModelPack's
non-raw layers, a modelcar image's layers) is an ArchiveArtifact, staged
by staging/layers.py; tar+zstd (no zstd decoder in this build) and a
manifest that mixes archive and file layers are refused by name, nothing
fetched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from llmkube_stager.errors import ConfigError, Reason, SourceError, rejected

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
ACCEPT = ", ".join((*MANIFEST_TYPES, *INDEX_TYPES))
# The annotations that name a layer's file, most specific first.
PATH_ANNOTATIONS = (
    "org.cncf.model.filepath",
    "org.cnai.model.filepath",
    "org.opencontainers.image.title",
)
# Docker Model Runner's file layers without a path annotation: the name
# its own runner gives the file.
_DMR_NAMES = {
    "application/vnd.docker.ai.gguf.v3": "model.gguf",
    "application/vnd.docker.ai.safetensors": "model.safetensors",
    "application/vnd.docker.ai.mmproj": "model.mmproj",
    "application/vnd.docker.ai.chat.template.jinja": "template.jinja",
    "application/vnd.docker.ai.license": "LICENSE",
}
_ARCHIVE_SUFFIXES = (".tar", ".tar+gzip", ".tar+zstd", ".tar.gzip", ".tar.gz", ".tar.zstd")


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size_bytes: int
    annotations: dict[str, str] = field(default_factory=dict, compare=False)
    platform: str = ""  # "os/arch[/variant]" in an index

    @property
    def hex(self) -> str:
        return self.digest.partition(":")[2]


@dataclass(frozen=True)
class Parsed:
    media_type: str
    layers: tuple[Descriptor, ...] = ()  # an image manifest's
    manifests: tuple[Descriptor, ...] = ()  # an index's

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES


def parse_manifest(raw: bytes, header_type: str, where: str) -> Parsed:
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict):
        raise rejected(f"{where} answered with a manifest that is not a JSON object")
    media = str(doc.get("mediaType") or header_type.split(";")[0].strip())
    if media in INDEX_TYPES:
        return Parsed(media, manifests=_descriptors(doc.get("manifests"), where))
    if media in MANIFEST_TYPES:
        return Parsed(media, layers=_descriptors(doc.get("layers"), where))
    raise SourceError(
        f"{where} is a {media[:100] or 'manifest of no media type'}, not an OCI or Docker v2 "
        "image manifest or index",
        reason=Reason.SOURCE_REJECTED,
        answered=True,
    )


def _descriptors(items: Any, where: str) -> tuple[Descriptor, ...]:
    if not isinstance(items, list):
        raise rejected(f"{where} answered with a manifest without its list of descriptors")
    out = []
    for item in items:
        try:
            digest, size = str(item["digest"]), item["size"]
            if not digest.startswith("sha256:") or len(digest) != 71 or not isinstance(size, int):
                raise ValueError
            platform = item.get("platform") or {}
            parts = (platform.get("os"), platform.get("architecture"), platform.get("variant"))
            annotations = item.get("annotations") or {}
            out.append(
                Descriptor(
                    str(item.get("mediaType", "")),
                    digest,
                    size,
                    {str(k): str(v) for k, v in annotations.items()},
                    "/".join(str(p) for p in parts if p),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            raise rejected(
                f"{where} answered with a descriptor without a sha256 digest and a size"
            ) from None
    return tuple(out)


def choose_platform(index: Parsed, platform: str, where: str) -> Descriptor:
    """The index entry for `platform` (os/arch, a variant when given);
    `os/arch` matches an entry of any variant when no exact one exists."""
    wanted = platform.strip().lower()
    entries = [m for m in index.manifests if m.media_type in (*MANIFEST_TYPES, "")]
    for exact in (True, False):
        for entry in entries:
            have = entry.platform.lower()
            if have == wanted or (not exact and have.rsplit("/", 1)[0] == wanted):
                return entry
    if len(entries) == 1 and not entries[0].platform:
        return entries[0]
    offered = ", ".join(sorted({e.platform or "(none)" for e in entries}))[:300]
    raise SourceError(
        f"{where} is an index with no manifest for {wanted} (it has: {offered or 'none'})",
        reason=Reason.SOURCE_NOT_FOUND,
        answered=True,
        remedy=REMEDY_PLATFORM,
    )


REMEDY_PLATFORM = (
    "set LLMKUBE_OCI_PLATFORM to one of the platforms the image index lists (os/arch), or "
    "reference the platform's manifest by its digest"
)


def layer_files(manifest: Parsed, where: str) -> tuple[tuple[str, Descriptor], ...]:
    """(file name, layer) for every layer; an archive layer or a layer no
    name can be given refuses the whole manifest."""
    files: list[tuple[str, Descriptor]] = []
    for layer in manifest.layers:
        name = _named(layer)
        if name is None:
            raise _unsupported(layer, where)
        # As annotated: an absolute or '..' name is refused with the rest
        # of the listing's names (check_listed), never made relative.
        files.append((name, layer))
    if not files:
        raise SourceError(
            f"{where} has no layer: no file to stage",
            reason=Reason.SOURCE_NOT_FOUND,
            answered=True,
        )
    return tuple(files)


def _named(layer: Descriptor) -> str | None:
    if is_archive(layer.media_type):
        return None
    for key in PATH_ANNOTATIONS:
        if layer.annotations.get(key):
            return layer.annotations[key]
    return _DMR_NAMES.get(layer.media_type)


def is_archive(media_type: str) -> bool:
    return media_type.endswith(_ARCHIVE_SUFFIXES) or ".tar" in media_type.rsplit("/", 1)[-1]


def _unsupported(layer: Descriptor, where: str) -> SourceError:
    kind = "an archive (tar) layer" if is_archive(layer.media_type) else "a layer with no file name"
    return SourceError(
        f"{where} has {kind} ({layer.media_type[:100]}, {layer.digest[:19]}): this build stages "
        "layers that are files (ModelPack raw layers, Docker Model Runner layers, or layers "
        "annotated with org.cncf.model.filepath)",
        reason=Reason.SOURCE_REJECTED,
        answered=True,
        remedy=REMEDY_LAYOUT,
    )


_MODELPACK_PREFIXES = ("application/vnd.cncf.model.", "application/vnd.cnai.model.")


class ArchiveArtifact(SourceError):
    """The manifest's layers are tar archives: unpacked into one tree by the
    stage command (staging/layers.py); refused where nothing unpacks them."""

    def __init__(self, where: str, digest: str, layers: tuple[Descriptor, ...]) -> None:
        super().__init__(
            f"{where} is made of archive (tar) layers, which only the stage command unpacks "
            "(into CACHE_DIR)",
            reason=Reason.SOURCE_REJECTED,
            answered=True,
            remedy=REMEDY_LAYOUT,
        )
        self.digest = digest
        self.layers = layers
        # A modelcar (a container image): its model is its `models/`
        # folder; ModelPack's tar layers hold the model's paths.
        self.modelcar = not any(
            layer.media_type.startswith(_MODELPACK_PREFIXES) for layer in layers
        )


def check_archives(manifest: Parsed, where: str, digest: str) -> None:
    """ArchiveArtifact when the layers are tar archives; a layer this build
    cannot read among them refuses the manifest by name."""
    archives = tuple(layer for layer in manifest.layers if is_archive(layer.media_type))
    if not archives:
        return
    for layer in manifest.layers:
        if layer.media_type.endswith(("zstd", "zst")):
            raise SourceError(
                f"{where} has a tar+zstd layer ({layer.media_type[:100]}, {layer.digest[:19]}): "
                "this build has no zstd decoder (neither zstandard nor backports.zstd is "
                "installed)",
                reason=Reason.SOURCE_REJECTED,
                answered=True,
                remedy="push the model with tar+gzip, tar or raw layers",
            )
        if not is_archive(layer.media_type):
            raise SourceError(
                f"{where} mixes archive (tar) layers with file layers ({layer.media_type[:100]}, "
                f"{layer.digest[:19]}): the agent stages one kind per artifact",
                reason=Reason.SOURCE_REJECTED,
                answered=True,
                remedy=REMEDY_LAYOUT,
            )
    raise ArchiveArtifact(where, digest, archives)


REMEDY_LAYOUT = (
    "push the model as a ModelPack artifact with raw layers (modctl build --raw) or with tar "
    "layers only, or annotate each file layer with org.cncf.model.filepath"
)


def check_platform_setting(platform: str) -> None:
    parts = platform.strip().split("/")
    if len(parts) not in (2, 3) or not all(p.strip() for p in parts):
        raise ConfigError(
            "LLMKUBE_OCI_PLATFORM must be os/arch or os/arch/variant, e.g. linux/amd64"
        )
