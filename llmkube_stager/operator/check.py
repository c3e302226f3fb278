"""`llmkube-stager check-command [FILE|-] [--json]`: what this image's `sh`
would do with a pod's command, before switching the operator's init image
to it (#39 item 5).

Reads a script (what `sh -c` is given), a container's command as JSON
(`kubectl get pod P -o jsonpath='{.spec.initContainers[0].command}'`), or a
whole Pod, Job or Deployment as JSON (`kubectl get pod P -o json`: every
container with a command is checked). Prints, for each, which LLMKube
version and command it is and what the agent will do in its place, or why
the image would refuse it, or that /bin/sh runs it. Never a word of the
script: it may carry the source Secret's values.

`--catalogue FILE` reads a site catalogue (tools/operator-catalogue's
output) in place of the one the image would mount, to check it before
mounting it.

Exit 0 when the image would run every command (as the agent or through
/bin/sh), 1 when it would refuse one, 2 for input it cannot read.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from llmkube_stager.operator.catalogue import (
    SITE_CATALOGUE,
    Catalogue,
    CatalogueError,
    Meaning,
    load,
)
from llmkube_stager.operator.shell import (
    command_script,
    source_mismatch,
    unknown_command,
    would_download,
)

USAGE = (
    "usage: llmkube-stager check-command [FILE|-] [--json] [--source MODEL_SOURCE] "
    "[--catalogue SITE_FILE]"
)


@dataclass(frozen=True)
class Verdict:
    container: str
    action: str  # "agent" | "refused" | "sh"
    command: str  # the catalogue entry's name, or ""
    versions: tuple[str, ...]
    said: str  # what the agent does, or why refused, or why /bin/sh

    def as_json(self) -> dict[str, Any]:
        return {
            "container": self.container,
            "action": self.action,
            "command": self.command,
            "versions": list(self.versions),
            "detail": self.said,
        }


def main(argv: list[str]) -> NoReturn:
    as_json, source, path, site = False, None, "-", Path(SITE_CATALOGUE)
    args = list(argv)
    while args:
        word = args.pop(0)
        if word == "--json":
            as_json = True
        elif word == "--source" and args:
            source = args.pop(0)
        elif word == "--catalogue" and args:
            site = Path(args.pop(0))
        elif word in ("-h", "--help"):
            print(__doc__.split("\n\n")[1] if __doc__ else "", USAGE, sep="\n\n")
            sys.exit(0)
        elif word.startswith("-") and word != "-":
            _usage(f"unknown option {word[:40]!r}")
        else:
            path = word
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _usage(f"cannot read {path}: {exc.strerror if isinstance(exc, OSError) else exc}")
    try:
        known = load(site)
    except (OSError, CatalogueError) as exc:
        _usage(f"cannot read the catalogue {site}: {exc}")
    verdicts = check(text, known, source)
    if not verdicts:
        _usage("no container command found in the input")
    if as_json:
        print(json.dumps([v.as_json() for v in verdicts], indent=1))
    else:
        for verdict in verdicts:
            print(_line(verdict))
    sys.exit(1 if any(v.action == "refused" for v in verdicts) else 0)


def _usage(why: str) -> NoReturn:
    sys.stderr.write(f"llmkube-stager check-command: {why}\n{USAGE}\n")
    sys.exit(2)


def check(text: str, catalogue: Catalogue, source: str | None = None) -> list[Verdict]:
    """A verdict for each command in `text` (see the module's docstring);
    `source`, when given, is the MODEL_SOURCE the pod would have."""
    return [_verdict(name, argv, catalogue, source) for name, argv in commands_in(text)]


def commands_in(text: str) -> list[tuple[str, list[str]]]:
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        try:
            doc = json.loads(stripped)
        except ValueError:
            doc = None
        if isinstance(doc, list) and all(isinstance(w, str) for w in doc):
            return [("command", list(doc))]
        if isinstance(doc, dict):
            return list(_containers(doc))
    return [("script", ["sh", "-c", text])]


def _containers(doc: Any) -> Iterator[tuple[str, list[str]]]:
    """Every object with a `command` list of strings (a container), named by
    its `name`, in document order."""
    if isinstance(doc, dict):
        command = doc.get("command")
        if isinstance(command, list) and all(isinstance(w, str) for w in command):
            args = doc.get("args")
            extra = args if isinstance(args, list) and all(isinstance(w, str) for w in args) else []
            yield str(doc.get("name", "container")), [*command, *extra]
        for value in doc.values():
            yield from _containers(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _containers(value)


def _verdict(name: str, argv: list[str], catalogue: Catalogue, source: str | None) -> Verdict:
    program = argv[0].rsplit("/", 1)[-1] if argv else ""
    script = command_script(argv[1:]) if program == "sh" else None
    if script is None:
        return Verdict(name, "sh", "", (), "not `sh -c SCRIPT`: runs as it would anywhere")
    entry = catalogue.find(script)
    if entry is not None:
        problem = entry.refused or (source_mismatch(entry.meaning, source) if source else "")
        if problem:
            return Verdict(name, "refused", entry.name, entry.versions, problem)
        return Verdict(
            name, "agent", entry.name, entry.versions, what_the_agent_does(entry.meaning)
        )
    if would_download(script):
        return Verdict(name, "refused", "", (), unknown_command(script, catalogue))
    return Verdict(name, "sh", "", (), "no download: the real /bin/sh runs it")


def what_the_agent_does(meaning: Meaning) -> str:
    files = "the files of MODEL_FILES" if meaning.layout == "multi" else "MODEL_PATH"
    kinds = {
        "http": "an http(s) or hf:// MODEL_SOURCE",
        "s3": "an s3:// MODEL_SOURCE",
        "local": f"the host file {meaning.host_model or 'of MODEL_SOURCE'}",
        "pvc": "a pvc:// model, verified only",
    }
    parts = [
        f"stage {files} from {kinds[meaning.kind]}",
        f"refresh policy {meaning.policy}",
        "into $CACHE_DIR (a cache volume)" if meaning.cached else "into an emptyDir",
    ]
    if meaning.pinned:
        parts.append(f"sha256 gate: {meaning.pin_var} required")
    if meaning.ca_dir:
        parts.append(f"extra CA certificates from {meaning.ca_dir}")
    token = "HF_TOKEN sent to the Hugging Face host when set"
    parts.append(token if meaning.hf_token == "when-set" else "HF_TOKEN never sent")
    return "; ".join(parts)


def _line(verdict: Verdict) -> str:
    head = f"{verdict.container}: "
    if verdict.action == "agent":
        versions = ", ".join(verdict.versions) or "a site entry"
        return f"{head}{verdict.command} (LLMKube {versions}): the agent runs it: {verdict.said}"
    if verdict.action == "refused":
        named = f"{verdict.command}: " if verdict.command else ""
        return f"{head}refused: {named}{verdict.said}"
    return f"{head}/bin/sh: {verdict.said}"
