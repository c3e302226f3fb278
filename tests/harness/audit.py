"""The CLI under a Python audit hook that reports every attempt to create,
write, rename or remove a file (`Pod.run(..., audit=True)`), and every
name looked up and address connected to (`Run.network`).

An attempt is reported even when permissions would make it fail, so "nothing
tries to write /dev/termination-log, $HOME or the working directory" is what
a test checks, not merely that nothing got written. The hook writes one
`event<TAB>path` line per attempt to the inherited descriptor AUDIT_FD
(os.write raises no audit event of its own).
"""

from __future__ import annotations

AUDITED_CLI = r"""
import os, runpy, sys
fd = int(os.environ.pop("AUDIT_FD"))
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
PATH_ARGS = {
    "os.mkdir": (0,), "os.rename": (0, 1), "os.remove": (0,), "os.rmdir": (0,),
    "os.link": (0, 1), "os.symlink": (1,), "os.truncate": (0,), "os.chmod": (0,),
    "os.chown": (0,), "os.utime": (0,), "os.mkfifo": (0,), "os.mknod": (0,),
    "shutil.copyfile": (1,), "shutil.rmtree": (0,),
    "tempfile.mkstemp": (0,), "tempfile.mkdtemp": (0,),
}
def hook(event, args):
    if event == "socket.connect" and isinstance(args[1], tuple):
        os.write(fd, f"{event}\t{args[1][0]}:{args[1][1]}\n".encode())
        return
    if event == "socket.getaddrinfo":
        os.write(fd, f"{event}\t{args[0]!s}:{args[1]!s}\n".encode())
        return
    if event == "open":
        path, mode, flags = args
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags or 0) & WRITE
        targets = [path] if writes else []
    elif event in PATH_ARGS:
        targets = [args[i] for i in PATH_ARGS[event]]
    else:
        return
    dir_fds = list(args[2:4]) if event == "os.rename" else []
    for i, target in enumerate(targets):
        if isinstance(target, int):
            continue
        name = os.fsdecode(os.fspath(target))
        dir_fd = dir_fds[i] if i < len(dir_fds) else None
        if not name.startswith("/") and isinstance(dir_fd, int) and dir_fd >= 0:
            name = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), name)
        elif not name.startswith("/") and event == "open":
            # The open event does not say its dir_fd: the cache's bookkeeping
            # is written relative to a directory descriptor (cache/safeio).
            os.write(fd, f"{event}\tdirfd:{name}\n".encode())
            continue
        path = os.path.abspath(name)
        if path.startswith("/proc/self/fd/"):  # a reopened descriptor: its file
            try:
                path = os.readlink(path)
            except OSError:
                pass
        os.write(fd, f"{event}\t{path}\n".encode())
sys.addaudithook(hook)
sys.argv = ["llmkube-stager", *sys.argv[1:]]
runpy.run_module("llmkube_stager", run_name="__main__", alter_sys=True)
"""


def parse_writes(raw: bytes) -> list[tuple[str, str]]:
    """The hook's file lines as (event, path); `dirfd:<name>` for a relative open."""
    return [line for line in _lines(raw) if not line[0].startswith("socket.")]


def parse_network(raw: bytes) -> list[tuple[str, str]]:
    """The hook's socket lines as (event, "host:port"): every name looked up
    (socket.getaddrinfo) and every address connected to (socket.connect),
    so a test can tell that nothing left loopback (#41 item 1)."""
    return [line for line in _lines(raw) if line[0].startswith("socket.")]


def _lines(raw: bytes) -> list[tuple[str, str]]:
    found = []
    for line in raw.decode().splitlines():
        event, path = line.split("\t", 1)
        found.append((event, path))
    return found
