"""The body of every command: what `llmkube-stager <command>` runs inside
the `Boundary` (boundary.py), which turns whatever it raises into a
termination message and an exit code.

No click here: cli.py parses options into flags for these functions, and
entry.py runs `stage`, `plan`, `verify` and `inspect` without options
straight from `BARE_COMMANDS` (#16: click was a sixth of a warm start;
`inspect` since #45). Each body imports the work it does when it runs,
so a warm `stage` pays for no other command. KServe's `SRC_URI DEST_DIR`
form is kserve/command.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from llmkube_stager.boundary import Boundary, Flags, cancel_on_sigterm
from llmkube_stager.config import inspect_target
from llmkube_stager.errors import ConfigError
from llmkube_stager.termination import log_staged, success_doc


def stage_command(flags: Flags) -> NoReturn:
    """Make the cache hold the model, then exit (init container / prefetch Job)."""
    boundary = Boundary(flags, os.environ, terminate=True)
    cancel_on_sigterm()

    def body() -> dict[str, Any]:
        # The warm path's probe: statfs magic and statvfs flags, no psutil.
        from llmkube_stager.cache.fs import probe_fs_quick
        from llmkube_stager.staging import Effects, stage_model

        config = boundary.config(flags)
        effects = Effects(log=boundary.log, probe_fs=probe_fs_quick)
        shown, outcome = stage_model(config, effects)
        doc = success_doc(outcome, shown)
        log_staged(boundary.log, doc, outcome)
        return doc

    boundary.run(body)


def plan_command(flags: Flags, as_json: bool = False, probe: bool = False) -> NoReturn:
    """Print the per-file decisions of `stage` without writing anything."""
    boundary = Boundary(flags, os.environ, terminate=False)

    def body() -> None:
        from llmkube_stager.cache.fs import probe_fs
        from llmkube_stager.commands.plan_view import render_plan
        from llmkube_stager.staging import Effects, prepare

        config = boundary.config(flags)
        # Without --probe the source is never asked (CONTRACT §2).
        effects = Effects(log=boundary.log, probe_fs=probe_fs, ask_source=probe)
        prepared = prepare(config, effects)
        text, failed = render_plan(config, prepared, as_json=as_json, probe=probe, log=boundary.log)
        boundary.echo(text)
        if failed is not None:
            raise failed  # the origin could not answer for a file: not a plan to trust

    boundary.run(body)


def verify_command(flags: Flags, strict: bool = False) -> NoReturn:
    """Read-only, offline check that the cache holds the whole model."""
    boundary = Boundary(flags, os.environ, terminate=True)

    def body() -> dict[str, Any]:
        import time

        from llmkube_stager.commands.verify import check_files, judge
        from llmkube_stager.model import Decision, FileResult, Outcome

        started = time.monotonic()
        config = boundary.config(flags, require_source=False)
        report = check_files(config)
        judge(report, strict, boundary.log)
        if report.signature:
            boundary.log.info("signature_checked", report.signature)
        results = tuple(FileResult(rel, Decision.REUSE) for rel in report.checked)
        doc = success_doc(Outcome(results, time.monotonic() - started), boundary.source, "verified")
        boundary.log.info("verified", doc["message"])
        return doc

    boundary.run(body)


def inspect_command(cache_dir: str | None, as_json: bool = False) -> NoReturn:
    """Report a cache directory (the argument, else CACHE_DIR): files,
    records, stamps, leftovers, filesystem."""
    boundary = Boundary({}, os.environ, terminate=False)

    def body() -> None:
        import time

        from llmkube_stager.commands.inspect import inspect_dir, render

        target = inspect_target(os.environ, cache_dir)
        if not target or not os.path.isdir(target):
            raise ConfigError(f"CACHE_DIR {target!r} is not a directory")
        boundary.echo(render(inspect_dir(target, time.time()), as_json))

    boundary.run(body)


def diagnose_command(source: str = "-") -> NoReturn:
    """Print the condition a controller should set for a termination message
    (or a log tail): FILE, or - for standard input."""
    boundary = Boundary({}, os.environ, terminate=False)

    def body() -> None:
        import json
        import sys

        from llmkube_stager.commands.diagnose import condition_for

        try:
            text = sys.stdin.read() if source == "-" else _read_text(source)
        except OSError as exc:
            raise ConfigError(f"cannot read {source}: {exc.strerror}") from exc
        condition = condition_for(text)
        if condition is None:
            boundary.log.warning(
                "nothing_to_diagnose",
                "no termination message in the input (a JSON object with a reason) and no "
                "line a known failure matches: no condition to set; give the container's "
                "termination message (kubectl get pod POD -o jsonpath='{.status."
                "initContainerStatuses[0].lastState.terminated.message}') or its log",
            )
        boundary.echo(json.dumps(condition or {}, separators=(",", ":")))

    boundary.run(body)


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def _bare_inspect(flags: Flags) -> NoReturn:
    """`inspect` with no argument: the cache of CACHE_DIR, as a table."""
    inspect_command(None)


# The commands entry.py runs without click when given no option.
BARE_COMMANDS: Mapping[str, Callable[[Flags], NoReturn]] = {
    "stage": stage_command,
    "plan": plan_command,
    "verify": verify_command,
    "inspect": _bare_inspect,
}
