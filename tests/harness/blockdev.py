"""Real block-device filesystems for the storage tests (#21 item 10): an
ext4 or XFS image on a loop device, its backing file on a tmpfs of its own.

The backing tmpfs can be smaller than the image (`backing_bytes`): the
image is sparse, so the filesystem above believes it has room while the
loop device runs out of it during write-back (the #21 item 1 case: the
write-back error is reported once, by whichever call asks first), and it
can be given room again (`grow_backing`). `remount` drops the filesystem's
page cache, so what a test reads afterwards is what reached the "disk".
`shutdown` is XFS's forced shutdown (`xfs_io -x -c shutdown`): every call
after it fails with EIO; `fail_ext4` raises an ext4 error (with
`errors=remount-ro`, every write after it fails with EROFS).

Teardown is guaranteed (a `finally`): unmount (lazily if busy), detach the
loop device, unmount the tmpfs. A machine without root, losetup, a free
loop device or the mkfs tool gets `missing_feature` naming it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.harness.features import missing_feature

MIB = 1 << 20
# mkfs.xfs (xfsprogs >= 5.19) refuses a filesystem under 300 MiB; the image
# is sparse, so this costs only what is written.
XFS_MIN_BYTES = 300 * MIB


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: rc {done.returncode}: {done.stderr.strip()}")
    return done


def _need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        missing_feature(f"{tool} ({package})")
    return path


def _mkfs_argv(fstype: str, image: Path, inodes: int | None, extra: Sequence[str]) -> list[str]:
    if fstype == "ext4":
        # No journal: a journal commit that fails to reach the disk aborts
        # the filesystem (read-only until fsck), and the "room again" half
        # of the tests needs it writable. Data write-back errors are the
        # same either way (errseq on the file).
        argv = [_need("mkfs.ext4", "e2fsprogs"), "-q", "-F", "-O", "^has_journal"]
        argv += ["-E", "lazy_itable_init=1,nodiscard", "-m", "0"]
        if inodes is not None:
            argv += ["-N", str(inodes)]
        return [*argv, *extra, str(image)]
    if fstype == "xfs":
        return [_need("mkfs.xfs", "xfsprogs"), "-q", "-f", "-K", *extra, str(image)]
    raise ValueError(fstype)


@dataclass
class LoopFs:
    fstype: str
    mount_point: Path
    device: str
    image: Path
    backing: Path  # the tmpfs holding the image
    mount_options: str

    def grow_backing(self, size_bytes: int) -> None:
        """Give the loop device's backing store room (again)."""
        _run(["mount", "-o", f"remount,size={size_bytes}", str(self.backing)])

    def backing_free_bytes(self) -> int:
        st = os.statvfs(self.backing)
        return st.f_bavail * st.f_frsize

    def remount(self) -> None:
        """Unmount and mount again: the next reads come from the device."""
        _run(["umount", str(self.mount_point)])
        self._mount()

    def shutdown(self) -> None:
        """XFS forced shutdown: every later call on the mount fails with EIO."""
        _run([_need("xfs_io", "xfsprogs"), "-x", "-c", "shutdown", str(self.mount_point)])

    def fail_ext4(self) -> None:
        """An ext4 error as the kernel raises one on corruption (sysfs
        `trigger_fs_error`): mounted `errors=remount-ro`, the filesystem
        turns read-only at once and every later write fails with EROFS."""
        trigger = Path("/sys/fs/ext4") / os.path.basename(self.device) / "trigger_fs_error"
        if not trigger.exists():
            missing_feature(f"{trigger} (ext4 sysfs error trigger)")
        trigger.write_text("1")

    def _mount(self) -> None:
        argv = ["mount", "-t", self.fstype]
        if self.mount_options:
            argv += ["-o", self.mount_options]
        _run([*argv, self.device, str(self.mount_point)])


@contextlib.contextmanager
def loop_fs(
    mount_point: Path,
    fstype: str = "ext4",
    image_bytes: int = 64 * MIB,
    *,
    backing_bytes: int | None = None,
    inodes: int | None = None,
    mkfs_args: Sequence[str] = (),
    mount_options: str = "",
) -> Iterator[LoopFs]:
    """A fresh `fstype` filesystem mounted on `mount_point` (created), on a
    loop device over a sparse `image_bytes` file on a tmpfs of
    `backing_bytes` (default: room for the whole image)."""
    if os.geteuid() != 0:
        missing_feature("root, to attach loop devices and mount them")
    losetup = _need("losetup", "util-linux")
    if fstype == "xfs":
        image_bytes = max(image_bytes, XFS_MIN_BYTES)
    backing = Path(tempfile.mkdtemp(prefix="llmkube-backing-"))
    size = backing_bytes if backing_bytes is not None else image_bytes + 4 * MIB
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, backing, True)
        done = _run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(backing)], False)
        if done.returncode != 0:
            missing_feature(f"mount -t tmpfs ({done.stderr.strip()})")
        stack.callback(_run, ["umount", "-l", str(backing)], False)
        image = backing / f"{fstype}.img"
        with open(image, "wb") as handle:
            handle.truncate(image_bytes)
        _run(_mkfs_argv(fstype, image, inodes, mkfs_args))
        attached = _run([losetup, "--find", "--show", str(image)], False)
        if attached.returncode != 0:
            missing_feature(f"a free loop device (losetup: {attached.stderr.strip()})")
        device = attached.stdout.strip()
        stack.callback(_run, [losetup, "-d", device], False)
        mount_point.mkdir(parents=True, exist_ok=True)
        fs = LoopFs(fstype, mount_point, device, image, backing, mount_options)
        fs._mount()
        stack.callback(_unmount, mount_point)
        yield fs


def _unmount(mount_point: Path) -> None:
    if _run(["umount", str(mount_point)], False).returncode != 0:
        _run(["umount", "-l", str(mount_point)], False)
