"""Run the built image the way a kubelet runs an init container, on a machine
with buildah but no container engine (docs/image.md, "How the tests run it").

`buildah run` has no `--read-only` (buildah-run(1), 1.28) and its chroot
isolation ignores the OCI spec's `root.readonly`. So every run happens in a
private mount namespace (`unshare --mount`) where the container's root
filesystem, as buildah mounted it, is bind-mounted over itself and remounted
read-only before `buildah run` starts: the agent sees `/` read-only (EROFS,
ST_RDONLY in statvfs), as runc makes it for `readOnlyRootFilesystem`. Volumes
(`-v`) are mounted over it by buildah as usual; their mount points are made in
the container's writable layer first, as a runtime makes them before it
remounts the root read-only. The namespace dies with the run: nothing stays
mounted on the host.

One exception: `/run` stays the container layer's own writable directory.
buildah creates `/run/.containerenv` for each run and deletes it afterwards; on
a read-only `/run` the deletion fails, buildah 1.28 then panics on a nil logger
and exits 2, and the command's exit code is lost. `/run` belongs to root (0755),
so the image's uid 100 cannot write there anyway, and `Container.writes()` lists
everything any run changed in the container layer, `/run` included.

Chroot isolation shares the host's network namespace: the agent in the image
reaches the test process's loopback servers (origin, fake hub, S3) directly.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from llmkube_stager.operator.catalogue import SITE_CATALOGUE
from tests.harness.operator_commands import write_catalogue
from tests.harness.pod import SHORT_BUDGET, Run, multi_env, single_env
from tests.harness.schema import checked_termination

ROOT = Path(__file__).resolve().parents[2]
# Runs inside the image (mounted read-only with its directory at PROBE_DIR):
# it stays beside the image tests, importing nothing of tests/.
PROBE = ROOT / "tests" / "image" / "probe.py"
# The image's user: curlimages/curl's uid and group (#30 item 3, image/Dockerfile).
UID, GID = 100, 102
TERMINATION_DIR = "/termination"
MODELS_DIR = "/models"
# Where KServe's webhook mounts the storage initializer's emptyDir (#24 item 6).
KSERVE_MODELS_DIR = "/mnt/models"
PROBE_DIR = "/probe"
# Files buildah bind-mounts into every container: on a read-only root their
# mount points must exist before the run (the image has none of them). It
# also makes and removes run/.containerenv on each run (in the writable /run):
# making it here lets the layer's copy of /run exist before the first run.
_BUILDAH_FILE_TARGETS = ("etc/hosts", "etc/hostname", "etc/resolv.conf", "run/.containerenv")
# The operator's other mounts (#30): its CA ConfigMap and a local source's
# hostPath file, made before the root is remounted read-only.
CA_DIR = "/custom-certs"
HOST_MODEL = "/host-model/model.gguf"
# A pvc:// Model's claim, mounted read-only (the verify container).
PVC_DIR = "/model-source"
# The folder of the site catalogue the image's sh reads besides its own
# (llmkube_stager/operator/catalogue.py SITE_CATALOGUE, #39): the suite's
# commands are known to the image only through it.
SITE_CATALOGUE_DIR = str(PurePosixPath(SITE_CATALOGUE).parent)

# $1: the container's root filesystem; the rest: the command to run there.
_READ_ONLY_ROOT = r"""
root=$1; shift
keep=$(mktemp -d)
mount --bind "$root/run" "$keep"
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount --bind "$keep" "$root/run"
umount "$keep"
rmdir "$keep"
exec "$@"
"""


def project_version() -> str:
    """The package's __version__: the one source (pyproject reads it too)."""
    import llmkube_stager

    return llmkube_stager.__version__


def image_ref() -> str:
    """The image `make image` built (make image-test passes it)."""
    return os.environ.get("LLMKUBE_TEST_IMAGE") or f"localhost/llmkube-stager:{project_version()}"


def buildah(*args: str, timeout: float = 120) -> str:
    proc = subprocess.run(
        ["buildah", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"buildah {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc.stdout


@dataclass(frozen=True)
class ImageConfig:
    """The OCI config of the image: what a kubelet would run."""

    ref: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    user: str
    env: dict[str, str]
    labels: dict[str, str]

    @classmethod
    def inspect(cls, ref: str) -> ImageConfig:
        config = json.loads(buildah("inspect", "--type", "image", ref))["OCIv1"]["config"]
        env = dict(item.split("=", 1) for item in config.get("Env") or ())
        return cls(
            ref,
            tuple(config.get("Entrypoint") or ()),
            tuple(config.get("Cmd") or ()),
            config.get("User", ""),
            env,
            dict(config.get("Labels") or {}),
        )

    def argv(self, args: Sequence[str]) -> list[str]:
        """Entrypoint + args, or Entrypoint + Cmd without args (a pod's
        `args:` replaces Cmd, never the entrypoint)."""
        return [*self.entrypoint, *(args or self.cmd)]


@dataclass(frozen=True)
class Volume:
    host: Path
    dest: str
    read_only: bool = False

    def flag(self) -> str:
        return f"{self.host}:{self.dest}:{'ro' if self.read_only else 'rw'}"


class Container:
    """One working container of the image, shared by the tests: its root is
    read-only in every run, so no test can change it for the next (and
    `writes()` would show it)."""

    def __init__(
        self,
        config: ImageConfig,
        mount_points: Iterable[str] = (
            MODELS_DIR,
            KSERVE_MODELS_DIR,
            TERMINATION_DIR,
            PROBE_DIR,
            CA_DIR,
            PVC_DIR,
            SITE_CATALOGUE_DIR,
        ),
    ) -> None:
        self.config = config
        self.name = f"llmkube-image-test-{os.getpid()}-{secrets.token_hex(3)}"
        buildah("from", "--pull-never", "--name", self.name, config.ref)
        try:
            self.rootfs = Path(buildah("mount", self.name).strip())
            self.upper = _overlay_upper_dir(self.rootfs)
            for target in mount_points:
                (self.rootfs / target.lstrip("/")).mkdir(parents=True, exist_ok=True)
            for target in (*_BUILDAH_FILE_TARGETS, HOST_MODEL.lstrip("/")):
                (self.rootfs / target).parent.mkdir(parents=True, exist_ok=True)
                (self.rootfs / target).touch()
        except BaseException:
            self.close()
            raise
        self._prepared = self._layer_paths()

    def close(self) -> None:
        buildah("rm", self.name)

    def writes(self) -> list[tuple[str, int, int]]:
        """Paths the runs created, changed or deleted (whiteouts) in the
        container's writable layer since it was prepared."""
        return sorted(self._layer_paths() - self._prepared)

    def _layer_paths(self) -> set[tuple[str, int, int]]:
        """Every entry of the layer; a directory by name only (buildah's own
        /run/.containerenv comes and goes, touching /run's mtime)."""
        found = set()
        for path in self.upper.rglob("*"):
            st = path.lstat()
            stamp = (0, 0) if stat.S_ISDIR(st.st_mode) else (st.st_mtime_ns, st.st_size)
            found.add((str(path.relative_to(self.upper)), *stamp))
        return found

    def exec(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        volumes: Iterable[Volume],
        timeout: float = 120,
        user: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`argv` as the image's user (or `user`: a pod's runAsUser), with the
        root filesystem read-only and only `volumes` writable (those not
        mounted `read_only`)."""
        command = ["buildah", "run", "--isolation", "chroot"]
        if user is not None:
            command += ["--user", user]
        for key, value in env.items():
            command += ["-e", f"{key}={value}"]
        for volume in volumes:
            command += ["-v", volume.flag()]
        command += [self.name, "--", *argv]
        wrapped = ["unshare", "--mount", "--propagation", "private", "--"]
        wrapped += ["sh", "-euc", _READ_ONLY_ROOT, "sh", str(self.rootfs), *command]
        for _ in range(_SETUP_ATTEMPTS - 1):
            proc = subprocess.run(
                wrapped, capture_output=True, text=True, timeout=timeout, check=False
            )
            if not _buildah_setup_failed(proc):
                return proc
        return subprocess.run(wrapped, capture_output=True, text=True, timeout=timeout, check=False)


# buildah's chroot isolation re-executes itself from a sealed memfd copy before
# the container's command exists; sealing sometimes fails with EBUSY while
# another run's copy is being torn down (CI run of 2026-12-07: "Close_Fd
# sealing memfd copy: Device or resource busy", exit 1, nothing run). Such a
# run never reached the image, so it is run again; any other failure is the
# test's to judge.
_SETUP_ATTEMPTS = 3
_BUILDAH_SETUP_FAILURES = ("sealing memfd copy",)


def _buildah_setup_failed(proc: subprocess.CompletedProcess[str]) -> bool:
    return proc.returncode != 0 and any(text in proc.stderr for text in _BUILDAH_SETUP_FAILURES)


def _overlay_upper_dir(rootfs: Path) -> Path:
    """The container layer of an overlay mount (buildah's default driver)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(rootfs):
            options = line.split(" - ", 1)[1].split()[2]
            for option in options.split(","):
                if option.startswith("upperdir="):
                    return Path(option.removeprefix("upperdir="))
    raise RuntimeError(f"{rootfs} is not an overlay mount: these tests need buildah's overlay")


class ImagePod:
    """A pod-like sandbox for the image: a cache volume, a termination-log
    volume and an optional /tmp volume (host directories under one tmp dir),
    and the environment the operator would set."""

    def __init__(self, container: Container, tmp: Path, models_at: str = MODELS_DIR) -> None:
        self.container = container
        self.models = _volume_dir(tmp / "models", 0o755)
        self.models_at = models_at  # where the model volume is mounted in the container
        self.term_dir = _volume_dir(tmp / "termination", 0o755)
        self.tmp = _volume_dir(tmp / "tmp", 0o1777, owner=0)
        self.term_path = self.term_dir / "log"
        # The suite's commands as the site's catalogue (#39), written once.
        self.catalogue_dir = write_catalogue(tmp / "site-catalogue").parent
        self.env: dict[str, str] = {
            "LLMKUBE_TERMINATION_LOG": f"{TERMINATION_DIR}/log",
            **SHORT_BUDGET,
        }

    def single(self, source: str, name: str = "model.gguf", key: str = "k1") -> Path:
        """Single-file env (as Pod.single, at the container's path); returns
        the host path of MODEL_PATH."""
        self.env.pop("MODEL_FILES", None)
        self.env.update(single_env(source, Path(MODELS_DIR, key), name))
        return self.models / key / name

    def multi(self, source: str, files: Iterable[str], key: str = "k2") -> Path:
        """Multi-file env (as Pod.multi); returns the host path of CACHE_DIR."""
        self.env.pop("MODEL_PATH", None)
        self.env.update(multi_env(source, Path(MODELS_DIR, key), files))
        return self.models / key

    def volumes(self, *, tmp_writable: bool, models_read_only: bool) -> list[Volume]:
        volumes = [
            Volume(self.models, self.models_at, read_only=models_read_only),
            Volume(self.term_dir, TERMINATION_DIR),
        ]
        if tmp_writable:
            volumes.append(Volume(self.tmp, "/tmp"))
        return volumes

    def run(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        tmp_writable: bool = True,
        models_read_only: bool = False,
        timeout: float = 120,
        extra: Iterable[Volume] = (),
    ) -> Run:
        """The image's entrypoint with `args` (the image's CMD when none);
        `extra` volumes besides the pod's (a CA directory, #33)."""
        self.term_path.unlink(missing_ok=True)
        container = self.container
        volumes = self.volumes(tmp_writable=tmp_writable, models_read_only=models_read_only)
        proc = container.exec(
            container.config.argv(args),
            env={**self.env, **(env or {})},
            volumes=[*volumes, *extra],
            timeout=timeout,
        )
        term = self.term_path.read_bytes() if self.term_path.exists() else None
        return Run(
            tuple(args), proc.returncode, proc.stdout, proc.stderr, checked_termination(term)
        )

    def sh(
        self,
        script: str,
        *,
        env: Mapping[str, str],
        user: str | None = None,
        extra: Iterable[Volume] = (),
        timeout: float = 120,
        catalogue: bool = True,
    ) -> Run:
        """`sh -c script` as the operator runs its containers (#30): the
        command replaces the entrypoint, `sh` is found on the image's PATH;
        the environment is `env` alone (the operator's, and the source
        Secret's) plus where the termination log is mounted. With
        `catalogue`, the suite's commands are mounted as the site's
        catalogue (tests/harness/operator_commands.py); without it the
        image knows only the operator's own."""
        self.term_path.unlink(missing_ok=True)
        volumes = [*self.volumes(tmp_writable=True, models_read_only=False), *extra]
        if catalogue:
            volumes.append(Volume(self.catalogue_dir, SITE_CATALOGUE_DIR, read_only=True))
        proc = self.container.exec(
            ["sh", "-c", script],
            env={"LLMKUBE_TERMINATION_LOG": f"{TERMINATION_DIR}/log", **env},
            volumes=volumes,
            timeout=timeout,
            user=user,
        )
        term = self.term_path.read_bytes() if self.term_path.exists() else None
        return Run(
            ("sh", "-c", script),
            proc.returncode,
            proc.stdout,
            proc.stderr,
            checked_termination(term),
        )

    def probe(self, *args: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
        """tests/image/probe.py with the image's Python, as the image's user
        and on the same read-only root; returns its JSON report."""
        report = self.term_dir / "probe.json"
        volumes = [
            *self.volumes(tmp_writable=False, models_read_only=False),
            Volume(PROBE.parent, PROBE_DIR, read_only=True),
        ]
        argv = ["python3", f"{PROBE_DIR}/{PROBE.name}", f"{TERMINATION_DIR}/{report.name}", *args]
        proc = self.container.exec(argv, env={**self.env, **(env or {})}, volumes=volumes)
        assert proc.returncode == 0, f"probe failed ({proc.returncode})\n{proc.stderr}"
        doc = json.loads(report.read_text())
        assert isinstance(doc, dict)
        return doc


def _volume_dir(path: Path, mode: int, owner: int = UID) -> Path:
    """A host directory for a volume, owned by the image's user like a volume
    prepared with fsGroup (root-owned and sticky for /tmp)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, owner, owner if owner == 0 else GID)
    path.chmod(mode)
    return path


def missing_tools() -> list[str]:
    return [tool for tool in ("buildah", "unshare", "mount") if shutil.which(tool) is None]
