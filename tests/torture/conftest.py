"""The torture suite (#10): the real CLI against loopback origins,
killed, frozen, raced and lied to, with the promise checked after every
round: the final cache is byte-identical to the origin, its records and
stamps are true, no rejection marker names the right digest, and the bytes
served stay bounded. Every run has a deadline and must end with a reason.

Every test under tests/torture/ is marked `torture` here (files added later
join by being in this directory). `make torture-quick` (inside `make
test`) runs the quick scale; `make torture` sets LLMKUBE_TORTURE=full for
the full iteration counts. Figures of a run are printed at its end and
written to $LLMKUBE_TORTURE_STATS (docs/reliability.md holds the last full
run's).

Shared fixtures: `scale`, `stats`, `shims` (LD_PRELOAD objects compiled
with gcc: a no-op flock standing in for NFS with node-local locks, and a
clock offset standing in for a node whose clock is fast; the types and the
sources are tests/harness/torture.py's), `two_nodes` (two bindfs mounts of
one directory), the torture budget of the suite's `pod`
(tests/harness/pod.py) and the hostile tests' `sandbox`
(tests/harness/sandbox.py). `origin` is the suite's (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.harness.features import missing_feature
from tests.harness.mounts import TwoNodes, fuse_missing, two_mounts
from tests.harness.pod import NOBODY
from tests.harness.sandbox import Sandbox, open_sandbox
from tests.harness.torture import FULL, Scale, Shims, Stats, build_shims


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.torture)
    if FULL:
        return
    # The quick scale (`make test`, `make torture-quick`) leaves the long
    # cases to `make torture`: deselected, never skipped (a skip fails CI).
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


@pytest.fixture(scope="session")
def scale() -> Scale:
    return Scale(FULL)


_STATS = Stats()


@pytest.fixture(scope="session")
def stats() -> Stats:
    return _STATS


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _STATS.counts:
        return
    doc = _STATS.figures(FULL)
    terminalreporter.write_line("torture figures: " + json.dumps(doc))
    target = os.environ.get("LLMKUBE_TORTURE_STATS")
    if target:
        Path(target).write_text(json.dumps(doc, indent=1) + "\n")


@pytest.fixture(scope="session")
def shims() -> Iterator[Shims]:
    gcc = shutil.which("gcc")
    if gcc is None:
        missing_feature("gcc not installed (LD_PRELOAD shims for flock and the clock)")
    with tempfile.TemporaryDirectory(prefix="llmkube-shims-") as tmp:
        yield build_shims(gcc, Path(tmp))


@pytest.fixture
def pod_budget() -> Mapping[str, str]:
    """Room for the faults and kills of a torture round (a run still has
    a deadline: `Pod.finish` fails one that hangs)."""
    return {
        "LLMKUBE_CONNECT_TIMEOUT": "2",
        "LLMKUBE_STALL_TIMEOUT": "3",
        "LLMKUBE_RETRIES": "3",
        "LLMKUBE_MAX_RETRY_WAIT": "1",
    }


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with open_sandbox() as box:
        yield box


@pytest.fixture
def nobody_sandbox() -> Iterator[Sandbox]:
    """A sandbox whose runs are uid 65534's, for whom mode 000 means unreadable."""
    with open_sandbox(NOBODY) as box:
        yield box


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[TwoNodes]:
    """Two bindfs mounts of one directory: flock excludes within a mount,
    not across them (two nodes of one FUSE volume)."""
    missing = fuse_missing()
    if missing:
        missing_feature(missing)
    with two_mounts(tmp_path) as nodes:
        yield nodes
