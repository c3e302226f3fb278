"""The boundary of every command: the ONLY place that turns errors into a
termination message and an exit code (CONTRACT §2, §5). The commands
(commands/run.py, kserve/command.py) run their bodies inside a `Boundary`;
it needs no click, so entry.py can run a command bare (#16: click is a
sixth of a warm start).

0 success; 1 a failure restarting may fix (`retryable`); 4 a failure retrying
as is cannot fix; 2 usage or configuration error found before any I/O; 3
internal error (a bug: traceback in the log). `errors.exit_code_for` decides.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, NoReturn

from llmkube_stager.config import (
    VARS,
    Config,
    early_log_level,
    early_settings,
    load_config,
    remedy_words,
    secret_values,
    unknown_variables,
)
from llmkube_stager.errors import (
    EXIT_INTERNAL,
    EXIT_OK,
    Cancelled,
    ConfigError,
    Reason,
    StagerError,
)
from llmkube_stager.logs import Log, Redactor, display_url
from llmkube_stager.termination import encode, failure_doc, failure_message, write_termination

# Contract variable -> its command-line value (None: not given).
Flags = dict[str, str | None]


def no_flags() -> Flags:
    """What click passes when no option is given."""
    return {var.env: None for var in VARS}


def cancel_on_sigterm() -> None:
    """A SIGTERM (the kubelet stopping the pod) becomes `Cancelled`, which
    the boundary reports like any failure."""
    signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # Raised in the main thread between bytecodes (PEP 475 retries the
    # interrupted recv only if the handler returns): partials stay for resume.
    raise Cancelled("received SIGTERM during staging")


class Boundary:
    """Builds the redacting logger first, then runs a command and translates
    whatever it raises, exactly once."""

    def __init__(self, flags: Flags, environ: Mapping[str, str], *, terminate: bool) -> None:
        fmt, self.termination_path = early_settings(environ, flags)
        self.redact = Redactor(secret_values(environ, flags))
        # Buffered: a warm start's burst of cache hits is one write (logs.py);
        # every way out of `run` flushes it.
        level = early_log_level(environ, flags)
        self.log = Log(sys.stderr, fmt, self.redact, buffered=True, level=level)
        self.terminate = terminate
        self.source = display_url(flags.get("MODEL_SOURCE") or environ.get("MODEL_SOURCE", ""))
        self._environ = environ
        # "kserve": the command reworded its failures already (kserve/command.py).
        self.words: str = remedy_words(environ, flags)

    def config(self, flags: Flags, *, require_source: bool = True) -> Config:
        """The configuration; the values it tolerated (as the scripts did)
        are logged as warnings here, where the logger exists."""
        # Before the configuration is read: a misspelt MODEL_SOURCE is named
        # beside "MODEL_SOURCE is required" (#46 item 4).
        for warning in unknown_variables(self._environ):
            self.log.warning("unknown_variable", warning)
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

    def echo(self, text: str) -> None:
        """A command's output on stdout, redacted (what click.echo does with
        text)."""
        sys.stdout.write(self.redact(text) + "\n")
        sys.stdout.flush()

    def usage_error(self, text: str) -> NoReturn:
        self._fail(ConfigError(f"usage: {text}"))

    def _fail(self, err: StagerError) -> NoReturn:
        if self.words == "variables":
            from llmkube_stager.words import in_variables_words

            err = in_variables_words(err)
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
