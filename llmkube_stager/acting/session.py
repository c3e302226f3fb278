"""A run's network state and identity (`Session`), shared by the staging
orchestration (probes, a share's listing) and the acting layer (transfers).

The identity is given when the session is built: which writer's run record
the run writes (`writer`: the model's own, or a share's, cache/runrecord.py).
The commit its files are fetched at is learned later, from the run record
under the writer lock (an interrupted Hugging Face run is finished from its
commit, #10 defect 11) or from a sharded Job's claim (#21 item 4): it is
set through `fetch_at`, which reopens a fetcher already open at another.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from llmkube_stager.cache.runrecord import MAIN
from llmkube_stager.config import Config
from llmkube_stager.logs import Log
from llmkube_stager.model import FsInfo, RemoteFile, Strategy
from llmkube_stager.sources.base import Fetcher, RemoteMeta, Source

if TYPE_CHECKING:
    # The transfer machinery (threads, hashing, sockets) is imported only
    # when something is transferred: a warm start never pays for it.
    from llmkube_stager.transfer import TransferEffects
    from llmkube_stager.transfer.writemode import PageCacheBudget


@runtime_checkable
class Revisioned(Protocol):
    """A fetcher whose files come from one commit of a revision (HF)."""

    revision: str

    def resolved_commit(self) -> str | None: ...

    def resolve_at(self, commit: str) -> None: ...


@dataclass(frozen=True)
class Resolved:
    revision: str
    commit: str | None  # None: not resolved, or no longer on the hub


@dataclass(frozen=True)
class Clock:
    sleep: Callable[[float], None]
    monotonic: Callable[[], float]
    wall_clock: Callable[[], float]


@dataclass(eq=False, repr=False)
class Session:
    """Per-run network state: one fetcher, opened on first use, and the
    probe answers (so a transfer does not HEAD what revalidation or a
    share's listing asked already). No generated repr: the answers hold
    URLs after redirects, signed ones among them."""

    config: Config
    log: Log
    clock: Clock
    fs: FsInfo
    strategy: Strategy
    writer: str = MAIN
    metas: dict[str, RemoteMeta] = field(default_factory=dict, init=False)
    _fetcher: Fetcher | None = field(default=None, init=False)
    _commit: str | None = field(default=None, init=False)
    _opening: threading.Lock = field(default_factory=threading.Lock, init=False)
    _page_cache: PageCacheBudget | None = field(default=None, init=False)

    @property
    def over_whole_model(self) -> bool:
        """The run stages the whole model, not one share (the run's mode,
        staging/mode.py, #32 item 3): its record is the model's own."""
        return self.writer == MAIN

    def fetcher(self, source: Source) -> Fetcher:
        with self._opening:  # files in flight: one fetcher for all
            if self._fetcher is None:
                self._fetcher = source.fetcher()
                if self.config.mirror is not None:
                    # The mirror first (docs/mirror.md), imported only then.
                    from llmkube_stager.mirror.reader import mirrored

                    self._fetcher = mirrored(self.config, source, self._fetcher)
                # A fetcher that reports on its own (S3: where its
                # credentials came from, a re-signed URL) takes the run's log.
                self._fetcher.bind_log(self.log)
                if self._commit is not None and isinstance(self._fetcher, Revisioned):
                    self._fetcher.resolve_at(self._commit)
            return self._fetcher

    def fetch_at(self, commit: str | None) -> None:
        """The files come from `commit` (None: the revision as the hub
        resolves it). A fetcher already open forgets what it answered and
        is opened again (a sharded Job's claim names another commit)."""
        with self._opening:
            if commit == self._commit:
                return  # already so: a fetcher open at it keeps its answers
            if self._fetcher is not None:
                self._fetcher.close()
                self._fetcher = None
                self.metas.clear()
            self._commit = commit

    def resolved(self) -> Resolved | None:
        """The revision and commit the open fetcher's files come from,
        where its source has commits (Hugging Face); else None."""
        fetcher = self._fetcher
        if not isinstance(fetcher, Revisioned):
            return None
        return Resolved(fetcher.revision, fetcher.resolved_commit())

    def transfer_effects(
        self,
        root: str,
        listed: frozenset[str] = frozenset(),
        no_partials: frozenset[str] = frozenset(),
    ) -> TransferEffects:
        from llmkube_stager.cache.partials import IDLE_S
        from llmkube_stager.transfer import TransferEffects

        return TransferEffects(
            log=self.log,
            sleep=self.clock.sleep,
            wall_clock=self.clock.wall_clock,
            timeouts=self.config.timeouts,
            progress_interval_s=self.config.progress_interval_s,
            free_bytes=lambda: _free_bytes(self.fs, root),
            # Where flock is believed to exclude across nodes, a partial's own
            # flock is the proof of life: adopt a free one at once.
            idle_s=0.0 if self.strategy.lock_excludes else IDLE_S,
            connections=self.config.connections,
            listed=listed,
            direct_io=self.strategy.direct_io,
            no_partials=no_partials,
            page_cache=self._page_cache_budget(),
        )

    def _page_cache_budget(self) -> PageCacheBudget | None:
        """LLMKUBE_DIRECT_IO=auto: one budget per run, its room read when
        the first transfer asks (never on a warm start)."""
        if not (self.config.direct_io_mode == "auto" and self.strategy.direct_io):
            return None
        with self._opening:  # files in flight share one budget
            if self._page_cache is None:
                from llmkube_stager.transfer.writemode import PageCacheBudget, memory_room_bytes

                self._page_cache = PageCacheBudget(memory_room_bytes)
            return self._page_cache

    def probe(self, source: Source, file: RemoteFile, root: str = "/") -> RemoteMeta:
        from llmkube_stager.transfer import probe

        meta = probe(self.fetcher(source), file, self.transfer_effects(root))
        self.metas[file.rel] = meta
        return meta

    def close(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()


def _free_bytes(fs: FsInfo, root: str) -> int | None:
    if not fs.free_space_meaningful:
        return None
    from llmkube_stager.cache.fs import free_bytes  # psutil: the write path only

    return free_bytes(root)
