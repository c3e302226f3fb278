"""The console script (`llmkube-stager`, `python -m llmkube_stager`).

`stage`, `plan` and `verify` without options (how the operator's pods run
the agent: configuration comes from the environment, CONTRACT §2) go
straight to their command; anything else goes through click (cli.py). click
and what it imports (inspect, uuid, datetime, gettext) were a sixth of a
warm start, which a serving pod waits for on every start (#16)."""

from __future__ import annotations

import sys
from typing import NoReturn


def main(argv: list[str] | None = None) -> NoReturn:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 1:
        from llmkube_stager.boundary import BARE_COMMANDS, no_flags

        command = BARE_COMMANDS.get(args[0])
        if command is not None:
            command(no_flags())
    from llmkube_stager.cli import main as click_main

    click_main(argv)
