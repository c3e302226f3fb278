"""A KServe storage URI -> the agent's configuration for one pair (#24
items 1, 2). Pure: no I/O, no environment.

The agent's own records, partials and stamps live in a private dot
directory of DEST_DIR (`PRIVATE_DIR`, #24 item 4): DEST_DIR is the pod's
emptyDir, mounted as it is into the model server, so there is no "beside
it" in the same volume. The model's files are staged there by the engine,
then linked into DEST_DIR (expose.py).

The URI forms follow KServe's Storage.download (kserve-storage 0.21.0):
`s3://bucket/prefix-or-key`, `hf://owner/model[:revision]`,
`http(s)://host/path/file` (its name from the path), Azure Blob's
`https://<account>.blob.core.windows.net/<container>/<path>` and
`https://<account>.z<N>.blob.storage.azure.net/...` (a prefix, listed, #33
item 2) and the archives KServe unpacks. The forms this image does not
download (Google Cloud Storage, Azure File, Data Lake, HDFS, OCI,
ModelScope, git, PVC) are refused
naming the scheme, before any I/O, so a ClusterStorageContainer matched by
mistake fails with InvalidConfiguration instead of a misleading fetch.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from llmkube_stager.errors import ConfigError, InvalidFileSet
from llmkube_stager.layout import KSERVE_MODEL_SUBDIR, KSERVE_PRIVATE_NAME, parse_file_list
from llmkube_stager.schemes import SCHEMES, of_https_host, of_source

# Hidden from `ls` and from a model server's glob of DEST_DIR (#24 item 4);
# a reserved name for model files (layout.py).
PRIVATE_DIR = KSERVE_PRIVATE_NAME
MODEL_SUBDIR = KSERVE_MODEL_SUBDIR

# KServe's own patterns (kserve_storage.py: _AZURE_BLOB_RE, _AZURE_FILE_RE, _GIT_RE).
_AZURE_BLOB_RE = re.compile(r"https://(.+?)\.blob\.core\.windows\.net/(.+)")
_AZURE_DFS_RE = re.compile(r"https://(.+?)\.dfs\.core\.windows\.net/(.+)")
_AZURE_FILE_RE = re.compile(r"https://(.+?)\.file\.core\.windows\.net/(.+)")
# Azure's DNS-zone endpoints (kserve_storage 0.21: `*.z<N>.blob.storage.azure.net`, #31 item 11).
_AZURE_ZONE_BLOB_RE = re.compile(r"https://(.+?)\.z[0-9]{1,2}\.blob\.storage\.azure\.net/(.+)")
_AZURE_ZONE_FILE_RE = re.compile(r"https://(.+?)\.z[0-9]{1,2}\.file\.storage\.azure\.net/(.+)")
_GIT_RE = re.compile(r"https://.+\.git(?:[/?#]|$)")
# Prefix -> the name shown in the refusal.
_REFUSED_PREFIXES: tuple[tuple[str, str], ...] = (
    ("hdfs://", "hdfs://"),
    ("webhdfs://", "webhdfs://"),
    ("oci://", "oci://"),
    ("modelscope://", "modelscope://"),
    ("abfs://", "abfs:// (Azure Data Lake)"),
    ("abfss://", "abfss:// (Azure Data Lake)"),
    ("wasb://", "wasb:// (Azure Blob)"),
    ("wasbs://", "wasbs:// (Azure Blob)"),
    ("az://", "az:// (Azure Blob)"),
    ("git://", "git"),
    # The agent's schemes with no KServe form (pvc://) are refused too (#32 item 1).
    *((f"{u}://", f"{u}://") for row in SCHEMES if row.kserve is None for u in row.url_schemes),
)


@dataclass(frozen=True)
class Pair:
    """One `SRC_URI DEST_DIR` of the command line, as the agent stages it."""

    uri: str
    dest: str  # absolute
    # The contract's variables for this pair, given as flags (flags win over
    # the environment, so a stray MODEL_FILES of the pod cannot change it).
    flags: dict[str, str]
    # The name whose suffix says whether KServe unpacks the file, when it is
    # not the file's own: an http(s) URL's query (#31 item 1).
    archive_name: str | None = None

    @property
    def private(self) -> str:
        return posixpath.join(self.dest, PRIVATE_DIR)

    @property
    def root(self) -> str:
        """The engine's model directory (CACHE_DIR) for this pair."""
        return posixpath.join(self.private, MODEL_SUBDIR)


USAGE = (
    "llmkube-stager SRC_URI DEST_DIR [SRC_URI DEST_DIR ...] (KServe's storage-initializer "
    "arguments), or llmkube-stager stage|plan|verify|inspect|diagnose"
)


def parse_pairs(args: list[str], cwd: str) -> tuple[Pair, ...]:
    if len(args) < 2 or len(args) % 2:
        raise ConfigError(f"usage: {USAGE}; got {len(args)} argument(s)")
    pairs = tuple(pair_for(args[i], args[i + 1], cwd) for i in range(0, len(args), 2))
    dests = [p.dest for p in pairs]
    if len(set(dests)) != len(dests):
        raise ConfigError("two SRC_URIs name the same DEST_DIR: give each its own directory")
    for outer in dests:
        for inner in dests:
            if inner.startswith(outer.rstrip("/") + "/"):
                # One pair's files would replace the other's of the same
                # name, or land in its private directory (#24 review).
                raise ConfigError(
                    f"the DEST_DIR {inner[:200]!r} is inside the DEST_DIR {outer[:200]!r}: "
                    "give each SRC_URI a directory of its own, side by side"
                )
    return pairs


def pair_for(uri: str, dest_text: str, cwd: str) -> Pair:
    uri = uri.strip()
    dest = _dest(dest_text, cwd)
    _refuse_unsupported(uri)
    row = of_source(uri)
    form = row.kserve if row is not None else None
    if form == "prefix":
        return _listed(uri, dest)
    if form == "repo":
        return _listed(_hf_source(uri), dest)
    if form == "url":
        single = _single(uri, dest, _name_from_url(uri))
        return replace(single, archive_name=_archive_name_of_url(uri))
    if form == "path":
        path = uri if uri.startswith("/") else uri.partition("://")[2]
        return _single(uri, dest, _name_from_path(path, uri))
    raise ConfigError(
        f"cannot recognize the storage type of {_shown(uri)}: this image stages s3://, gs://, "
        "hf://, http(s):// (Azure Blob included), oci+fetch:// and file:// URIs"
    )


def _dest(text: str, cwd: str) -> str:
    if not text.strip():
        raise ConfigError("DEST_DIR is empty")
    path = posixpath.normpath(posixpath.join(cwd, text.strip()))
    if path == "/":
        raise ConfigError("DEST_DIR must not be /")
    return path


def _refuse_unsupported(uri: str) -> None:
    lower = uri.lower()
    for prefix, name in _REFUSED_PREFIXES:
        if lower.startswith(prefix):
            raise _refused(name, uri)
    # Azure Blob's two forms are staged (#33 item 2) where the host is an
    # account's (schemes.py's row); what KServe's looser pattern takes
    # besides is still refused, never fetched as a plain URL.
    staged = of_https_host(uri) is not None
    if _AZURE_BLOB_RE.match(uri) and not staged:
        raise _refused("Azure Blob (https://*.blob.core.windows.net)", uri)
    if _AZURE_DFS_RE.match(uri):
        raise _refused("Azure Data Lake (https://*.dfs.core.windows.net)", uri)
    if _AZURE_ZONE_BLOB_RE.match(uri) and not staged:
        raise _refused("Azure Blob (https://*.z<N>.blob.storage.azure.net)", uri)
    if _AZURE_FILE_RE.match(uri):
        raise _refused("Azure File (https://*.file.core.windows.net)", uri)
    if _AZURE_ZONE_FILE_RE.match(uri):
        raise _refused("Azure File (https://*.z<N>.file.storage.azure.net)", uri)
    if _GIT_RE.match(uri):
        raise _refused("git (https://...git)", uri)


def _refused(name: str, uri: str) -> ConfigError:
    return ConfigError(
        f"the storage URI scheme {name} of {_shown(uri)} is not staged by this image; keep "
        "KServe's default ClusterStorageContainer for it (KServe picks the container by the "
        "first storageUri: with several, name it with the predictor's storageContainerName; "
        "docs/migration-kserve.md)"
    )


def _listed(source: str, dest: str) -> Pair:
    """Every file under the prefix / in the repo: the engine lists them."""
    pair = Pair(source, dest, {})
    flags = {**_BLANK, "MODEL_SOURCE": source, "CACHE_DIR": pair.root}
    return Pair(source, dest, flags)


def _single(uri: str, dest: str, name: str) -> Pair:
    pair = Pair(uri, dest, {})
    flags = {
        **_BLANK,
        "MODEL_SOURCE": uri,
        "CACHE_DIR": pair.root,
        "MODEL_PATH": posixpath.join(pair.root, name),
    }
    return Pair(uri, dest, flags)


# What the pod's environment might set that a pair decides itself.
_BLANK = {"MODEL_PATH": "", "MODEL_FILES": "", "S3_BUCKET": "", "S3_KEY": "", "S3_PREFIX": ""}


def _hf_source(uri: str) -> str:
    """`hf://owner/model[:revision]` (KServe's syntax) -> the agent's
    `hf://owner/model@revision`."""
    parts = uri[5:].split("/")
    if len(parts) != 2 or not all(parts):
        raise ConfigError(f"a Hugging Face URI is hf://owner/model[:revision], got {_shown(uri)}")
    owner, model_part = parts
    model, _, revision = model_part.partition(":")
    if not model:
        raise ConfigError(f"the Hugging Face model name is empty in {_shown(uri)}")
    return f"hf://{owner}/{model}" + (f"@{revision}" if revision else "")


def _name_from_url(uri: str) -> str:
    """The file's name: the last part of the URL's path as written, not
    percent-decoded (KServe's os.path.basename(urlparse(uri).path), #31
    item 3: `model%2Bv2.onnx` stays so, `a%2Fb` is a name, not a path)."""
    try:
        path = urlsplit(uri).path
    except ValueError:
        raise ConfigError(f"the storage URI is not a well-formed URL: {_shown(uri)}") from None
    return _plain_name(posixpath.basename(path), uri)


def _archive_name_of_url(uri: str) -> str | None:
    """KServe's _download_from_uri types the file by mimetypes.guess_type of
    the URL's path or, when the path has no type, of its query
    (`.../download?file=model.tar.gz` is a tar): the query then, else None.
    Python's own table only (MimeTypes() reads no system file into it)."""
    import mimetypes

    parts = urlsplit(uri)
    if parts.query and mimetypes.MimeTypes().guess_type(parts.path)[0] is None:
        return parts.query
    return None


def _name_from_path(path: str, uri: str) -> str:
    return _plain_name(posixpath.basename(path.rstrip("/")), uri)


def _plain_name(name: str, uri: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\\" in name:
        raise ConfigError(f"no file name in the storage URI {_shown(uri)}")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise ConfigError(f"the file name in {_shown(uri)} has a control character")
    if name.startswith(PRIVATE_DIR):
        raise ConfigError(f"the file name in {_shown(uri)} is the agent's own directory")
    try:
        # The engine's records live beside the staged file (#24 review: a
        # URL's `.llmkube.lock` was staged onto the lock file). A single
        # `x.sha256` has no sibling whose stamp it could be (#31 item 4).
        parse_file_list(name, stamps_beside=False)
    except InvalidFileSet:
        raise ConfigError(
            f"the file name in {_shown(uri)} is a name reserved for the agent's cache records"
        ) from None
    return name


def _shown(uri: str) -> str:
    """Without the query (a presigned URL's signature) or user info."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return repr(uri[:100])
    host = parts.netloc.rpartition("@")[2]
    shown = f"{parts.scheme}://{host}{parts.path}" if parts.scheme else uri.split("?")[0]
    return repr(shown[:200])
