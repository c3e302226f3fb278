"""The command line. The ONLY place that turns errors into a termination
message and an exit code (CONTRACT §2, §5):

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

import click

from llmkube_stager import __version__
from llmkube_stager.config import VARS, Config, early_settings, load_config, secret_values
from llmkube_stager.errors import (
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_RETRYABLE,
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

Flags = dict[str, str | None]


def _param(var_env: str) -> str:
    return var_env.lower()


def config_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Every contract variable as a flag (`--model-source` for MODEL_SOURCE)."""
    for var in reversed(VARS):
        func = click.option(
            var.flag, _param(var.env), default=None, metavar="TEXT", help=f"{var.help} [{var.env}]"
        )(func)
    return func


def _flags(kwargs: Mapping[str, Any]) -> Flags:
    return {var.env: kwargs.get(_param(var.env)) for var in VARS}


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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
# The version is given, so click never scans importlib.metadata for it.
@click.version_option(__version__, prog_name="llmkube-stager", message="%(prog)s %(version)s")
def cli() -> None:
    """llmkube-stager: stage LLM model files into a shared cache."""


def main(argv: list[str] | None = None) -> NoReturn:
    """Console entry: click's own usage errors (unknown flag, missing value)
    also end with an InvalidConfiguration termination message (CONTRACT §5)."""
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.Abort:
        sys.exit(EXIT_RETRYABLE)
    except click.ClickException as exc:
        if early_settings(os.environ, {})[0] == "text":
            exc.show()  # JSON logs stay one JSON object per line
        args = sys.argv[1:] if argv is None else argv
        # Only the commands that report through the termination message do.
        terminate = bool(args) and args[0] in ("stage", "verify")
        Boundary({}, os.environ, terminate=terminate).usage_error(exc.format_message())
    sys.exit(EXIT_OK)


@cli.command()
@config_options
def stage(**kwargs: Any) -> None:
    """Make the cache hold the model, then exit (init container / prefetch Job)."""
    flags = _flags(kwargs)
    boundary = Boundary(flags, os.environ, terminate=True)
    signal.signal(signal.SIGTERM, _on_sigterm)

    def body() -> dict[str, Any]:
        # The warm path's probe: statfs magic and statvfs flags, no psutil.
        from llmkube_stager.cache.fs import probe_fs_quick
        from llmkube_stager.stage import Effects, run_stage

        config = boundary.config(flags)
        effects = Effects(log=boundary.log, probe_fs=probe_fs_quick)
        prepared, outcome = run_stage(config, effects)
        doc = success_doc(outcome, prepared.manifest.display_source)
        boundary.log.info("staged", doc["message"], seconds=round(outcome.seconds, 3))
        return doc

    boundary.run(body)


@cli.command()
@config_options
@click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout")
@click.option("--probe", is_flag=True, help="ask the origin (HEAD) for sizes and validators")
def plan(as_json: bool, probe: bool, **kwargs: Any) -> None:
    """Print the per-file decisions of `stage` without writing anything."""
    flags = _flags(kwargs)
    boundary = Boundary(flags, os.environ, terminate=False)

    def body() -> None:
        from llmkube_stager.cache.fs import probe_fs
        from llmkube_stager.commands.plan_view import render_plan
        from llmkube_stager.stage import Effects, prepare

        config = boundary.config(flags)
        prepared = prepare(config, Effects(log=boundary.log, probe_fs=probe_fs))
        text = render_plan(config, prepared, as_json=as_json, probe=probe, log=boundary.log)
        click.echo(boundary.redact(text))

    boundary.run(body)


@cli.command()
@config_options
@click.option("--strict", is_flag=True, help="a file without a size record fails too")
def verify(strict: bool, **kwargs: Any) -> None:
    """Read-only, offline check that the cache holds the whole model."""
    flags = _flags(kwargs)
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


@cli.command()
@click.argument("cache_dir", required=False)
@click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout")
def inspect(cache_dir: str | None, as_json: bool) -> None:
    """Report a cache directory: files, records, stamps, leftovers, filesystem."""
    boundary = Boundary({}, os.environ, terminate=False)

    def body() -> None:
        import time

        from llmkube_stager.commands.inspect import inspect_dir, render

        target = cache_dir or os.environ.get("CACHE_DIR", "")
        if not target or not os.path.isdir(target):
            raise ConfigError(f"CACHE_DIR {target!r} is not a directory")
        click.echo(boundary.redact(render(inspect_dir(target, time.time()), as_json)))

    boundary.run(body)


@cli.command()
@click.argument("source", required=False, default="-")
def diagnose(source: str) -> None:
    """Print the condition a controller should set for a termination message
    (or a log tail): FILE, or - for standard input."""
    boundary = Boundary({}, os.environ, terminate=False)

    def body() -> None:
        import json

        from llmkube_stager.commands.diagnose import condition_for

        try:
            text = sys.stdin.read() if source == "-" else _read_text(source)
        except OSError as exc:
            raise ConfigError(f"cannot read {source}: {exc.strerror}") from exc
        condition = condition_for(text)
        click.echo(boundary.redact(json.dumps(condition or {}, separators=(",", ":"))))

    boundary.run(body)


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


if __name__ == "__main__":  # pragma: no cover
    main()
