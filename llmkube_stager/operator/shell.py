"""The image's `sh` (/opt/llmkube/bin/sh, first on PATH).

The LLMKube operator runs every container in its init image as
`sh -c <generated script>`, which overrides the image's entrypoint. So the
image answers to `sh`:

- `sh -c SCRIPT` (also `sh -ec`, `sh -e -c`, `sh -xc`: the options the
  agent honours, see `command_script`) where SCRIPT is, byte for byte, one
  of the operator's download commands in the catalogue (catalogue.py): the
  agent's `stage`, in this process, doing what the entry says the command
  means (policy, pin gate, the local file, the CA directory, the token
  rule) with the operator's environment read as the contract says;
- a catalogue entry whose MODEL_SOURCE is not of its kind (a pvc verify
  or a local copy with an http source): refused, so that what the command
  means is what the agent does;
- any other SCRIPT that would download (it names curl or wget): refused
  before any I/O, exit 2, naming the nearest known command and where the
  script first differs from it, never a word of the script (#39 item 2):
  this image has no curl, and a script that means something else must
  never run as the plain download;
- anything else (the model-cache-prep container's chown/chmod, the prefetch
  Job's `echo prefetch complete`, the operator's `echo "ERROR: ..."; exit 1`
  placeholders, any other use of sh): the real /bin/sh, exec'd with the
  same arguments, exactly as it would run in the operator's default image.

Imports nothing heavy before it knows which: the prep container, run as
uid 0 on every start, pays for one small module.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from llmkube_stager.operator.catalogue import Catalogue, Entry, Meaning

REAL_SH = "/bin/sh"
# A script that names one of these would download; the image has neither.
_DOWNLOADERS = re.compile(r"\b(?:curl|wget)\b")


@dataclass(frozen=True)
class Decision:
    """What the image's `sh` does with its arguments: run `entry` as the
    agent, refuse (`refused`, no word of the script in it), or exec /bin/sh
    (neither)."""

    entry: Entry | None = None
    refused: str = ""


def main(argv: list[str] | None = None, catalogue: Catalogue | None = None) -> NoReturn:
    """`catalogue` is for tests; the image loads its own and the site's."""
    args = sys.argv[1:] if argv is None else argv
    decision = decide(args, os.environ, catalogue)
    if decision.refused:
        refuse(decision.refused)
    if decision.entry is not None:
        run_agent(decision.entry)
    os.execv(REAL_SH, ["sh", *args])


def decide(
    args: list[str],
    environ: Mapping[str, str],
    catalogue: Catalogue | None = None,
    site: str | None = None,
) -> Decision:
    """`catalogue` replaces the image's; `site`, the site file's path."""
    script = command_script(args)
    # Every operator command names $MODEL_PATH or $MODEL_FILES: anything else
    # that cannot download (the prep container on every start) goes to
    # /bin/sh without reading the catalogue.
    if script is None or not ("MODEL_" in script or would_download(script)):
        return Decision()
    from pathlib import Path

    from llmkube_stager.operator.catalogue import SITE_CATALOGUE, CatalogueError, load

    site_file = Path(site or SITE_CATALOGUE)
    try:
        known = catalogue if catalogue is not None else load(site_file)
    except (OSError, CatalogueError) as exc:
        # A site's broken ConfigMap: every download fails, loudly and the
        # same way, rather than with a traceback (#39 review).
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return Decision(refused=f"the site catalogue {site_file} cannot be read: {why}")
    entry = known.find(script)
    if entry is not None:
        problem = entry.refused or source_mismatch(entry.meaning, environ.get("MODEL_SOURCE", ""))
        if problem:
            return Decision(
                refused=f"the script is {entry.name}, which this image does not run: {problem}"
            )
        return Decision(entry=entry)
    if would_download(script):
        return Decision(refused=unknown_command(script, known))
    return Decision()


def would_download(script: str) -> bool:
    return _DOWNLOADERS.search(script) is not None


def unknown_command(script: str, known: Catalogue) -> str:
    """Why a script that would download is refused: the nearest entry and
    where it first differs, by position and kind only."""
    from llmkube_stager.operator.catalogue import nearest

    near = nearest(script, known)
    where = f"; {near.sentence()}" if near is not None else ""
    return f"the script is not a command of any LLMKube version this image knows{where}"


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


# The schemes of MODEL_SOURCE each kind of command is generated for.
_SCHEMES = {
    "http": frozenset({"http", "https", "hf"}),
    "s3": frozenset({"s3"}),
    "local": frozenset({"file"}),
    "pvc": frozenset({"pvc"}),
}


def source_mismatch(meaning: Meaning, source: str) -> str:
    """Why MODEL_SOURCE is not a source this kind of command is generated
    for ("" when it is): a pvc verify or a local copy must never turn into a
    download because the environment says http (#30 item 1)."""
    head, sep, _ = source.strip().partition("://")
    scheme = head.lower() if sep else ("file" if source.strip().startswith("/") else "")
    if scheme in _SCHEMES[meaning.kind]:
        return ""
    shown = f"a {scheme}:// source" if scheme.isalnum() else "no URL"
    return f"it is the operator's {meaning.kind} command, but MODEL_SOURCE is {shown}"


def agent_flags(meaning: Meaning, environ: Mapping[str, str]) -> dict[str, str | None]:
    """The flags that say what the command means; the environment the
    operator set stays the environment (a flag wins over it, CONTRACT §2)."""
    from llmkube_stager.boundary import no_flags

    flags = no_flags()
    # The policy is the command's: the operator never sets
    # LLMKUBE_REFRESH_POLICY, and a value from the source Secret must not
    # override what the Model asked for.
    flags["LLMKUBE_REFRESH_POLICY"] = meaning.policy
    # The operator reads the termination message: its remedies stay the
    # constants its diagnosis matches (spec §11.2), not the variables' words.
    flags["LLMKUBE_REMEDY_WORDS"] = "operator"
    if meaning.pinned and environ.get(meaning.pin_var) is None:
        # A gated command without its pin fails closed, as its precheck did.
        flags[meaning.pin_var] = ""
    if meaning.host_model:
        flags["LLMKUBE_HOST_MODEL"] = meaning.host_model
    if meaning.ca_dir:
        flags["LLMKUBE_CA_DIR"] = meaning.ca_dir
    if meaning.hf_token == "never" and environ.get("HF_TOKEN"):
        # The command's curl never sends it: neither does the agent (a
        # source Secret may hold a token this Model was not meant to use).
        flags["HF_TOKEN"] = ""
    if meaning.multi_url == "resolve-main":
        flags["MODEL_SOURCE"] = _resolve_main(environ.get("MODEL_SOURCE", ""))
    return flags


def _resolve_main(source: str) -> str:
    """LLMKube 0.8's loop fetches `${SOURCE%/}/resolve/main/$rel`, SOURCE
    being MODEL_SOURCE with hf:// made https://huggingface.co/."""
    stripped = source.strip()
    if stripped.startswith("hf://"):
        stripped = "https://huggingface.co/" + stripped[len("hf://") :]
    return stripped.rstrip("/") + "/resolve/main/"


def run_agent(entry: Entry) -> NoReturn:
    from llmkube_stager.commands.run import stage_command

    sys.stderr.write(f"llmkube-stager: running {entry.name} ({entry.meaning.describe()})\n")
    sys.stderr.flush()
    stage_command(agent_flags(entry.meaning, os.environ))


def refuse(why: str) -> NoReturn:
    """InvalidConfiguration (exit 2) before any I/O; `why` carries no word
    of the script (an option's value may be a credential)."""
    from llmkube_stager.boundary import Boundary, no_flags
    from llmkube_stager.errors import ConfigError

    detail = (
        f"{why}; this image has no curl and runs the operator's downloads only through "
        "llmkube-stager"
    )
    remedy = (
        "run an LLMKube version this image knows (`llmkube-stager check-command` reads a pod's "
        "command and says which), or set the operator's controllerManager.initContainer image "
        "back to curlimages/curl (docs/switching-llmkube.md)"
    )
    boundary = Boundary(no_flags(), os.environ, terminate=True)

    def body() -> None:
        raise ConfigError(detail, remedy=remedy)

    boundary.run(body)
