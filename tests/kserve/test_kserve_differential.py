"""#31 done-means: KServe's own initializer (`kserve-storage`, pinned below)
and the agent on the same inputs, the trees they leave compared.

KServe's initializer runs as its `initializer-entrypoint` does
(`Storage.download_files(SRC..., DEST...)`) from a scratch venv
(tests/harness/venvs.py): `kserve-storage` pulls google-cloud-storage,
the Azure SDKs, modelscope, oras and more, too heavy for the dev extras.
The inputs are built here: archives through `file://` (KServe links the
file and unpacks it), prefixes on the suite's SeaweedFS, a file on the
origin. A tree is every path outside a top-level dot directory (the
agent's `.llmkube-stager/`), each file by its bytes' sha256 and, for a tar,
its owner's exec bit (KServe's zip extraction keeps no mode: there the
agent keeps more, #31 item 2)."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from tests.harness.archives import tar_built, zip_of
from tests.harness.hub import FakeHub
from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload
from tests.harness.seaweed import SeaweedS3, s3_env
from tests.harness.venvs import scratch_venv

pytestmark = pytest.mark.e2e

KSERVE_STORAGE = "kserve-storage==0.21.0"
_ENTRYPOINT = (
    "import sys\n"
    "from kserve_storage import Storage\n"
    "Storage.download_files(sys.argv[1::2], sys.argv[2::2])\n"
)
WEIGHTS = payload(96 << 10, seed=131)
CONFIG = b'{"model_type": "sklearn"}'


@pytest.fixture(scope="module")
def kserve_python() -> str:
    return str(scratch_venv("kserve-storage", [KSERVE_STORAGE]))


def run_kserve(python: str, tmp: Path, uri: str, dest: Path, env: Mapping[str, str]) -> None:
    home = tmp / "kserve-home"
    home.mkdir(exist_ok=True)
    environ = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", **env}
    done = subprocess.run(
        [python, "-c", _ENTRYPOINT, uri, str(dest)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, f"KServe's initializer failed:\n{done.stderr[-3000:]}"


def tree(dest: Path, modes: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    for path in sorted(dest.rglob("*")):
        rel = path.relative_to(dest)
        if rel.parts[0].startswith("."):
            continue
        if path.is_symlink():
            out[str(rel)] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            out[str(rel)] = "dir"
        else:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
            exec_bit = " x" if modes and path.stat().st_mode & 0o100 else ""
            out[str(rel)] = digest + exec_bit
    return out


def model_tar(mode: str) -> bytes:
    """What a Triton or sklearn model archive holds: an empty version
    directory, an executable script, a symlink pointing down, a hard link."""

    def build(tar: tarfile.TarFile) -> None:
        for name in ("ensemble", "ensemble/1", "ensemble/2"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, file_mode, data in (
            ("ensemble/2/model.bin", 0o644, WEIGHTS),
            ("ensemble/2/run.sh", 0o755, b"#!/bin/sh\nexec true\n"),
            ("config.json", 0o600, CONFIG),
        ):
            info = tarfile.TarInfo(name)
            info.mode, info.size = file_mode, len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("ensemble/2/latest.bin")
        link.type, link.linkname = tarfile.SYMTYPE, "model.bin"
        tar.addfile(link)
        hard = tarfile.TarInfo("copy.bin")
        hard.type, hard.linkname = tarfile.LNKTYPE, "ensemble/2/model.bin"
        tar.addfile(hard)

    return tar_built(build, mode)


def model_zip() -> bytes:
    return zip_of({"ensemble/1/": b"", "ensemble/2/model.onnx": WEIGHTS, "labels.txt": b"a\nb\n"})


ARCHIVES: dict[str, tuple[Callable[[], bytes], bool]] = {
    "model.tar.gz": (lambda: model_tar("w:gz"), True),
    "model.tgz": (lambda: model_tar("w:gz"), True),
    "model.tar.bz2": (lambda: model_tar("w:bz2"), True),
    "model.tar.xz": (lambda: model_tar("w:xz"), True),
    "model.txz": (lambda: model_tar("w:xz"), True),
    "model.tar": (lambda: model_tar("w"), True),
    "model.zip": (model_zip, False),
}


@pytest.mark.parametrize("name", sorted(ARCHIVES))
def test_an_archive_unpacks_to_kserves_tree(pod: Pod, kserve_python: str, name: str) -> None:
    build, modes = ARCHIVES[name]
    source = pod.tmp / "src" / name
    source.parent.mkdir()
    source.write_bytes(build())
    theirs, ours = pod.tmp / "kserve" / "models", pod.tmp / "agent" / "models"

    run_kserve(kserve_python, pod.tmp, f"file://{source}", theirs, {})
    run = pod.run(f"file://{source}", str(ours))

    assert run.returncode == 0, str(run)
    assert tree(ours, modes) == tree(theirs, modes)
    assert "ensemble/1" in tree(ours, modes)


S3_CASES: dict[str, tuple[dict[str, bytes], str, dict[str, str]]] = {
    # A job's output: the archive beside an empty _SUCCESS marker.
    "archive-set": (
        {"out/model.tar.gz": model_tar("w:gz"), "out/_SUCCESS": b""},
        "out",
        {},
    ),
    # Checksum files left out by the patterns (checked after them).
    "patterns": (
        {
            "sums/model.bin": WEIGHTS,
            "sums/model.bin.sha256": b"abc  model.bin\n",
            "sums/sub/config.json": CONFIG,
        },
        "sums",
        {"STORAGE_IGNORE_PATTERNS": "*.sha256"},
    ),
    # Checksum files the patterns keep (#31 item 4): files like any other,
    # one named like the stamp of its weight, one with no weight; an empty
    # part of a key (SeaweedFS stores it under its clean path).
    "checksums": (
        {
            "sums/model.bin": WEIGHTS,
            "sums/model.bin.sha256": b"3b7a  model.bin\n",
            "sums/only.sha256": b"0000  gone.bin\n",
            "sums//x.json": CONFIG,
        },
        "sums",
        {},
    ),
    "exact-sha256": ({"one/model.onnx.sha256": b"abc  model.onnx\n"}, "one/model.onnx.sha256", {}),
    # The object the URI names is never filtered.
    "exact-key": (
        {"one/model.onnx": WEIGHTS, "one/model.onnx.bak": b"old"},
        "one/model.onnx",
        {"STORAGE_IGNORE_PATTERNS": "*.onnx"},
    ),
}


@pytest.mark.parametrize("case", sorted(S3_CASES))
def test_an_s3_uri_stages_kserves_tree(
    pod: Pod, s3: SeaweedS3, bucket: str, kserve_python: str, case: str
) -> None:
    objects, key, extra = S3_CASES[case]
    for name, data in objects.items():
        s3.put(bucket, name, data)
    env = {**s3_env(s3), **extra}
    theirs, ours = pod.tmp / "kserve" / "models", pod.tmp / "agent" / "models"

    run_kserve(kserve_python, pod.tmp, f"s3://{bucket}/{key}", theirs, env)
    run = pod.run(f"s3://{bucket}/{key}", str(ours), env=env)

    assert run.returncode == 0, str(run)
    assert tree(ours, True) == tree(theirs, True)


@pytest.mark.parametrize("name", ["model%2Bv2.onnx", "weights%2Fpart1.bin"])
def test_an_http_file_is_named_as_kserve_names_it(
    pod: Pod, origin: Origin, kserve_python: str, name: str
) -> None:
    from urllib.parse import unquote

    origin.put(f"/m/{unquote(name)}", WEIGHTS)  # the origin decodes the request's path
    theirs, ours = pod.tmp / "kserve" / "models", pod.tmp / "agent" / "models"

    run_kserve(kserve_python, pod.tmp, f"{origin.url}/m/{name}", theirs, {})
    run = pod.run(f"{origin.url}/m/{name}", str(ours))

    assert run.returncode == 0, str(run)
    assert tree(ours, False) == tree(theirs, False) == {name: tree(ours, False)[name]}


def test_a_hub_repo_with_a_sha256_file_stages_kserves_tree(
    pod: Pod, hub: FakeHub, kserve_python: str
) -> None:
    """KServe's snapshot_download and the agent on one fake-hub repo whose
    LFS weight has its checksum file beside it (#31 item 4)."""
    files = {
        "model.safetensors": WEIGHTS,
        "model.safetensors.sha256": b"abc  model.safetensors\n",
        "config.json": CONFIG,
    }
    hub.add_repo("org/sums", files, lfs={"model.safetensors"})
    env = {"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1"}
    theirs, ours = pod.tmp / "kserve" / "models", pod.tmp / "agent" / "models"

    run_kserve(kserve_python, pod.tmp, "hf://org/sums", theirs, env)
    run = pod.run("hf://org/sums", str(ours), env=env)

    assert run.returncode == 0, str(run)
    assert tree(ours, False) == tree(theirs, False)
    assert set(tree(ours, False)) == set(files)
