"""Credential files named by a variable (#41 item 4), read as bounded
regular files: GOOGLE_APPLICATION_CREDENTIALS (read here, handed to
google-auth as its contents), and the files a library reads itself
(AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE, AWS_WEB_IDENTITY_TOKEN_FILE,
AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE for botocore,
AZURE_FEDERATED_TOKEN_FILE and AZURE_CLIENT_CERTIFICATE_PATH (#41 item 3)
for azure-identity), checked the same way
before the library is given the path.

Why: a directory (the Secret's mount folder instead of the key in it, a
common slip) made google-auth raise IsADirectoryError, exit 3; a FIFO
blocks its reader for ever; /dev/zero is read for ever, into memory. The
file is opened non-blocking (a FIFO's open(2) would wait for a writer),
its type taken from the open descriptor (fstat: no race between the check
and the read), and at most MAX_CREDENTIAL_FILE_BYTES are read. Anything
else is InvalidConfiguration naming the variable and the path (a path is
no secret); the contents are never shown.
"""

from __future__ import annotations

import errno
import os
import stat

from llmkube_stager.errors import ConfigError

# A service-account key is ~2.4 KiB, a projected token ~1-2 KiB, the AWS
# shared files a few KiB: a file past 1 MiB is not a credentials file.
MAX_CREDENTIAL_FILE_BYTES = 1 << 20

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


def read_credential_file(path: str, variable: str) -> bytes:
    """The contents of the regular file `path` that `variable` names, at
    most MAX_CREDENTIAL_FILE_BYTES; ConfigError otherwise."""
    return _read(path, variable, missing_ok=False) or b""


def check_credential_file(path: str, variable: str, *, missing_ok: bool = False) -> None:
    """A file a library will read itself: a bounded regular file now, or
    ConfigError; `missing_ok`: a path that names nothing is accepted (the
    library then has no such file). /dev/null is the empty file KServe's
    anonymous S3 points botocore's shared files at (config/kserve_env.py)."""
    if path != os.devnull:
        _read(path, variable, missing_ok=missing_ok)


def _read(path: str, variable: str, *, missing_ok: bool) -> bytes | None:
    shown = f"{variable} {path[:256]!r}"
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise ConfigError(f"{shown} does not exist") from None
    except OSError as err:
        raise _open_error(err, shown) from None
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind:
            raise ConfigError(f"{shown} is {kind}, not a credentials file{_hint(kind)}")
        data = _read_at_most(fd, MAX_CREDENTIAL_FILE_BYTES + 1, shown)
    finally:
        os.close(fd)
    if len(data) > MAX_CREDENTIAL_FILE_BYTES:
        raise ConfigError(
            f"{shown} is larger than {MAX_CREDENTIAL_FILE_BYTES} bytes: not a credentials file"
        )
    return data


def _open_error(err: OSError, shown: str) -> ConfigError:
    if err.errno in (errno.EACCES, errno.EPERM):
        return ConfigError(f"{shown} cannot be read (permission denied)")
    return ConfigError(f"{shown} cannot be opened: {os.strerror(err.errno or 0)}")


def _kind(mode: int) -> str:
    """'' for a regular file, else what the path is."""
    if stat.S_ISREG(mode):
        return ""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _hint(kind: str) -> str:
    if kind == "a directory":
        return " (a Secret's mount folder? name the file in it, e.g. <folder>/key.json)"
    return ""


def _read_at_most(fd: int, limit: int, shown: str) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < limit:
        try:
            piece = os.read(fd, min(1 << 16, limit - got))
        except OSError as err:
            raise ConfigError(f"{shown} cannot be read: {os.strerror(err.errno or 0)}") from None
        if not piece:
            break
        parts.append(piece)
        got += len(piece)
    return b"".join(parts)
