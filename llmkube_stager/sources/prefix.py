"""The listing of a cloud prefix without MODEL_FILES, as s3/, gcs/ and
azure/ share it (#24 items 2, 5; #33 items 1, 2): pages asked one after
the other, each with the token the last one gave, until one gives none
(never more than MAX_PAGES: a server that never ends its listing is not
followed forever); then the objects sorted into the one the URI names
and those under its prefix. Each cloud keeps its own page (the request,
the answer's form, its token) and its own words for an empty prefix.

The prefix is taken at a '/' boundary: `.../models/iris` stages
`models/iris/...`, never `models/iris-v2/...` (KServe's string-prefix
filter would). An object whose name is the URI's path itself is a single
object, as in KServe (`s3://b/models/iris/model.joblib`): its name is the
path's last part. Names ending in '/' (directory markers) are left out.
Every relative path is checked later as MODEL_FILES entries are (InvalidFileSet
for '..', reserved record names, a name listed twice, clashes:
staging/listed.py, once STORAGE_*_PATTERNS have filtered them): a hostile
listing writes nothing.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from llmkube_stager.config import Config
from llmkube_stager.errors import Reason, SourceError, SourceKind, rejected
from llmkube_stager.listing import ListedFile, Listing
from llmkube_stager.model import Manifest
from llmkube_stager.sources.base import build_manifest, listed_manifest

MAX_PAGES = 100_000
# The most files a listed model may have (the objects kept, after directory
# markers and names outside the prefix are left out): a listing of this
# many stays within the agent's 64 MiB (docs/performance.md); its record
# (cache/listrec.py) is sized for it. A model of more files is named in
# MODEL_FILES or split under narrower prefixes.
MAX_LISTED_OBJECTS = 100_000


class Listed(Protocol):
    """One object of a listing page, as each cloud reads it."""

    @property
    def name(self) -> str: ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def validator(self) -> str: ...


@dataclass(frozen=True)
class PrefixObject:
    """A listed object where the cloud has no type of its own for one (an
    S3 `Contents` entry)."""

    name: str
    size_bytes: int
    validator: str


T = TypeVar("T")
ObjT = TypeVar("ObjT", bound=Listed)

# One page asked with the last page's token (None for the first): its
# objects, and the next page's token (None or '': this was the last page).
PageOf = Callable[[str | None], tuple[Iterable[T], str | None]]


def paged(ask: PageOf[ObjT], what: str) -> Iterator[ObjT]:
    """Every object of every page `ask` gives, page after page; `what`
    names the listing where it never ends or goes round.

    A listing goes forward: S3, GCS and Azure give each page token and
    each object name once (in name order). A token given again, or an
    object listed again, is a listing that goes round (a broken or hostile
    endpoint, a proxy replaying an answer): ModelSourceRejected at once,
    not after MAX_PAGES pages of it held in memory (#41 item 5).

    The names seen are kept as their hash() only: the set of the names
    themselves held a second copy of every name for the whole listing
    (~17 MiB of 64 at MAX_LISTED_OBJECTS names of ~90 bytes). str hashes
    are keyed per process (SipHash), so no listing can be made to collide;
    two names of 100,000 colliding by chance is ~3e-10, and the run after
    has another key."""
    tokens: set[str] = set()
    names: set[int] = set()
    token: str | None = None
    for _ in range(MAX_PAGES):
        objects, token = ask(token)
        if token and token in tokens:
            raise rejected(f"the listing of {what} gave the same page token twice")
        for obj in objects:
            digest = hash(obj.name)
            if digest in names:
                raise rejected(
                    f"the listing of {what} named an object twice ({obj.name[:256]!r}): "
                    "its pages go round"
                )
            names.add(digest)
            yield obj
        if not token:
            return
        tokens.add(token)
    raise rejected(f"the listing of {what} did not end after {MAX_PAGES} pages")


def not_a_directory(obj: Listed) -> bool:
    return not obj.name.endswith("/")


def list_prefix(
    source: str,
    path: str,
    objects: Callable[[str], Iterable[ObjT]],
    not_found: Callable[[str], str],
    *,
    remedy: str | None = None,
    keep: Callable[[ObjT], bool] = not_a_directory,
    exact_first: bool = True,
) -> Listing:
    """The listing for `path` in a bucket or container: the one object
    `path`, else every object under `path/` (the whole bucket for an empty
    path). `objects(prefix)`: every object the cloud lists under `prefix`;
    `not_found(under)`: the words for an empty prefix (`under`: the prefix
    with its '/', '' for the bucket); `keep`: which listed objects count;
    `exact_first=False`: the object `path` is staged only when nothing
    lies under `path/` (GCS)."""
    stem = path.strip("/")
    single = bool(stem) and not path.endswith("/")
    under = stem + "/" if stem else ""
    exact: ListedFile | None = None
    below: list[ListedFile] = []
    for obj in objects(stem if single else under):
        if not keep(obj):
            continue
        if single and obj.name == stem:
            exact = listed_file(posixpath.basename(stem), obj)
        elif obj.name.startswith(under):
            if len(below) == MAX_LISTED_OBJECTS:
                raise rejected(
                    f"{source} lists more than {MAX_LISTED_OBJECTS} files, more than "
                    "llmkube-stager stages from one listing: name the files in MODEL_FILES, "
                    "or point at a narrower prefix"
                )
            below.append(listed_file(obj.name[len(under) :], obj))
    if exact is not None and (exact_first or not below):
        # Its name is checked as a prefix's are, by staging/listed.py after
        # the patterns, which knows whether stamps live beside the files (a
        # KServe `s3://b/m.sha256` is one file, #31 item 4; #24 review: a
        # key `.llmkube.lock` was staged onto the engine's lock file).
        return Listing(source, posixpath.dirname(stem), (exact,), exact=True)
    if not below:
        raise SourceError(
            not_found(under), reason=Reason.SOURCE_NOT_FOUND, answered=True, remedy=remedy
        )
    # Checked (check_listed) once STORAGE_*_PATTERNS have filtered them
    # (staging/listed.py, #31 item 4).
    return Listing(source, stem, tuple(below))


def listed_file(raw: str, obj: Listed) -> ListedFile:
    """The entry of an object whose name below the prefix is `raw`: empty
    and '.' parts dropped, as KServe's target path has them (#31 item 4),
    the raw name kept as its key to fetch it by; '..' stays, for
    check_listed to refuse."""
    rel = "/".join(p for p in raw.split("/") if p not in ("", "."))
    key = raw if rel != raw and rel else ""
    return ListedFile(rel if rel else raw, obj.size_bytes, obj.validator, key)


def listed_key(listed: Mapping[str, ListedFile], rel: str) -> str:
    """The name below the prefix the file `rel` is fetched by: the key it
    was listed under where that is not its clean path (a key
    `prefix//model.joblib`, #31 item 4), else `rel` itself."""
    entry = listed.get(rel)
    return entry.key if entry is not None and entry.key else rel


def retried(
    retry: Callable[[Callable[[], Any]], Any],
    list_page: Callable[[str, str | None, str], T],
    where: str,
) -> Callable[[str, str | None], T]:
    """The page of a listing `list_page` asks for `where`, each page asked
    through the run's `retry` (a page that fails is asked again, not the
    whole listing)."""
    return lambda prefix, token: retry(lambda: list_page(prefix, token, where))


class BucketSource:
    """What a source of a bucket or container (s3/, gcs/, azure/) holds
    besides its own client: no revisions, a GET only once the probe or the
    listing named what it is pinned to (an ETag, a generation), and the
    listing of a prefix without MODEL_FILES (#24 item 5) once chosen."""

    revision: str | None = None
    # The HEAD, the metadata or the listing names what the GET is pinned to
    # (S3: the presigned URL comes from the signed HEAD too).
    get_without_probe = False

    kind: SourceKind

    def __init__(self, config: Config) -> None:
        self._config = config
        self.lists = config.listed  # a prefix without MODEL_FILES: listed
        self.listing: Listing | None = None

    def manifest(self) -> Manifest:
        """The files of the listing, each fetched by the key it was listed
        under (listed_manifest), else the files the configuration names
        (build_manifest)."""
        config, listing = self._config, self.listing
        if listing is not None:
            return listed_manifest(
                self.kind, config, listing, lambda f: self._url_of(f.key or f.rel, True)
            )
        return build_manifest(
            config, self.kind, self._display(), lambda rel: self._url_of(rel, config.multi_file)
        )

    def _display(self) -> str:
        """The source as the log and the manifest name it."""
        raise NotImplementedError

    def _url_of(self, name: str, multi_file: bool) -> str:
        """The URL of the object `name` names: below the prefix where
        `multi_file`, else the one object the source names."""
        raise NotImplementedError
