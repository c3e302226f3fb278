"""Value types shared by the transfer engine's modules (the bottom of the
package: of its siblings it imports only writemode.py, which imports none,
so the engine, the stream and the parallel transfer can all use these
without an import cycle)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmkube_stager.cache.heldpartial import HeldPartial
from llmkube_stager.config import Timeouts
from llmkube_stager.logs import Log
from llmkube_stager.transfer.writemode import PageCacheBudget

if TYPE_CHECKING:
    from hashlib import _Hash

    from llmkube_stager.transfer.progress import ModelProgress


@dataclass(frozen=True)
class TransferEffects:
    log: Log
    sleep: Callable[[float], None]
    wall_clock: Callable[[], float]
    timeouts: Timeouts
    progress_interval_s: float
    free_bytes: Callable[[], int | None]
    # How long a partial must be untouched before it is adopted or removed:
    # 0 under an exclusive cross-node lock, partials.IDLE_S without one.
    idle_s: float
    # Ranged connections per large file (LLMKUBE_CONNECTIONS).
    connections: int = 1
    # Every destination of the manifest: never removed as a stale partial.
    listed: frozenset[str] = frozenset()
    # Write partials with O_DIRECT (a local block filesystem: directio.py).
    direct_io: bool = False
    # LLMKUBE_DIRECT_IO=auto: files that fit it go through the page cache
    # instead (writemode.py); one budget per run.
    page_cache: PageCacheBudget | None = None
    # For rates (the widening decision), not for file times.
    monotonic: Callable[[], float] = time.monotonic
    # Destinations with nothing beside them to resume or remove when the run
    # began (cache/partialnames.without_partials): their transfer starts a new
    # partial without listing the directory (#16: one listing per file is
    # O(files^2) for a model of many files).
    no_partials: frozenset[str] = frozenset()
    # The run's bytes across files, for the model's part of a progress line.
    model: ModelProgress | None = None


@dataclass(frozen=True)
class Completed:
    """A partial holding the whole file, not yet published; `claim` holds it
    (open, flocked) until it is published or discarded."""

    rel: str
    claim: HeldPartial
    dest: str
    expected_bytes: int | None
    sha256: str | None  # of the received bytes, when the file is pinned
    bytes_received: int
    journal: str | None = None  # a parallel transfer's progress journal

    @property
    def partial(self) -> str:
        return self.claim.path


@dataclass(frozen=True)
class Handover:
    """A stream stopped early for ranged connections: its partial holds
    bytes [0, offset); `sha` covers them when the file is hashed."""

    claim: HeldPartial
    offset: int
    sha: _Hash | None
    received: int
    rate_bytes_per_s: float
