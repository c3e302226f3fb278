"""The fetcher of a run with a mirror (docs/mirror.md "Readers"): each file
is probed in the mirror first and its bytes come from there through the
usual transfer machinery; a file the mirror does not hold, or cannot serve,
comes from the origin.

The answer it gives for a mirrored file is the origin's, as far as the run
can tell: the origin's validators (recorded, compared by OnChange), the
manifest's sha256 (checked while the bytes are received), the mirror
object's own ETag only as the pin of its GETs (If-Match / If-Range).

The origin is asked only what it must be: the hub's one model-info call
(the commit names the version), a non-Hugging Face origin's validators
under OnChange or when seeding; never with LLMKUBE_MIRROR_ONLY=true.
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING, TypeVar

from llmkube_stager.config import Config
from llmkube_stager.errors import (
    REMEDY_MIRROR,
    REMEDY_MIRROR_SEED,
    Reason,
    SourceError,
    StagerError,
)
from llmkube_stager.logs import Log
from llmkube_stager.mirror.layout import (
    BadDocument,
    MirrorManifest,
    decode_manifest,
    decode_ref,
)
from llmkube_stager.mirror.route import (
    Asked,
    Chosen,
    MirrorDown,
    MirrorMiss,
    Route,
    Why,
    as_origin,
    check_entry,
    route_of,
)
from llmkube_stager.mirror.store import MirrorStore, open_store
from llmkube_stager.model import RemoteFile
from llmkube_stager.sources.base import Body, Fetcher, RemoteMeta, Source, WrappedBody

if TYPE_CHECKING:
    from collections.abc import Callable

_T = TypeVar("_T")
_COMMIT = re.compile(r"[0-9a-f]{40}")

# Failures of the bytes that another copy of the same version can mend.
_MENDABLE = frozenset(
    {
        Reason.CHECKSUM_MISMATCH,
        Reason.SIZE_MISMATCH,
        Reason.SOURCE_CHANGED,
        Reason.SOURCE_UNREACHABLE,
        Reason.SOURCE_UNAUTHORIZED,
        Reason.SOURCE_NOT_FOUND,
        Reason.SOURCE_RATE_LIMITED,
        Reason.SOURCE_REJECTED,
        Reason.SOURCE_UNTRUSTED,
    }
)


class MirrorFetcher:
    """A Fetcher over the origin's, reading the mirror first."""

    parallel_ranges = True

    def __init__(self, origin: Fetcher, store: MirrorStore, route: Route) -> None:
        self.origin = origin
        self.store = store
        self.route = route
        self._log: Log | None = None
        self._lock = threading.Lock()
        self._docs: dict[str, bytes | None] = {}
        self._chosen: dict[str, Chosen] = {}
        self._answers: dict[str, RemoteMeta] = {}
        self._refused: set[str] = set()  # files the mirror served wrong
        self._down: str = ""  # why the mirror is no longer asked
        # The commit the session fetches at (an interrupted run's, a Job's
        # claim): the version, whoever else would name one.
        self._at: str | None = None

    # -- the Fetcher seam --------------------------------------------------------------

    def bind_log(self, log: Log) -> None:
        self._log = log
        self.origin.bind_log(log)
        self.store.fetcher.bind_log(log)

    def probe(self, file: RemoteFile) -> RemoteMeta:
        asked = self._origin_answer(file)
        origin = asked.answer
        if self._down and not self.route.only:
            return self._from_origin(file, asked, Why(self._down))
        try:
            chosen = self._from_mirror(file, origin)
        except MirrorDown as down:
            return self._fall_back(file, asked, Why(down.error.detail, down.error))
        except MirrorMiss as miss:
            return self._fall_back(file, asked, Why(str(miss)))
        with self._lock:
            self._chosen[file.rel] = chosen
        if self._log is not None:
            self._log.info(
                "mirror_hit",
                f"{file.rel} comes from the mirror ({self.store.url_of(chosen.key)})",
                file=file.rel,
            )
        return as_origin(chosen, origin)

    def open(self, file: RemoteFile, meta: RemoteMeta, offset: int, end: int | None = None) -> Body:
        chosen = self._chosen.get(file.rel)
        if chosen is None or meta.url != chosen.meta.url:
            return self.origin.open(file, meta, offset, end)
        try:
            body = self.store.fetcher.open(chosen.file, chosen.meta, offset, end)
        except SourceError as err:
            raise self._failed(chosen, err) from err
        return _MirrorBody(body, lambda err: self._failed(chosen, err))

    def close(self) -> None:
        self.origin.close()
        self.store.close()

    # -- capabilities ------------------------------------------------------------------

    def instead(self, file: RemoteFile, meta: RemoteMeta, err: StagerError) -> RemoteMeta | None:
        """Where else the bytes of `file` can come from after a transfer
        from the mirror failed with `err`: the origin's answer, or None
        (not a mirror transfer, mirror-only, or a failure no copy mends)."""
        chosen = self._chosen.get(file.rel)
        if chosen is None or meta.url != chosen.meta.url or self.route.only:
            return None
        if err.reason not in _MENDABLE:
            return None
        with self._lock:
            self._chosen.pop(file.rel, None)
            self._refused.add(file.rel)
        where = self.store.url_of(chosen.key)
        if err.reason in (Reason.CHECKSUM_MISMATCH, Reason.SIZE_MISMATCH):
            self._warn(
                "mirror_bad_object",
                f"the mirror object {where} does not hold the bytes its manifest names "
                f"({err.detail}); fetching {file.rel} from the origin",
                file.rel,
            )
        else:
            self._warn(
                "mirror_fallback",
                f"the mirror failed serving {file.rel} ({err.detail}); fetching it from the origin",
                file.rel,
            )
        try:
            return self.origin_answer(file)
        except SourceError as failed:
            both = f"{failed.detail} (the mirror failed first: {err.detail})"
            raise failed.amended(detail=both) from failed

    def origin_answer(self, file: RemoteFile) -> RemoteMeta:
        """The origin's own answer for `file` (asked once)."""
        with self._lock:
            known = self._answers.get(file.rel)
        if known is not None:
            return known
        answer = self.origin.probe(file)
        with self._lock:
            self._answers[file.rel] = answer
        return answer

    def version_held(self, version: str) -> MirrorManifest | None:
        """The manifest of `version`, if the mirror holds it (the seeder)."""
        try:
            return self._manifest(version)
        except MirrorMiss:
            return None
        except MirrorDown as down:
            # A seeder that cannot read the mirror cannot write it either:
            # the mirror's own reason (403, unreachable) is the run's.
            detail = f"the mirror failed: {down.error.detail}"
            raise down.error.amended(detail=detail, remedy=REMEDY_MIRROR) from None

    # -- the mirror first --------------------------------------------------------------

    def _origin_answer(self, file: RemoteFile) -> Asked:
        """The origin's answer where the run wants it before the mirror's,
        or the origin's failure: then the mirror's ref names the version,
        and the failure is the run's only if the mirror cannot serve."""
        route = self.route
        if route.only or not (route.commits or route.ask_origin):
            return Asked()
        try:
            return Asked(answer=self.origin_answer(file))
        except SourceError as err:
            return Asked(failure=err)

    def _from_mirror(self, file: RemoteFile, origin: RemoteMeta | None) -> Chosen:
        if file.rel in self._refused:
            raise MirrorMiss("the mirror's copy was refused earlier in this run")
        version = self._version()
        if origin is not None and self.route.commits:
            commit = getattr(self.origin, "resolved_commit", lambda: None)()
            if commit != version:
                raise MirrorMiss("the hub named no commit (a mirror of the hub without its API)")
        manifest = self._manifest(version)
        name = self.route.name_of(file)
        entry = manifest.files.get(name)
        if entry is None:
            raise MirrorMiss(f"the mirror's manifest of version {version} has no {name}")
        check_entry(entry, origin, file)
        key = self.route.place.file(version, name)
        mirror_file = self.store.file(key)
        meta = self._ask(lambda: self.store.fetcher.probe(mirror_file), key)
        if meta.size_bytes != entry.size_bytes:
            raise MirrorMiss(
                f"the mirror object {self.store.url_of(key)} has {meta.size_bytes} bytes, "
                f"its manifest {entry.size_bytes}"
            )
        return Chosen(mirror_file, meta, key, entry)

    def _version(self) -> str:
        route = self.route
        if route.commits and (self._at or _COMMIT.fullmatch(route.ref)):
            return self._at or route.ref
        if route.commits and not route.only:
            commit = getattr(self.origin, "resolved_commit", lambda: None)()
            if isinstance(commit, str) and commit:
                return commit
        data = self._read(route.place.ref(route.ref))
        if data is None:
            raise MirrorMiss(f"the mirror has no {route.ref!r} version of {route.identity}")
        try:
            return decode_ref(data)
        except BadDocument as exc:
            raise MirrorMiss(f"the mirror's ref {route.ref!r} is unreadable: {exc}") from None

    def _manifest(self, version: str) -> MirrorManifest:
        key = self.route.place.manifest(version)
        data = self._read(key)
        if data is None:
            raise MirrorMiss(f"the mirror does not hold version {version} of {self.route.identity}")
        try:
            manifest = decode_manifest(data)
        except BadDocument as exc:
            raise MirrorMiss(f"the mirror's manifest {key} is unreadable: {exc}") from None
        if manifest.identity != self.route.identity or manifest.version != version:
            raise MirrorMiss(f"the mirror's manifest {key} is of another origin or version")
        return manifest

    def _read(self, key: str) -> bytes | None:
        with self._lock:
            if key in self._docs:
                return self._docs[key]
        data = self._ask(lambda: self.store.read(key), key)
        with self._lock:
            self._docs[key] = data
        return data

    def _ask(self, call: Callable[[], _T], key: str) -> _T:
        try:
            return call()
        except SourceError as err:
            if err.reason is Reason.SOURCE_NOT_FOUND:
                raise MirrorMiss(f"the mirror has no {key}") from None
            raise MirrorDown(err) from err

    # -- when the mirror fails ---------------------------------------------------------

    def _fall_back(self, file: RemoteFile, asked: Asked, why: Why) -> RemoteMeta:
        if self.route.only:
            if why.error is not None:
                detail = f"the mirror failed: {why.error.detail}"
                raise why.error.amended(detail=detail, remedy=REMEDY_MIRROR)
            raise SourceError(
                f"{why.text}; LLMKUBE_MIRROR_ONLY=true: the origin is not asked",
                reason=Reason.SOURCE_NOT_FOUND,
                answered=True,
                file=file.rel,
                remedy=REMEDY_MIRROR_SEED,
            )
        if why.error is not None:
            self._down = why.text
            self._warn(
                "mirror_fallback", f"the mirror failed ({why.text}); using the origin", file.rel
            )
        elif self._log is not None:
            self._log.info(
                "mirror_miss", f"{why.text}; {file.rel} comes from the origin", file=file.rel
            )
        return self._from_origin(file, asked, why)

    def _from_origin(self, file: RemoteFile, asked: Asked, why: Why) -> RemoteMeta:
        """The origin's answer; when it fails too, its failure says the
        mirror's as well (the termination message gives both)."""
        if asked.answer is not None:
            return asked.answer
        try:
            if asked.failure is not None:
                raise asked.failure
            return self.origin_answer(file)
        except SourceError as err:
            if why.error is None and asked.failure is None:
                raise
            both = f"{err.detail} (the mirror could not serve it either: {why.text})"
            raise err.amended(detail=both) from err

    def _failed(self, chosen: Chosen, err: SourceError) -> SourceError:
        """A mirror GET failed: with the origin to fall back to, at once
        (not after the retries a lone origin deserves)."""
        if self.route.only:
            return err
        self._down = err.detail
        failed = err.amended(
            detail=f"the mirror object {self.store.url_of(chosen.key)}: {err.detail}"
        )
        failed.transient = False  # the origin is the retry (acting/work.py)
        return failed

    def _warn(self, event: str, message: str, rel: str) -> None:
        if self._log is not None:
            self._log.warning(event, message, file=rel)


class RevisionedMirrorFetcher(MirrorFetcher):
    """The mirror over a Hugging Face fetcher: the session asks it for the
    commit its files come from (acting/session.py `Revisioned`)."""

    @property
    def revision(self) -> str:
        return str(getattr(self.origin, "revision", ""))

    def resolved_commit(self) -> str | None:
        commit = getattr(self.origin, "resolved_commit", lambda: None)()
        if isinstance(commit, str) and commit:
            return commit
        if self.route.only:
            try:
                return self._version()
            except (MirrorMiss, MirrorDown):
                return None
        return None

    def resolve_at(self, commit: str) -> None:
        self._at = commit
        self.origin.resolve_at(commit)  # type: ignore[attr-defined]


class _MirrorBody(WrappedBody):
    """A mirror body whose failure (a stall, a reset) is the mirror's."""

    def __init__(self, body: Body, failed: Callable[[SourceError], SourceError]) -> None:
        super().__init__(body)
        self._failed = failed

    def readinto(self, buffer: memoryview) -> int:
        try:
            return self._body.readinto(buffer)
        except SourceError as err:
            raise self._failed(err) from err


def mirrored(config: Config, source: Source, origin: Fetcher) -> Fetcher:
    """The run's fetcher: the origin's, behind the mirror when one is set."""
    if config.mirror is None:
        return origin
    route = route_of(config, source)
    store = open_store(config, config.mirror)
    kind = RevisionedMirrorFetcher if route.commits else MirrorFetcher
    return kind(origin, store, route)
