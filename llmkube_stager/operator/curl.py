"""The image's `curl` (/opt/llmkube/bin/curl; #30 item 2): not curl.

This image runs the operator's download scripts through llmkube-stager
(shell.py) and has no curl. A script that reaches curl anyway (run by an
absolute `/bin/sh`, from a file, or by a future operator through a path the
image's `sh` does not see) gets a line that says so, where "curl: not found"
would leave a user guessing, and curl's own "failed to initialize" status
(2), so that `curl ... || echo 0` and `curl ... && mv` branch as on any
curl failure: never an exit 0 without the model.

Only the URL's scheme and host are shown: the arguments may carry the
source Secret's keys (`-u`, `-H "Authorization: ..."`) and a signed URL
its signature.
"""

from __future__ import annotations

import sys
from typing import NoReturn
from urllib.parse import urlsplit

# curl's CURLE_FAILED_INIT.
EXIT_FAILED_INIT = 2


def main(argv: list[str] | None = None) -> NoReturn:
    args = sys.argv[1:] if argv is None else argv
    sys.stderr.write(f"curl: ({EXIT_FAILED_INIT}) {message(args)}\n")
    sys.stderr.flush()
    sys.exit(EXIT_FAILED_INIT)


def message(args: list[str]) -> str:
    hosts = sorted({_where(a) for a in args if "://" in a} - {""})
    target = f" for {', '.join(hosts)}" if hosts else ""
    return (
        f"curl is not in this image (llmkube-stager){target}: the operator's download commands "
        "run through the agent, and this one is not one this image knows; see "
        "docs/switching-llmkube.md, "
        "or set the init image back to curlimages/curl"
    )


def _where(arg: str) -> str:
    try:
        parts = urlsplit(arg)
        host = parts.hostname or ""
    except ValueError:
        return ""
    if not parts.scheme or not host:
        return ""
    return f"{parts.scheme}://{host}"
