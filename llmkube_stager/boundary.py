"""The boundary of every command: the ONLY place that turns errors into a
termination message and an exit code (CONTRACT §2, §5), and the bodies of
`stage`, `plan` and `verify`, which need no click: cli.py parses options
into flags for them, and entry.py runs them bare (no option) without
importing click at all (#16: click is a sixth of a warm start).

0 success; 1 a failure restarting may fix (`retryable`); 4 a failure retrying
as is cannot fix; 2 usage or configuration error found before any I/O; 3
internal error (a bug: traceback in the log). `errors.exit_code_for` decides.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, NoReturn

from llmkube_stager.config import VARS, Config, early_settings, load_config, secret_values
from llmkube_stager.errors import (
    EXIT_INTERNAL,
    EXIT_OK,
    Cancelled,
    ConfigError,
    Reason,
    StagerError,
)
from llmkube_stager.logs import Log, Redactor, display_url
from llmkube_stager.termination import (
    encode,
    failure_doc,
    failure_message,
    success_doc,
    write_termination,
)

# Contract variable -> its command-line value (None: not given).
Flags = dict[str, str | None]


def no_flags() -> Flags:
    """What click passes when no option is given."""
    return {var.env: None for var in VARS}


def echo(text: str) -> None:
    """A command's output on stdout (what click.echo does with text)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class Boundary:
    """Builds the redacting logger first, then runs a command and translates
    whatever it raises, exactly once."""

    def __init__(self, flags: Flags, environ: Mapping[str, str], *, terminate: bool) -> None:
        fmt, self.termination_path = early_settings(environ, flags)
        self.redact = Redactor(secret_values(environ, flags))
        # Buffered: a warm start's burst of cache hits is one write (logs.py);
        # every way out of `run` flushes it.
        self.log = Log(sys.stderr, fmt, self.redact, buffered=True)
        self.terminate = terminate
        self.source = display_url(flags.get("MODEL_SOURCE") or environ.get("MODEL_SOURCE", ""))
        self._environ = environ

    def config(self, flags: Flags, *, require_source: bool = True) -> Config:
        """The configuration; the values it tolerated (as the scripts did)
        are logged as warnings here, where the logger exists."""
        config = load_config(self._environ, flags, require_source=require_source)
        for warning in config.warnings:
            self.log.warning("config_tolerated", warning)
        return config

    def run(self, body: Callable[[], dict[str, Any] | None]) -> NoReturn:
        try:
            try:
                doc = body()
            except StagerError as err:
                self._fail(err)
            except KeyboardInterrupt:
                self._fail(Cancelled("interrupted"))
            except OSError as exc:
                # A fault of the volume that no inner layer translated (EIO,
                # a dead mount, no inode left: #21 item 7) is its reason,
                # not a bug; any other OSError is one.
                from llmkube_stager.cache.disk import storage_fault

                where = exc.filename if isinstance(exc.filename, str) else ""
                fault = storage_fault(exc, f"using {where}" if where else "using the cache")
                if fault is None:
                    self._internal(exc)
                self._fail(fault)
            except Exception as exc:
                self._internal(exc)
            if doc is not None and self.terminate:
                write_termination(self.termination_path, encode(doc))
            sys.exit(EXIT_OK)
        finally:
            self.log.flush()

    def usage_error(self, text: str) -> NoReturn:
        self._fail(ConfigError(f"usage: {text}"))

    def _fail(self, err: StagerError) -> NoReturn:
        data = encode(failure_doc(err, self.source, self.redact))
        # The log line and the termination message say the same thing, remedy
        # included (scenario 40: log and condition cannot disagree).
        self.log.error("failed", failure_message(err, self.redact), reason=err.reason.value)
        if self.terminate:
            write_termination(self.termination_path, data)
        sys.exit(err.exit_code)

    def _internal(self, exc: BaseException) -> NoReturn:
        import traceback

        trace = "".join(traceback.format_exception(exc))
        self.log.error("internal_error", f"internal error: {trace}")
        err = StagerError(f"internal error: {type(exc).__name__}", reason=Reason.INTERNAL)
        if self.terminate:
            write_termination(
                self.termination_path, encode(failure_doc(err, self.source, self.redact))
            )
        sys.exit(EXIT_INTERNAL)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # Raised in the main thread between bytecodes (PEP 475 retries the
    # interrupted recv only if the handler returns): partials stay for resume.
    raise Cancelled("received SIGTERM during staging")


def stage_command(flags: Flags) -> NoReturn:
    """Make the cache hold the model, then exit (init container / prefetch Job)."""
    boundary = Boundary(flags, os.environ, terminate=True)
    signal.signal(signal.SIGTERM, _on_sigterm)

    def body() -> dict[str, Any]:
        # The warm path's probe: statfs magic and statvfs flags, no psutil.
        from llmkube_stager.cache.fs import probe_fs_quick
        from llmkube_stager.staging import Effects, run_stage

        config = boundary.config(flags)
        effects = Effects(log=boundary.log, probe_fs=probe_fs_quick)
        prepared, outcome = run_stage(config, effects)
        doc = success_doc(outcome, prepared.manifest.display_source)
        boundary.log.info("staged", doc["message"], seconds=round(outcome.seconds, 3))
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
        prepared = prepare(config, Effects(log=boundary.log, probe_fs=probe_fs))
        text = render_plan(config, prepared, as_json=as_json, probe=probe, log=boundary.log)
        echo(boundary.redact(text))

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
        results = tuple(FileResult(rel, Decision.REUSE) for rel in report.checked)
        doc = success_doc(Outcome(results, time.monotonic() - started), boundary.source, "verified")
        boundary.log.info("verified", doc["message"])
        return doc

    boundary.run(body)


# The commands entry.py runs without click when given no option.
BARE_COMMANDS: Mapping[str, Callable[[Flags], NoReturn]] = {
    "stage": stage_command,
    "plan": plan_command,
    "verify": verify_command,
}
