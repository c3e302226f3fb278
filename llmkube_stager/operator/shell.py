"""The image's `sh` (/opt/llmkube/bin/sh, first on PATH; #30 item 1).

Today's operator runs every container in its init image as
`sh -c <generated script>`, which overrides the image's entrypoint. So the
image answers to `sh`:

- `sh -c SCRIPT` (also `sh -ec`, `sh -e -c`, `sh -xc`: the options the
  agent honours, see `command_script`) where SCRIPT is one of the
  operator's download commands
  (recognise.py): the agent's `stage`, in this process, with what the
  script encodes (policy, pins, the local file, the CA directory) given as
  flags, and the operator's environment read as the contract says;
- `sh -c SCRIPT` that would run curl but is not recognised: refused, with a
  termination message naming the command (#30 item 2): this image has no
  curl, and half a script must never end in exit 0 without the model;
- a recognised script whose MODEL_SOURCE is not of its kind (a pvc verify
  or a local copy with an http source): refused the same way, so that what
  the script encodes is what the agent does;
- anything else (the model-cache-prep container's chown/chmod, the prefetch
  Job's `echo prefetch complete`, the operator's `echo "ERROR: ..."; exit 1`
  placeholders, any other use of sh): the real /bin/sh, exec'd with the
  same arguments, exactly as it would run in the operator's default image.

Imports nothing heavy before it knows which: the prep container, run as
uid 0 on every start, pays for one small module.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from llmkube_stager.operator.recognise import OperatorCommand

REAL_SH = "/bin/sh"
# Where the script's commands are shown in a refusal (recognise.outline):
# enough to tell the builder that made it, short enough for the 200 bytes
# the controller shows.
_SHOWN_CHARS = 120


def main(argv: list[str] | None = None) -> NoReturn:
    args = sys.argv[1:] if argv is None else argv
    script = command_script(args)
    # Every download command names $MODEL_PATH or $MODEL_FILES, and only a
    # script with the word curl can be refused: anything else (the prep
    # container on every start) goes to /bin/sh without the recogniser.
    if script is not None and ("MODEL_" in script or "curl" in script):
        from llmkube_stager.operator.recognise import (
            calls_curl,
            recognise,
            source_mismatch,
            why_not,
        )

        command = recognise(script)
        if command is not None:
            mismatch = source_mismatch(command, os.environ.get("MODEL_SOURCE", ""))
            if mismatch:
                refuse(script, mismatch)
            run_agent(command)
        if calls_curl(script):
            refuse(script, why_not(script))
    os.execv(REAL_SH, ["sh", *args])


# The options of `sh` the agent honours when it runs a script in its place
# (#30 review: `sh -ec SCRIPT` went to /bin/sh, whose curl is not here):
# -e, because the agent stops at its first failure as the scripts' `&&`
# chains and `exit 1`s do, and -e only makes a script stricter (the
# branches that keep a cached copy and exit 0 sit in `if` conditions, which
# -e exempts); -x and -v, which only trace to stderr what is run, never
# change it. Any other (-n reads without running, -u fails on an unset
# variable, -f turns off the CA prelude's glob, -C refuses its `>`, -o
# NAME, `+` forms) means a shell the agent cannot stand in for: /bin/sh
# runs the arguments unchanged.
_HONOURED_OPTIONS = frozenset("exv")


def command_script(args: list[str]) -> str | None:
    """The SCRIPT of `sh [-OPTIONS]... -c [-OPTIONS]... [--] SCRIPT [NAME
    [ARG]...]` when every option is one the agent honours; None for any
    other use of sh (it goes to /bin/sh unchanged)."""
    at, command_mode = 0, False
    while at < len(args):
        word = args[at]
        if word in ("--", "-"):  # POSIX sh: a lone `-` is read as `--`
            at += 1
            break
        if len(word) < 2 or not word.startswith("-"):
            break
        letters = set(word[1:])
        if not letters <= _HONOURED_OPTIONS | {"c"}:
            return None
        command_mode = command_mode or "c" in letters
        at += 1
    if not command_mode or at >= len(args):
        return None
    return args[at]


def agent_flags(command: OperatorCommand, environ: Mapping[str, str]) -> dict[str, str | None]:
    """The flags that say what the script encoded; the environment the
    operator set stays the environment (a flag wins over it, CONTRACT §2)."""
    from llmkube_stager.boundary import no_flags

    flags = no_flags()
    # The policy is baked into the script's text: the operator never sets
    # LLMKUBE_REFRESH_POLICY, and a value from the source Secret must not
    # override what the Model asked for.
    flags["LLMKUBE_REFRESH_POLICY"] = command.policy
    if command.pinned and environ.get(command.pin_var) is None:
        # A gated script without its pin fails closed, as its precheck did.
        flags[command.pin_var] = ""
    if command.host_model:
        flags["LLMKUBE_HOST_MODEL"] = command.host_model
    if command.ca_dir:
        flags["LLMKUBE_CA_DIR"] = command.ca_dir
    return flags


def run_agent(command: OperatorCommand) -> NoReturn:
    from llmkube_stager.commands.run import stage_command

    sys.stderr.write(f"llmkube-stager: running the operator's {command.shape} command\n")
    sys.stderr.flush()
    stage_command(agent_flags(command, os.environ))


def refuse(script: str, why: str) -> NoReturn:
    """InvalidConfiguration (exit 2) naming the command, before any I/O."""
    from llmkube_stager.boundary import Boundary, no_flags
    from llmkube_stager.errors import ConfigError
    from llmkube_stager.operator.recognise import outline

    shown = outline(script)
    if len(shown) > _SHOWN_CHARS:
        shown = shown[:_SHOWN_CHARS] + "..."
    detail = (
        f"the operator's command is not one this image runs ({why}); this image has no curl and "
        f"runs the operator's downloads only through llmkube-stager: sh -c running {shown}"
    )
    remedy = (
        "this operator version emits a download command llmkube-stager does not know yet: set the "
        "operator's controllerManager.initContainer image back to curlimages/curl (see "
        "docs/switching-llmkube.md), and report the command"
    )
    boundary = Boundary(no_flags(), os.environ, terminate=True)

    def body() -> None:
        raise ConfigError(detail, remedy=remedy)

    boundary.run(body)
