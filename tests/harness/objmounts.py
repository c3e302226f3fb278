"""Real FUSE object stores for tests (#21 item 10): s3fs and rclone mounts of
ONE SeaweedFS bucket, two mounts standing for two nodes of a cache volume.

Each mount is its own daemon with its own caches (attributes, directory
entries, rclone's VFS), as on two nodes; what one node writes reaches the
other only through the bucket. Credentials live in the test's tmp
directory (s3fs's passwd file, rclone's config file), never in argv or the
environment of the test. rclone runs with a clean environment: a CA bundle
variable there (SSL_CERT_FILE and friends, set on many build machines)
makes it refuse to start.

Every mount is unmounted when the context ends, also when the test failed
(fusermount3 -u, then lazily), and its daemon is ended by its pid.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.harness.mounts import is_mounted, unmount
from tests.harness.seaweed import ADMIN, REGION, SeaweedS3

# rclone's VFS cache modes the suite runs (#21 items 8, 10): "off" streams
# writes to the bucket, "writes" stages written files in a local cache,
# "full" caches reads too.
RCLONE_MODES = ("off", "writes", "full")
_MOUNT_TIMEOUT_S = 20.0


def objstore_missing(tool: str) -> str | None:
    """What this machine lacks for a `tool` (s3fs or rclone) mount, or None."""
    if shutil.which(tool) is None:
        return f"{tool} not installed"
    if shutil.which("fusermount3") is None and shutil.which("fusermount") is None:
        return "fuse3 (fusermount3) not installed"
    if not os.path.exists("/dev/fuse"):
        return "fuse (no /dev/fuse)"
    if os.geteuid() != 0:
        return f"root, to mount {tool} (fuse)"
    return None


@dataclass
class ObjectNodes:
    """Two mounts of one bucket: `node1`, `node2`; `kind` names the driver
    (`s3fs`, or `rclone-<mode>` for a mode of RCLONE_MODES)."""

    kind: str
    bucket: str
    node1: Path
    node2: Path


def _clean_env(tmp: Path) -> dict[str, str]:
    """PATH and HOME only: no CA bundle, proxy or AWS variable of the host."""
    home = tmp / "objmount-home"
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}


def _s3fs_command(s3: SeaweedS3, bucket: str, mnt: Path, tmp: Path) -> list[str]:
    passwd = tmp / "s3fs-passwd"
    passwd.write_text(f"{ADMIN[0]}:{ADMIN[1]}\n")
    passwd.chmod(0o600)
    options = [
        f"passwd_file={passwd}",
        f"url={s3.direct_url}",
        "use_path_request_style",
        f"endpoint={REGION}",
        "sigv4",
        "nonempty",
    ]
    return ["s3fs", bucket, str(mnt), "-f", "-o", ",".join(options)]


def _rclone_command(
    s3: SeaweedS3, bucket: str, mnt: Path, tmp: Path, mode: str, name: str
) -> list[str]:
    config = tmp / f"rclone-{name}.conf"
    config.write_text(
        "[seaweed]\n"
        "type = s3\n"
        "provider = Other\n"
        f"access_key_id = {ADMIN[0]}\n"
        f"secret_access_key = {ADMIN[1]}\n"
        f"endpoint = {s3.direct_url}\n"
        f"region = {REGION}\n"
        "force_path_style = true\n"
    )
    config.chmod(0o600)
    cache = tmp / f"rclone-cache-{name}"
    return [
        "rclone",
        "mount",
        f"seaweed:{bucket}",
        str(mnt),
        "--config",
        str(config),
        "--cache-dir",
        str(cache),
        "--vfs-cache-mode",
        mode,
        "--dir-cache-time",
        "5s",
        "--poll-interval",
        "0",
        "--log-file",
        str(tmp / f"rclone-{name}.log"),
    ]


@contextlib.contextmanager
def _mount(command: list[str], mnt: Path, tmp: Path, log: Path) -> Iterator[Path]:
    mnt.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        daemon = subprocess.Popen(
            command,
            env=_clean_env(tmp),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _await_mount(daemon, mnt, log)
        yield mnt
    finally:
        with contextlib.suppress(RuntimeError):
            unmount(mnt)
        _end(daemon)
        if is_mounted(mnt):
            subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)


def _await_mount(daemon: subprocess.Popen[bytes], mnt: Path, log: Path) -> None:
    deadline = time.monotonic() + _MOUNT_TIMEOUT_S
    while not is_mounted(mnt):
        if daemon.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{daemon.args[0]} did not mount {mnt}:\n{tail}")
        time.sleep(0.05)


def _end(daemon: subprocess.Popen[bytes]) -> None:
    """Our own daemon, by its pid: it exits after its unmount; if not, ended."""
    try:
        daemon.wait(timeout=10)
    except subprocess.TimeoutExpired:
        daemon.terminate()
        try:
            daemon.wait(timeout=5)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def _command(kind: str, s3: SeaweedS3, bucket: str, mnt: Path, tmp: Path, name: str) -> list[str]:
    if kind == "s3fs":
        return _s3fs_command(s3, bucket, mnt, tmp)
    mode = kind.removeprefix("rclone-")
    return _rclone_command(s3, bucket, mnt, tmp, mode, name)


@contextlib.contextmanager
def object_nodes(kind: str, s3: SeaweedS3, tmp: Path, bucket: str) -> Iterator[ObjectNodes]:
    """Two `kind` mounts (`s3fs`, `rclone-<mode>`) of `bucket` (created
    here): two nodes of one object-store cache volume."""
    s3.create_bucket(bucket)
    mnts = [tmp / f"{kind}-node1", tmp / f"{kind}-node2"]
    with contextlib.ExitStack() as stack:
        for i, mnt in enumerate(mnts, 1):
            command = _command(kind, s3, bucket, mnt, tmp, f"node{i}")
            stack.enter_context(_mount(command, mnt, tmp, tmp / f"{kind}-node{i}.out"))
        yield ObjectNodes(kind, bucket, mnts[0], mnts[1])
