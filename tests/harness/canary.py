"""Canary secrets: random values whose appearance anywhere is a leak.

`canary` makes one value deliberately not shaped like a token; `Secrets` one
value of every secret-bearing input, each shaped like the real thing (hf_...,
AKIA..., a session token, URL userinfo, a signed query, a proxy password), so
that shape-based redaction is exercised too and a leak of the value itself
is still seen. `outputs_of` gathers what a run showed (stdout, the log, the
termination message, the files and names it left) and `assert_no_leak`
looks for any 12-character piece of any canary in all of it.
`runtime_canaries` are the secrets only the wire to S3 shows (STS session
tokens, presigned signatures).
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.harness.pod import Run
    from tests.harness.seaweed import SeaweedS3

_ALNUM = string.ascii_letters + string.digits
_PIECE = 12


def random_text(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def canary(prefix: str, n: int = 32) -> str:
    """A random secret; any 12-character piece of it in an output is a leak.
    Deliberately not shaped like an hf_/AKIA token, so that shape-based
    redaction cannot hide a leak of the value itself."""
    return prefix + random_text(n)


def pieces(secret: str) -> list[str]:
    """The secret and every 12-character window of it."""
    return [secret] + [secret[i : i + _PIECE] for i in range(0, len(secret) - _PIECE + 1)]


def leaks(secret: str, *texts: str) -> list[str]:
    """Pieces (12 chars) of `secret` found in `texts`."""
    found = {secret[i : i + _PIECE] for i in range(0, max(1, len(secret) - _PIECE + 1))}
    return sorted(p for p in found for t in texts if p in t)


@dataclass(frozen=True)
class Secrets:
    """One random value of every secret-bearing input, shaped like the real
    one; `tag` goes after the shape's prefix (e.g. "CANARY")."""

    hf_token: str
    aws_key_id: str
    aws_secret: str
    aws_session: str
    url_password: str
    url_signature: str
    url_token: str
    proxy_password: str

    @classmethod
    def new(cls, tag: str = "") -> Secrets:
        return cls(
            hf_token="hf_" + tag + random_text(34),
            aws_key_id="AKIA" + random_text(16, string.ascii_uppercase + string.digits),
            aws_secret=random_text(40, _ALNUM + "/+"),
            aws_session="IQoJb3JpZ2lu" + random_text(80, _ALNUM + "/+"),
            url_password="pw" + tag + random_text(24),
            url_signature=random_text(64, "0123456789abcdef"),
            url_token="qt" + tag + random_text(28),
            proxy_password="px" + tag + random_text(24),
        )

    @property
    def env(self) -> dict[str, str]:
        """The secrets a pod gets as variables."""
        return {
            "HF_TOKEN": self.hf_token,
            "AWS_ACCESS_KEY_ID": self.aws_key_id,
            "AWS_SECRET_ACCESS_KEY": self.aws_secret,
            "AWS_SESSION_TOKEN": self.aws_session,
        }

    @property
    def named(self) -> dict[str, str]:
        """Every secret by the name a leak report gives it."""
        return {
            **self.env,
            "url-password": self.url_password,
            "X-Amz-Signature": self.url_signature,
            "token": self.url_token,
            "proxy-password": self.proxy_password,
        }


def outputs_of(run: Run, root: Path | None = None) -> dict[str, str]:
    """Where -> text of everything `run` showed: stdout, the log, the
    termination message, and under `root` every path's name and every
    regular file's content."""
    found = {
        "stdout": run.stdout,
        "stderr": run.stderr,
        "the termination message": (run.term_raw or b"").decode("utf-8", "replace"),
    }
    if root is not None and root.exists():
        for path in sorted(root.rglob("*")):
            found[f"the name {path.name}"] = str(path.relative_to(root))
            if path.is_file() and not path.is_symlink():
                found[str(path)] = path.read_bytes().decode("latin-1")
    return found


def assert_no_leak(outputs: Mapping[str, str], canaries: Mapping[str, str]) -> None:
    for where, text in outputs.items():
        for name, secret in canaries.items():
            for piece in pieces(secret):
                assert piece not in text, (
                    f"{name} leaked into {where}: ...{piece}...\n{text[:3000]}"
                )


def runtime_canaries(s3: SeaweedS3) -> dict[str, str]:
    """What only the wire shows: session tokens and presigned signatures."""
    found: dict[str, str] = {}
    for i, request in enumerate(s3.requests()):
        token = request.headers.get("x-amz-security-token") or "".join(
            request.params.get("X-Amz-Security-Token", [])
        )
        if token:
            found[f"session-token-{i}"] = token
        for name in ("X-Amz-Signature",):
            for value in request.params.get(name, []):
                found[f"{name}-{i}"] = value
    return found


# One canary token per test session: the `hub` fixture accepts exactly this one.
HF_TOKEN = canary("hfcanary")
