"""Which operator command a script is, from its structure (#30 item 1).

Pure: script text -> `OperatorCommand`, or None for anything that is not a
download command the agent can do in its place (the model-cache-prep
container's chown/chmod, the prefetch Job's `echo prefetch complete`, the
operator's `echo "ERROR: ..."; exit 1` placeholders): those run under the
real shell, as in the operator's default image.

Recognised, whatever the spacing, quoting, order of flags, helper names or
log wording of an operator version (docs/switching-llmkube.md lists the
shapes): a script whose every command is a plain utility or a function it
defines, whose transfers are curl GETs of the operator's own variables
(`$MODEL_SOURCE`, `$url` from `$SOURCE`/`$rel`, `${AWS_ENDPOINT_URL}/
${S3_BUCKET}/...`) into the operator's destinations (`$MODEL_PATH...`,
`$dest...`, `$MODEL_PARTIAL`), optionally signed (`--aws-sigv4`, s3) or with
the Hugging Face bearer token, or a `cp` of a host file onto `$MODEL_PATH`
(local). What it encodes is read off it:

- layout: a loop over `$MODEL_FILES` is multi-file; otherwise `$MODEL_PATH`;
- kind: signed transfers are s3, a `cp` is local, otherwise http (hf);
- policy: OnChange when the script compares what a HEAD probe (`curl -I`)
  answered with the cached copy's size (`[ "$(stat -c %s "$dest")" =
  "$remote_size" ]`, spec §6.3 step 2: the revalidation), directly or
  through the variables it derives from either; anything else is
  IfNotPresent, as the operator's builders treat every value other than
  OnChange (an IfNotPresent resumable download probes too, for its
  validator, but never compares). Never the log text: a script whose
  `echo`s say other words is the same command (#30 review);
- pins: the digest gates' helpers (`llmkube_*sha256*`, `llmkube_accept_file`,
  ...) or a reference to `$MODEL_SHA256` / `$MODEL_FILE_SHA256`;
- the CA prelude's directory (`cat ... /custom-certs/*`).

A script that calls curl in any other way (a literal URL or output path, a
header other than the token, a flag outside the operator's set, a command
the operator never emits) is not recognised: `why_not` says why, and the
image refuses it by name instead of running half of it (#30 item 2).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from llmkube_stager.operator.shellwords import Command, Script, Unparsable, parse

Layout = Literal["single", "multi"]
Kind = Literal["http", "s3", "local", "pvc"]
Policy = Literal["IfNotPresent", "OnChange"]


@dataclass(frozen=True)
class OperatorCommand:
    """What an operator script asks for; the environment holds the rest."""

    layout: Layout
    kind: Kind
    policy: Policy
    pinned: bool  # the script carries a digest gate: a missing pin fails closed
    cached: bool  # the script makes $CACHE_DIR (a cache volume), not an emptyDir
    ca_dir: str | None = None  # the CA prelude's directory of extra certificates
    host_model: str | None = None  # local: the host file the script copies

    @property
    def pin_var(self) -> str:
        return "MODEL_FILE_SHA256" if self.layout == "multi" else "MODEL_SHA256"

    @property
    def shape(self) -> str:
        """For the log: `multi-file http OnChange (pinned)`."""
        layout = "multi-file" if self.layout == "multi" else "single-file"
        kind = "pvc verify" if self.kind == "pvc" else self.kind
        return f"{layout} {kind} {self.policy}{' (pinned)' if self.pinned else ''}"


@dataclass(frozen=True)
class _No:
    why: str


# Utilities and builtins the operator's scripts use (L0-L4), or harmless
# beside them; anything else is a command the agent would not be doing.
_UTILITIES = frozenset(
    {
        "echo", "printf", "exit", "return", "export", "set", "unset", "local", "read",
        "continue", "break", "true", "false", "test", "[", "[[", ":", "shift", "trap",
        "mkdir", "rm", "mv", "cp", "find", "stat", "cat", "dirname", "basename", "sha256sum",
        "head", "tail", "cut", "tr", "sed", "grep", "awk", "wc", "touch", "sleep", "wait",
        "kill", "date", "mktemp", "flock", "ls", "chmod", "sync", "od", "expr", "command",
        "umask", "id", "rmdir", "timeout",
    }
)  # fmt: skip
# A wrapper function runs the command it was given (download_with_progress).
_RUN_ARGS = frozenset({'"$@"', "$@", "${@}"})
_CURL_BOOL = frozenset(
    {
        "-f", "--fail", "-L", "--location", "-s", "--silent", "-S", "--show-error",
        "-I", "--head", "--no-progress-meter", "-#", "--progress-bar", "-g", "--globoff",
        "--fail-early", "--retry-all-errors", "--retry-connrefused", "-q",
    }
)  # fmt: skip
_CURL_VALUE = frozenset(
    {
        "-o", "--output", "-u", "--user", "-H", "--header", "-C", "--continue-at",
        "-w", "--write-out", "--aws-sigv4", "--connect-timeout", "-m", "--max-time",
        "--retry", "--retry-delay", "--retry-max-time", "--max-redirs",
    }
)  # fmt: skip
_SHORT_BOOL = frozenset("fsSLIgq#")
_SHORT_VALUE = frozenset("ouHCwm")
_EXPANSION = r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*(?:[%#:+\-][^}]*)?\}|[A-Za-z_][A-Za-z0-9_]*)"
_URL_VARS = frozenset(
    {"MODEL_SOURCE", "url", "SOURCE", "AWS_ENDPOINT_URL", "S3_BUCKET", "S3_KEY", "S3_PREFIX",
     "key", "rel"}
)  # fmt: skip
_DEST_VARS = frozenset({"MODEL_PATH", "dest", "MODEL_PARTIAL", "partial"})
_VAR_NAME = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_URL_SHAPE = re.compile(rf"(?:{_EXPANSION}|/)+\Z")
_CREDENTIALS = re.compile(r"\$\{?AWS_ACCESS_KEY_ID\}?:\$\{?AWS_SECRET_ACCESS_KEY\}?\Z")
_SIGV4 = re.compile(r"aws:amz:(?:\$\{?AWS_REGION\}?|[a-z0-9-]+):s3\Z")
_TOKEN_HEADER = re.compile(r"Authorization:\s*Bearer\s+\$\{?HF_TOKEN(?::-)?\}?\Z")
_PIN_HELPER = re.compile(r"llmkube_\w*(sha256|accept_file|publish_file|file_digest)")
_PIN_VAR = re.compile(r"\$\{?MODEL_(FILE_)?SHA256\b")
# A test comparing two sizes: `[ A = B ]`, `test A -eq B`, `[[ A == B ]]`.
_TESTS = frozenset({"[", "[[", "test"})
_EQUALS = frozenset({"=", "==", "-eq"})
_CA_GLOB = re.compile(r"(/[^*?\[\]$]+)/\*\Z")
_SYSTEM_CA_DIRS = ("/etc/ssl", "/etc/pki", "/usr/share/ca-certificates", "/etc/ca-certificates")


@dataclass(frozen=True)
class _Curl:
    probe: bool  # -I: a HEAD
    url: str
    output: str | None
    signed: bool
    token: bool


def recognise(text: str) -> OperatorCommand | None:
    found = _recognise(text)
    return found if isinstance(found, OperatorCommand) else None


def why_not(text: str) -> str:
    """Why a script is not a recognised download command ("" when it is)."""
    found = _recognise(text)
    return "" if isinstance(found, OperatorCommand) else found.why


def outline(text: str) -> str:
    """The script as a refusal may show it: the commands it runs, in order,
    never a word of their arguments (a literal URL, `-u user:password`, a
    header may be a credential; review of #30 item 2)."""
    try:
        script = parse(text)
    except Unparsable:
        return f"a script of {len(text)} characters"
    names: list[str] = []
    for command in script.commands:
        name = command.argv[0][:30] if command.argv else "NAME=..."
        if not names or names[-1] != name:
            names.append(name)
    return "; ".join(names)


def calls_curl(text: str) -> bool:
    """Whether a script would run curl (which this image does not have):
    by its commands when it can be read, else by the word."""
    try:
        script = parse(text)
    except Unparsable:
        return re.search(r"\bcurl\b", text) is not None
    names = _curl_names(script)
    return any(names.intersection(command.argv) for command in script.commands)


# The schemes of MODEL_SOURCE each kind of command is generated for.
_SCHEMES: dict[Kind, frozenset[str]] = {
    "http": frozenset({"http", "https", "hf"}),
    "s3": frozenset({"s3"}),
    "local": frozenset({"file"}),
    "pvc": frozenset({"pvc"}),
}


def source_mismatch(command: OperatorCommand, source: str) -> str:
    """Why MODEL_SOURCE is not a source this kind of command is generated
    for ("" when it is): a pvc verify or a local copy must never turn into a
    download because the environment says http (#30 item 1: what the script
    encodes is what the agent does)."""
    head, sep, _ = source.strip().partition("://")
    scheme = head.lower() if sep else ("file" if source.strip().startswith("/") else "")
    if scheme in _SCHEMES[command.kind]:
        return ""
    shown = f"a {scheme}:// source" if scheme else "no URL"
    return f"the script is the operator's {command.kind} command, but MODEL_SOURCE is {shown}"


def _recognise(text: str) -> OperatorCommand | _No:
    try:
        script = parse(text)
    except Unparsable as exc:
        return _No(f"the script cannot be read ({exc})")
    assigned = _assignment_problem(script)
    if assigned:
        return _No(assigned)
    names = _curl_names(script)
    curls: list[_Curl] = []
    for command in script.commands:
        problem = _check_command(command, script.functions, names, curls)
        if problem:
            return _No(problem)
    copies = [c for c in script.commands if c.argv[:1] == ("cp",)]
    gets = [c for c in curls if not c.probe]
    words = script.words()
    refs = {m.group(1) for word in words for m in _VAR_NAME.finditer(word)}
    pinned = (
        any(_PIN_HELPER.search(w) for w in words)
        or any(_PIN_HELPER.match(c.argv[0]) for c in script.commands if c.argv)
        or any(_PIN_VAR.search(w) for w in words)
    )
    multi = "MODEL_FILES" in refs
    if not multi and "MODEL_PATH" not in refs:
        return _No("neither $MODEL_FILES nor $MODEL_PATH is used")
    layout: Layout = "multi" if multi else "single"
    cached = any(
        c.argv[:1] == ("mkdir",) and any(_vars_in(a) == {"CACHE_DIR"} for a in c.argv)
        for c in script.commands
    )
    ca_dir = _ca_dir(script)
    if gets:
        return _from_transfers(gets, curls, script, layout, pinned, cached, ca_dir)
    if curls:
        return _No("curl is called, but never to download")
    if copies:
        return _local(copies, layout, pinned, cached, ca_dir)
    if pinned and any(c.argv[:1] == ("sha256sum",) for c in script.commands) and not multi:
        # pvc:// with spec.sha256: the verify-only container of a pre-staged file.
        return OperatorCommand("single", "pvc", "IfNotPresent", True, False, ca_dir)
    return _No("no transfer (curl or cp) and no verify")


# What the operator's environment gives (CONTRACT §2): a script that sets
# one itself would fetch or write something the agent, reading the
# environment, would not (review of #30).
_INPUTS = re.compile(
    r"(?:MODEL_(?:SOURCE|PATH|FILES|SHA256|FILE_SHA256)|CACHE_DIR|HF_TOKEN|AWS_\w+|S3_\w+)\Z"
)


def _split_assignment(word: str) -> tuple[str, str]:
    name, _, value = word.partition("=")
    return name, value


def _assignment_problem(script: Script) -> str:
    """Why the script's own assignments make it no operator command, or ""."""
    for command in script.commands:
        for name, value in _assigned(command):
            if _INPUTS.match(name):
                return f"the script sets {name} itself"
            literal = "://" in value or value.startswith("/")
            if name in _URL_VARS | _DEST_VARS and literal:
                return f"the script sets ${name} to a literal URL or path"
    return ""


def _curl_names(script: Script) -> frozenset[str]:
    """`curl`, and the script's wrappers of it (`hf_curl`)."""
    return frozenset({"curl", *(name for name in script.functions if "curl" in name)})


def _check_command(
    command: Command, functions: frozenset[str], names: frozenset[str], curls: list[_Curl]
) -> str:
    """Empty when the command is one the operator's scripts run; the curl calls
    it makes are appended to `curls`."""
    argv = command.argv
    if not argv:
        return ""
    name = argv[0]
    if name == "exec" and len(argv) == 1:
        return ""  # `exec 9>"$lock"`: a descriptor for flock, no command
    known = (_UTILITIES, functions, _RUN_ARGS, names)
    if not any(name in group for group in known):
        return f"it runs {name[:60]!r}, which no operator script runs"
    for at, word in enumerate(argv):
        if word in names:
            parsed = _parse_curl(argv[at + 1 :])
            if isinstance(parsed, str):
                return parsed
            if parsed is not None:
                curls.append(parsed)
    return ""


def _parse_curl(args: tuple[str, ...]) -> _Curl | str | None:
    """A curl call's meaning, a reason it is not the operator's, or None for
    a wrapper's pass-through (`curl "$@"`: its callers are checked)."""
    if any(a in _RUN_ARGS for a in args):
        return None
    probe = signed = token = False
    output: str | None = None
    urls: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        flag, value, i = _curl_option(args, i)
        if flag is None:
            urls.append(arg)
            continue
        if flag == "?":
            # The option's name only: its value may be a credential.
            return f"curl option {arg.partition('=')[0][:40]!r} is not one the operator uses"
        if flag in ("-I", "--head"):
            probe = True
        elif flag in ("-o", "--output"):
            output = value
        elif flag == "--aws-sigv4":
            if not _SIGV4.match(value or ""):
                return "curl --aws-sigv4 is not the operator's s3 signing"
            signed = True
        elif flag in ("-u", "--user"):
            if not _CREDENTIALS.match(value or ""):
                return "curl -u does not name the source Secret's AWS keys"
        elif flag in ("-H", "--header"):
            if not _TOKEN_HEADER.match(value or ""):
                return "curl sends a header other than the Hugging Face token"
            token = True
    if len(urls) != 1:
        return f"curl is given {len(urls)} URLs"
    url = urls[0]
    if not _URL_SHAPE.match(url) or not _vars_in(url) <= _URL_VARS:
        # Its variables only: a literal URL may carry userinfo or a signature.
        built = ", ".join(f"${v}" for v in sorted(_vars_in(url))) or "no variable"
        return f"curl fetches a URL built from {built}, not the operator's source variables"
    if output is not None and output != "/dev/null":
        first = _VAR_NAME.match(output)
        if first is None or first.group(1) not in _DEST_VARS:
            return f"curl writes {output[:80]!r}, not the operator's destination"
    if output is None and not probe:
        return "curl downloads to standard output"
    return _Curl(probe, url, output, signed, token)


def _curl_option(args: tuple[str, ...], i: int) -> tuple[str | None, str | None, int]:
    """(flag, its value, next index); flag None for a positional argument,
    "?" for an option outside the operator's set."""
    arg = args[i]
    if not arg.startswith("-") or arg == "-":
        return None, None, i + 1
    if arg.startswith("--"):
        name, eq, inline = arg.partition("=")
        if name in _CURL_BOOL and not eq:
            return name, None, i + 1
        if name in _CURL_VALUE:
            if eq:
                return name, inline, i + 1
            return (name, args[i + 1], i + 2) if i + 1 < len(args) else ("?", None, i + 1)
        return "?", None, i + 1
    # Short flags, combined (`-fsSL`, `-fsSLI`): each a switch, the last one
    # may take a value (`-fLo FILE`).
    letters = arg[1:]
    flag: str | None = None
    for at, letter in enumerate(letters):
        if letter in _SHORT_BOOL:
            if letter == "I":
                flag = "-I"
            continue
        if letter in _SHORT_VALUE and at == len(letters) - 1:
            if i + 1 >= len(args):
                return "?", None, i + 1
            if flag == "-I":
                return "?", None, i + 1  # -I with a value flag in one word: not the operator's
            return f"-{letter}", args[i + 1], i + 2
        return "?", None, i + 1
    return (flag or f"-{letters[:1]}"), None, i + 1


def _vars_in(text: str) -> set[str]:
    return {m.group(1) for m in _VAR_NAME.finditer(text)}


def _from_transfers(
    gets: list[_Curl],
    curls: list[_Curl],
    script: Script,
    layout: Layout,
    pinned: bool,
    cached: bool,
    ca_dir: str | None,
) -> OperatorCommand | _No:
    signed = {c.signed for c in gets}
    if len(signed) != 1:
        return _No("some downloads are signed for s3 and some are not")
    if any(c.argv[:1] == ("cp",) and _writes_destination(c) for c in script.commands):
        return _No("it both downloads and copies a local file")
    kind: Kind = "s3" if signed == {True} else "http"
    policy: Policy = "OnChange" if _revalidates(script) else "IfNotPresent"
    return OperatorCommand(layout, kind, policy, pinned, cached, ca_dir)


def _revalidates(script: Script) -> bool:
    """The script compares a HEAD probe's answer with the cached copy's
    size: the OnChange revalidation (spec §6.3 step 2)."""
    names = _curl_names(script)
    probed = _derived_vars(script, lambda command: _is_probe(command, names))
    sized = _derived_vars(script, _stats_destination)
    for command in script.commands:
        argv = command.argv
        if argv[:1] and argv[0] in _TESTS:
            for at in range(1, len(argv) - 1):
                if argv[at] not in _EQUALS:
                    continue
                left, right = argv[at - 1], argv[at + 1]
                if (_holds(left, probed, names) and _holds(right, sized, names, True)) or (
                    _holds(right, probed, names) and _holds(left, sized, names, True)
                ):
                    return True
    return False


def _substituted(word: str) -> tuple[Command, ...]:
    """The commands of the `$(...)` in a word, read again (the parser keeps
    a substitution's text as written)."""
    if "$(" not in word:
        return ()
    try:
        return tuple(c for c in parse(word).commands if c.nested)
    except Unparsable:
        return ()


def _is_probe(command: Command, names: frozenset[str]) -> bool:
    for at, word in enumerate(command.argv):
        if word in names:
            parsed = _parse_curl(command.argv[at + 1 :])
            if isinstance(parsed, _Curl) and parsed.probe:
                return True
    return False


def _stats_destination(command: Command) -> bool:
    """`stat ... "$dest"`: the size of the cached copy."""
    argv = command.argv
    return argv[:1] == ("stat",) and any(_vars_in(a) & _DEST_VARS for a in argv[1:])


def _holds(word: str, derived: set[str], names: frozenset[str], stat: bool = False) -> bool:
    """The word's value comes from the probe (or, `stat`, the cached size):
    a variable derived from it, or the command itself in a `$(...)`."""
    if _vars_in(word) & derived:
        return True
    inner = _substituted(word)
    if stat:
        return any(_stats_destination(c) for c in inner)
    return any(_is_probe(c, names) for c in inner)


def _derived_vars(script: Script, source: Callable[[Command], bool]) -> set[str]:
    """Variables assigned, directly or through other such variables, from
    a `$(...)` running a command `source` picks (`remote_size=$(curl -I
    ...)`, `remote_validator=$(printf ... "$remote_head" | head -n 1)`)."""
    pairs = [pair for c in script.commands for pair in _assigned(c)]
    found: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, value in pairs:
            if name in found:
                continue
            if _vars_in(value) & found or any(source(c) for c in _substituted(value)):
                found.add(name)
                grew = True
    return found


def _assigned(command: Command) -> list[tuple[str, str]]:
    pairs = list(command.assignments)
    if command.argv[:1] in (("export",), ("local",), ("readonly",)):
        pairs += [_split_assignment(a) for a in command.argv[1:] if "=" in a]
    return pairs


def _local(
    copies: list[Command], layout: Layout, pinned: bool, cached: bool, ca_dir: str | None
) -> OperatorCommand | _No:
    onto = [c for c in copies if _writes_destination(c)]
    if layout != "single" or len(onto) != 1:
        return _No("a local copy must be one cp onto $MODEL_PATH")
    args = [a for a in onto[0].argv[1:] if not a.startswith("-")]
    if len(args) != 2 or not args[0].startswith("/") or _vars_in(args[0]):
        return _No("the local copy's source is not a plain host path")
    return OperatorCommand("single", "local", "IfNotPresent", pinned, cached, ca_dir, args[0])


def _writes_destination(command: Command) -> bool:
    args = [a for a in command.argv[1:] if not a.startswith("-")]
    if not args:
        return False
    first = _VAR_NAME.match(args[-1])
    return first is not None and first.group(1) in _DEST_VARS


def _ca_dir(script: Script) -> str | None:
    """The directory the CA prelude adds to the system roots (the operator's
    `cat /etc/ssl/certs/ca-certificates.crt /custom-certs/* > ...`)."""
    exports = any(
        c.argv[:1] == ("export",) and any(a.startswith("CURL_CA_BUNDLE=") for a in c.argv)
        for c in script.commands
    )
    if not exports:
        return None
    for command in script.commands:
        if command.argv[:1] != ("cat",):
            continue
        for arg in command.argv[1:]:
            m = _CA_GLOB.match(arg)
            if m and not m.group(1).startswith(_SYSTEM_CA_DIRS):
                return m.group(1)
    return None
