"""The command line: click parses options into flags and calls the command
(commands/run.py), whose `Boundary` translates every error into a
termination message and an exit code (CONTRACT §2, §5). entry.py runs
`stage`, `plan`, `verify` and `inspect` without options before this module is
imported.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

import click

from llmkube_stager import __version__
from llmkube_stager.config import VARS, Var, early_settings
from llmkube_stager.errors import EXIT_OK, EXIT_RETRYABLE

# The boundary and the command bodies are imported where a command runs:
# `--help` and `--version` run none (#45 item 2).
if TYPE_CHECKING:
    from llmkube_stager.boundary import Flags


def _param(var_env: str) -> str:
    return var_env.lower()


def config_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Every contract variable as a flag (`--model-source` for MODEL_SOURCE)."""
    for var in reversed(VARS):
        func = click.option(
            var.flag, _param(var.env), default=None, metavar="TEXT", help=_help(var)
        )(func)
    return func


def _help(var: Var) -> str:
    # default=None above tells a flag not given from one given; the
    # default the variable stands for is shown instead.
    default = f"; default {var.default}" if var.default else ""
    return f"{var.help} [{var.env}{default}]"


def _flags(kwargs: Mapping[str, Any]) -> Flags:
    return {var.env: kwargs.get(_param(var.env)) for var in VARS}


class GroupedHelp(click.Command):
    """The variables' flags in the README's groups, then examples to copy
    (helptext.py); the command's own options first."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from llmkube_stager.helptext import grouped

        records = {p.name: p.get_help_record(ctx) for p in self.get_params(ctx)}
        by_env = {var.env: records.pop(_param(var.env), None) for var in VARS}
        own = [r for r in records.values() if r is not None]
        with formatter.section("Options"):
            formatter.write_dl(own)
        for title, envs in grouped(e for e, r in by_env.items() if r is not None):
            with formatter.section(title[:1].upper() + title[1:]):
                formatter.write_dl([r for r in (by_env[e] for e in envs) if r is not None])

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from llmkube_stager.helptext import EXAMPLES

        formatter.write_paragraph()
        for line in EXAMPLES.splitlines():
            formatter.write(f"  {line}\n" if line else "\n")


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
        from llmkube_stager.boundary import Boundary

        Boundary({}, os.environ, terminate=terminate).usage_error(exc.format_message())
    sys.exit(EXIT_OK)


@cli.command(cls=GroupedHelp)
@config_options
def stage(**kwargs: Any) -> None:
    """Make the cache hold the model, then exit (init container / prefetch Job)."""
    from llmkube_stager.commands.run import stage_command

    stage_command(_flags(kwargs))


@cli.command(cls=GroupedHelp)
@config_options
@click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout")
@click.option(
    "--probe",
    is_flag=True,
    help="ask the source: its listing where none is recorded, then sizes and validators (HEAD)",
)
def plan(as_json: bool, probe: bool, **kwargs: Any) -> None:
    """Print the per-file decisions of `stage` without writing anything."""
    from llmkube_stager.commands.run import plan_command

    plan_command(_flags(kwargs), as_json, probe)


@cli.command(cls=GroupedHelp)
@config_options
@click.option("--strict", is_flag=True, help="a file without a size record fails too")
def verify(strict: bool, **kwargs: Any) -> None:
    """Read-only, offline check that the cache holds the whole model."""
    from llmkube_stager.commands.run import verify_command

    verify_command(_flags(kwargs), strict)


@cli.command()
@click.argument("cache_dir", required=False)
@click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout")
def inspect(cache_dir: str | None, as_json: bool) -> None:
    """Report a cache directory: files, records, stamps, leftovers, filesystem."""
    from llmkube_stager.commands.run import inspect_command

    inspect_command(cache_dir, as_json)


@cli.command()
@click.argument("source", required=False, default="-")
def diagnose(source: str) -> None:
    """Print the condition a controller should set for a termination message
    (or a log tail): FILE, or - for standard input."""
    from llmkube_stager.commands.run import diagnose_command

    diagnose_command(source)


if __name__ == "__main__":  # pragma: no cover
    main()
