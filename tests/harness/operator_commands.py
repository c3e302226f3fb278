# ruff: noqa: E501  (shell text reads best unbroken)
"""Download commands of the suite's own writing, one for each meaning an
operator command can have, and the test catalogue that registers them
(#39 item 1).

The image's `sh` runs a script as the agent only when the digest of its
whole text is in a catalogue. The package's catalogue holds the digests of
the LLMKube operator's real commands (read by tools/operator-catalogue; no
text of theirs is in this repository); these commands are the suite's,
written for this file in its own words and layout, and really work under
/bin/sh with curl: the image tests run each through `sh -c` in the image
and under this host's sh and curl, and compare the files. `catalogue()`
gives them to the code under test as a site catalogue would
(catalogue.SITE_CATALOGUE; the image tests mount `write_catalogue`'s file
there).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmkube_stager.operator.catalogue import Catalogue, Entry, Meaning, dump, entry_for

# Where the operator mounts a local source's file and its CA ConfigMap.
HOST_FILE = "/host-model/model.gguf"
CA_DIR = "/custom-certs"

_GET = "curl --fail --location --silent --show-error"
_S3 = (
    '--aws-sigv4 "aws:amz:${AWS_REGION}:s3" --user "${AWS_ACCESS_KEY_ID}:${AWS_SECRET_ACCESS_KEY}"'
)
_SINGLE_S3_URL = '"${AWS_ENDPOINT_URL}/${S3_BUCKET}/${S3_KEY}"'
# hf://org/repo[@rev] as a base URL, as the operator's multi-file commands make it.
_BASE = (
    'base="$MODEL_SOURCE"\n'
    'case "$base" in\n'
    "  hf://*) repo=${base#hf://}\n"
    '    if [ "${repo#*@}" != "$repo" ]; then base="https://huggingface.co/${repo%%@*}/resolve/${repo#*@}"\n'
    '    else base="https://huggingface.co/$repo/resolve/main"; fi ;;\n'
    "esac\n"
)


def single_file(kind: str, cached: bool, policy: str = "IfNotPresent") -> str:
    """One file into $MODEL_PATH: http (IfNotPresent or OnChange by a size
    probe), s3 (signed, never revalidated), or a copy of the host file."""
    setup = 'mkdir -p "$CACHE_DIR" || exit 1\n' if cached else ""
    if kind == "local":
        return setup + (
            'if [ -f "$MODEL_PATH" ]; then echo "kept: $MODEL_PATH"; exit 0; fi\n'
            f'cp {HOST_FILE} "$MODEL_PATH.suite.tmp" && mv "$MODEL_PATH.suite.tmp" "$MODEL_PATH"\n'
        )
    if kind == "s3":
        fetch = f'{_GET} {_S3} --output "$MODEL_PATH.suite.tmp" {_SINGLE_S3_URL}'
    else:
        fetch = f'{_GET} --output "$MODEL_PATH.suite.tmp" "$MODEL_SOURCE"'
    if policy == "OnChange" and kind == "http":
        return setup + (
            "want=$(curl -sfIL -o /dev/null -w '%header{content-length}' \"$MODEL_SOURCE\") || want=\n"
            'if [ -n "$want" ] && [ -f "$MODEL_PATH" ] && [ "$(wc -c < "$MODEL_PATH")" -eq "$want" ]; then\n'
            '  echo "unchanged: $MODEL_PATH"; exit 0\n'
            "fi\n"
            f'if {fetch}; then mv "$MODEL_PATH.suite.tmp" "$MODEL_PATH"; exit $?; fi\n'
            'rm -f "$MODEL_PATH.suite.tmp"\n'
            'if [ -f "$MODEL_PATH" ]; then echo "origin unreachable, kept $MODEL_PATH"; exit 0; fi\n'
            "exit 1\n"
        )
    return setup + (
        'if [ -f "$MODEL_PATH" ]; then echo "kept: $MODEL_PATH"; exit 0; fi\n'
        f'{fetch} && mv "$MODEL_PATH.suite.tmp" "$MODEL_PATH"\n'
    )


def multi_file(s3: bool, cached: bool, policy: str = "IfNotPresent") -> str:
    """Each line of $MODEL_FILES into $CACHE_DIR (or /models): from the base
    URL joined with the name, or from $S3_PREFIX in the bucket."""
    setup = 'mkdir -p "$CACHE_DIR" || exit 1\n' if cached else "mkdir -p /models || exit 1\n"
    root = "$CACHE_DIR" if cached else "/models"
    if s3:
        url = '"${AWS_ENDPOINT_URL}/${S3_BUCKET}/${S3_PREFIX:+$S3_PREFIX/}$name"'
        get = f"{_GET} {_S3}"
        head = f"curl -sfIL {_S3}"
    else:
        url = '"${base%/}/$name"'
        get = _GET
        head = "curl -sfIL"
    if policy == "OnChange":
        keep = (
            f"  want=$({head} -o /dev/null -w '%header{{content-length}}' {url}) || want=\n"
            '  if [ -n "$want" ] && [ -f "$out" ] && [ "$(wc -c < "$out")" -eq "$want" ]; then continue; fi\n'
            f'  if {get} --output "$out.suite.tmp" {url}; then mv "$out.suite.tmp" "$out" || exit 1\n'
            '  else rm -f "$out.suite.tmp"; [ -f "$out" ] || exit 1; fi\n'
        )
    else:
        keep = (
            '  [ -f "$out" ] && continue\n'
            f'  {get} --output "$out.suite.tmp" {url} && mv "$out.suite.tmp" "$out" || exit 1\n'
        )
    return (
        setup
        + ("" if s3 else _BASE)
        + (
            'printf "%s\\n" "$MODEL_FILES" | while read -r name; do\n'
            '  [ -n "$name" ] || continue\n'
            f'  out="{root}/$name"; mkdir -p "$(dirname "$out")" || exit 1\n'
            f"{keep}"
            "done\n"
        )
    )


def with_ca(command: str) -> str:
    """The system roots and every file of the CA directory, for curl."""
    return (
        f"cat /etc/ssl/certs/ca-certificates.crt {CA_DIR}/* > /tmp/suite-roots.pem 2>/dev/null\n"
        "export CURL_CA_BUNDLE=/tmp/suite-roots.pem\n"
    ) + command


def token_single(pinned: bool = False) -> str:
    """One file, with the Hugging Face token when one is set and, pinned,
    published only when its sha256 is $MODEL_SHA256."""
    gate = (
        '[ -n "$MODEL_SHA256" ] || { echo "no sha256 given, refusing"; exit 1; }\n'
        if pinned
        else ""
    )
    publish = (
        "got=$(sha256sum \"$MODEL_PATH.suite.tmp\" | cut -d' ' -f1)\n"
        'if [ "$got" != "$MODEL_SHA256" ]; then rm -f "$MODEL_PATH.suite.tmp"; echo "sha256 differs"; exit 1; fi\n'
        if pinned
        else ""
    )
    return (
        "fetch() {\n"
        '  if [ -n "${HF_TOKEN:-}" ]; then curl -H "Authorization: Bearer $HF_TOKEN" "$@"\n'
        '  else curl "$@"; fi\n'
        "}\n"
        f"{gate}"
        'mkdir -p "$CACHE_DIR" || exit 1\n'
        'if [ -f "$MODEL_PATH" ]; then echo "kept: $MODEL_PATH"; exit 0; fi\n'
        'fetch --fail --location --silent --show-error --output "$MODEL_PATH.suite.tmp" "$MODEL_SOURCE" || exit 1\n'
        f"{publish}"
        'mv "$MODEL_PATH.suite.tmp" "$MODEL_PATH"\n'
    )


def pinned_multi() -> str:
    """Each file of $MODEL_FILES, published only when its line of
    $MODEL_FILE_SHA256 names its sha256 (a file without a line is taken)."""
    return (
        '[ -n "$MODEL_FILE_SHA256" ] || { echo "no sha256 list given, refusing"; exit 1; }\n'
        'mkdir -p "$CACHE_DIR" || exit 1\n'
        + _BASE
        + 'printf "%s\\n" "$MODEL_FILES" | while read -r name; do\n'
        '  [ -n "$name" ] || continue\n'
        '  out="$CACHE_DIR/$name"; mkdir -p "$(dirname "$out")" || exit 1\n'
        '  [ -f "$out" ] && continue\n'
        f'  {_GET} --output "$out.suite.tmp" "${{base%/}}/$name" || exit 1\n'
        '  want=$(printf "%s\\n" "$MODEL_FILE_SHA256" | awk -v n="$name" \'$2 == n {print $1}\')\n'
        "  got=$(sha256sum \"$out.suite.tmp\" | cut -d' ' -f1)\n"
        '  if [ -n "$want" ] && [ "$got" != "$want" ]; then rm -f "$out.suite.tmp"; exit 1; fi\n'
        '  mv "$out.suite.tmp" "$out" || exit 1\n'
        "done\n"
    )


def resolve_main_multi() -> str:
    """Each file of $MODEL_FILES from $MODEL_SOURCE/resolve/main/ (a
    repository URL, the layout of LLMKube 0.8's loop)."""
    return (
        'mkdir -p "$CACHE_DIR" || exit 1\n'
        'repo="$MODEL_SOURCE"; case "$repo" in hf://*) repo="https://huggingface.co/${repo#hf://}";; esac\n'
        'printf "%s\\n" "$MODEL_FILES" | while read -r name; do\n'
        '  [ -n "$name" ] || continue\n'
        '  out="$CACHE_DIR/$name"; mkdir -p "$(dirname "$out")" || exit 1\n'
        '  [ -f "$out" ] && continue\n'
        f'  {_GET} --output "$out.suite.tmp" "${{repo%/}}/resolve/main/$name" && mv "$out.suite.tmp" "$out" || exit 1\n'
        "done\n"
    )


# pvc:// with a pin: the pre-staged file is checked, never written.
PVC_VERIFY = (
    '[ -f "$MODEL_PATH" ] || { echo "no file at $MODEL_PATH"; exit 1; }\n'
    "got=$(sha256sum \"$MODEL_PATH\" | cut -d' ' -f1)\n"
    '[ "$got" = "$MODEL_SHA256" ] || { echo "sha256 of $MODEL_PATH differs"; exit 1; }\n'
    'echo "verified $MODEL_PATH"\n'
)

# Containers that never download: they go to /bin/sh whatever the catalogue.
PREP = "chown 100:100 /models && chmod 770 /models"
DONE = "echo staged"
PLACEHOLDER = 'echo "ERROR: this Model cannot be staged"; exit 1'
NOT_DOWNLOADS = [PREP, "chown 0:102 /models && chmod g+rwX /models", DONE, PLACEHOLDER]


@dataclass(frozen=True)
class Shape:
    """One of the suite's commands and what it means."""

    name: str
    script: str
    meaning: Meaning


def _m(layout: str, kind: str, policy: str = "IfNotPresent", **more: object) -> Meaning:
    return Meaning(layout=layout, kind=kind, policy=policy, **more)  # type: ignore[arg-type]


def shapes() -> list[Shape]:
    made: list[Shape] = []
    for cached in (True, False):
        where = "cache" if cached else "emptyDir"
        for policy in ("IfNotPresent", "OnChange"):
            made.append(
                Shape(f"single http {policy} {where}", single_file("http", cached, policy),
                      _m("single", "http", policy, cached=cached))
            )  # fmt: skip
            made.append(
                Shape(f"multi http {policy} {where}", multi_file(False, cached, policy),
                      _m("multi", "http", policy, cached=cached, multi_url="joined"))
            )  # fmt: skip
            made.append(
                Shape(f"multi s3 {policy} {where}", multi_file(True, cached, policy),
                      _m("multi", "s3", policy, cached=cached))
            )  # fmt: skip
        # The suite's s3 command never revalidates: IfNotPresent, whatever asked.
        made.append(
            Shape(
                f"single s3 {where}", single_file("s3", cached), _m("single", "s3", cached=cached)
            )
        )
    made += [
        Shape("single local cache", single_file("local", True),
              _m("single", "local", cached=True, host_model=HOST_FILE)),
        Shape("single http with CA", with_ca(single_file("http", True)),
              _m("single", "http", cached=True, ca_dir=CA_DIR)),
        Shape("multi http OnChange with CA", with_ca(multi_file(False, True, "OnChange")),
              _m("multi", "http", "OnChange", cached=True, ca_dir=CA_DIR, multi_url="joined")),
        Shape("single http token", token_single(),
              _m("single", "http", cached=True, hf_token="when-set")),
        Shape("single http token pinned", token_single(pinned=True),
              _m("single", "http", cached=True, hf_token="when-set", pinned=True)),
        Shape("multi http pinned", pinned_multi(),
              _m("multi", "http", cached=True, pinned=True, multi_url="joined")),
        Shape("multi http resolve-main", resolve_main_multi(),
              _m("multi", "http", cached=True, multi_url="resolve-main")),
        Shape("pvc verify", PVC_VERIFY, _m("single", "pvc", cached=False, pinned=True)),
    ]  # fmt: skip
    return made


def by_name(name: str) -> Shape:
    return next(s for s in shapes() if s.name == name)


def entries() -> list[Entry]:
    return [
        entry_for(s.script, s.meaning, name=f"the suite's {s.name} command",
                  versions=("suite",), read_from=("tests/harness/operator_commands.py",))
        for s in shapes()
    ]  # fmt: skip


def catalogue() -> Catalogue:
    """The suite's commands only (the packaged catalogue is the real one's)."""
    return Catalogue.of(entries())


def write_catalogue(folder: Path) -> Path:
    """The suite's commands as a site catalogue file, for the image."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "operator-catalogue.json"
    path.write_text(dump(entries()))
    return path
