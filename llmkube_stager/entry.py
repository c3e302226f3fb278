"""The console script (`llmkube-stager`, `python -m llmkube_stager`).

`stage`, `plan`, `verify` and `inspect` without options (how the
operator's pods run the agent: configuration comes from the environment, CONTRACT §2) go
straight to their command (commands/run.py); so do KServe's
storage-initializer arguments (`SRC_URI DEST_DIR ...`, kserve/command.py);
anything else goes through click (cli.py). click and what it imports
(inspect, uuid, datetime, gettext) were a sixth of a warm start, which a
serving pod waits for on every start (#16)."""

from __future__ import annotations

import sys
from typing import NoReturn


def main(argv: list[str] | None = None) -> NoReturn:
    args = sys.argv[1:] if argv is None else argv
    # An option alone (`--help`, `--version`) is click's: it runs no command,
    # so it loads no boundary (#45 item 2).
    if len(args) == 1 and not args[0].startswith("-"):
        from llmkube_stager.boundary import no_flags
        from llmkube_stager.commands.run import BARE_COMMANDS

        command = BARE_COMMANDS.get(args[0])
        if command is not None:
            command(no_flags())
    if args and args[0] == "check-command":
        from llmkube_stager.operator.check import main as check_main

        check_main(args[1:])
    if args and _is_kserve_form(args[0]):
        from llmkube_stager.kserve.command import kserve_command

        kserve_command(args)
    from llmkube_stager.cli import main as click_main

    click_main(argv)


def _is_kserve_form(first: str) -> bool:
    """KServe's webhook runs the image with `args: [<storageUri>, /mnt/models]`
    (#24 item 1): a URI or a path where a command name would be."""
    return "://" in first or first.startswith("/")
