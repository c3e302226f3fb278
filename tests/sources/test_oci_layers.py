"""oci:// artifacts of tar layers (#43 item 3's tar part) against the real
registry on loopback behind the recording front: a modelcar image (an OS
layer and a models/ layer), ModelPack tar and tar+gzip layers, hostile
tars, a wrong byte, a kill mid-layer, warm starts.
"""

from __future__ import annotations

import gzip
import io
import os
import signal
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.canary import canary, leaks, outputs_of
from tests.harness.features import missing_feature
from tests.harness.pod import ON_CHANGE, Pod, wait_for
from tests.harness.registry import (
    Layer,
    Registry,
    RegistryUnavailable,
    docker_config,
    push_image,
    sha256_digest,
)
from tests.harness.registry_front import RegistryFront
from tests.harness.sample import MIB, payload

IMAGE_CONFIG = "application/vnd.oci.image.config.v1+json"
IMAGE_TGZ = "application/vnd.oci.image.layer.v1.tar+gzip"
PACK_TGZ = "application/vnd.cncf.model.weight.v1.tar+gzip"
PACK_TAR = "application/vnd.cncf.model.weight.v1.tar"
WEIGHTS = payload(2 * MIB + 5)


@pytest.fixture
def registry() -> Iterator[Registry]:
    try:
        reg = Registry(mode="anonymous").start()
    except RegistryUnavailable as err:
        missing_feature(str(err))
    with reg:
        yield reg


@pytest.fixture
def front(registry: Registry) -> Iterator[RegistryFront]:
    with RegistryFront(registry) as fr:
        yield fr


def _tar(entries: list[tarfile.TarInfo | tuple[str, bytes]], gz: bool = False) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                tar.addfile(entry)
                continue
            name, data = entry
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    data = raw.getvalue()
    return gzip.compress(data, mtime=0) if gz else data


def _special(name: str, kind: bytes, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


def _env(front: RegistryFront, ref: str, pod: Pod) -> dict[str, str]:
    return {"MODEL_SOURCE": f"oci://{front.hostport}/{ref}", "CACHE_DIR": str(pod.cache_dir)}


def _published(cache: Path) -> list[str]:
    return sorted(
        str(p.relative_to(cache))
        for p in cache.rglob("*")
        if ".llmkube-stager" not in p.parts and p.name != ".llmkube.lock" and not p.is_dir()
    )


def _modelcar(registry: Registry) -> None:
    push_image(registry, "org/car", "v1", _modelcar_layers(), config_media=IMAGE_CONFIG)


def _modelcar_layers() -> list[Layer]:
    os_layer = _tar(
        [
            ("etc/os-release", b"ID=debian\n"),
            ("bin/sh", b"\x7fELF"),
            _special("dev/null", tarfile.CHRTYPE),
            _special("etc/passwd-link", tarfile.SYMTYPE, "/etc/passwd"),
        ],
        gz=True,
    )
    models = _tar(
        [
            _special("models", tarfile.DIRTYPE),
            ("models/config.json", b'{"v": 1}'),
            ("models/weights/model.safetensors", WEIGHTS),
            _special("models/current", tarfile.SYMTYPE, "weights/model.safetensors"),
        ],
        gz=True,
    )
    return [Layer(os_layer, IMAGE_TGZ), Layer(models, IMAGE_TGZ)]


def test_a_modelcar_image_stages_its_models_folder_and_a_warm_start_asks_nothing(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    """The OS layer is ignored; `models/` becomes the model's root; the
    layers are gone afterwards; the warm start makes no request and does
    not unpack again (the file's inode is the same)."""
    _modelcar(registry)
    run = pod.run(env=_env(front, "org/car:v1", pod))
    assert run.returncode == 0, run
    cache = pod.cache_dir
    assert _published(cache) == ["config.json", "current", "weights/model.safetensors"]
    assert (cache / "weights" / "model.safetensors").read_bytes() == WEIGHTS
    assert os.readlink(cache / "current") == "weights/model.safetensors"
    assert not list((cache / ".llmkube-stager" / "oci-layers").iterdir())
    inode = (cache / "config.json").stat().st_ino

    before = len(front.seen())
    again = pod.run(env=_env(front, "org/car:v1", pod))
    assert again.returncode == 0, again
    assert len(front.seen()) == before
    assert (cache / "config.json").stat().st_ino == inode


def test_modelpack_tar_layers_unpack_in_order_a_later_file_replacing(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    first = _tar([("model.safetensors", WEIGHTS), ("config.json", b"old")], gz=True)
    second = _tar([("config.json", b"new"), ("tok/tokenizer.json", b"{}")])
    push_image(registry, "org/pack", "v1", [Layer(first, PACK_TGZ), Layer(second, PACK_TAR)])
    run = pod.run(env=_env(front, "org/pack:v1", pod))
    assert run.returncode == 0, run
    cache = pod.cache_dir
    assert _published(cache) == ["config.json", "model.safetensors", "tok/tokenizer.json"]
    assert (cache / "config.json").read_bytes() == b"new"
    assert (cache / "model.safetensors").read_bytes() == WEIGHTS

    mark = len(front.seen())
    changed = pod.run(env={**_env(front, "org/pack:v1", pod), **ON_CHANGE})
    assert changed.returncode == 0, changed
    # OnChange of an unmoved manifest: no blob asked, nothing unpacked again.
    assert not [s for s in front.seen()[mark:] if "/blobs/" in s.path]


HOSTILE = {
    "dotdot": [("../escape.txt", b"x")],
    "absolute": [("/tmp/escape.txt", b"x")],
    "symlink-out": [_special("out", tarfile.SYMTYPE, "../../etc"), ("out/x", b"x")],
    "hardlink-out": [_special("passwd", tarfile.LNKTYPE, "/etc/passwd")],
    "device": [_special("null", tarfile.CHRTYPE)],
    "whiteout": [(".wh.config.json", b"")],
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_tar_layer_is_refused_with_nothing_published(
    pod: Pod, registry: Registry, front: RegistryFront, kind: str
) -> None:
    good = _tar([("config.json", b"{}")])
    hostile = _tar([("model.safetensors", b"w"), *HOSTILE[kind]])
    push_image(registry, "org/evil", "v1", [Layer(good, PACK_TAR), Layer(hostile, PACK_TAR)])
    run = pod.run(env=_env(front, "org/evil:v1", pod))
    assert run.returncode == 4, run
    assert run.reason == "ModelSourceRejected"
    assert _published(pod.cache_dir) == []
    assert not Path(pod.cache_dir.parent / "escape.txt").exists()
    leftovers = [p.name for p in (pod.cache_dir / ".llmkube-stager").iterdir()]
    assert not [n for n in leftovers if n.startswith(("unpack.", "publishing"))], leftovers


def test_a_hostile_hard_link_out_of_a_modelcar_s_models_is_refused(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    models = _tar([("etc/shadow", b"s"), _special("models/shadow", tarfile.LNKTYPE, "etc/shadow")])
    push_image(registry, "org/car", "v1", [Layer(models, IMAGE_TGZ)], config_media=IMAGE_CONFIG)
    run = pod.run(env=_env(front, "org/car:v1", pod))
    assert run.returncode == 4, run
    assert _published(pod.cache_dir) == []


def test_a_wrong_byte_in_a_tar_layer_is_refused_before_unpacking(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    layer = _tar([("model.safetensors", WEIGHTS)])
    push_image(registry, "org/pack", "v1", [Layer(layer, PACK_TAR)])
    front.flip(sha256_digest(layer), at=MIB, times=99)
    run = pod.run(env=_env(front, "org/pack:v1", pod))
    assert run.returncode != 0, run
    assert run.reason == "ModelTransferChecksumMismatch"
    assert _published(pod.cache_dir) == []
    names = [p.name for p in (pod.cache_dir / ".llmkube-stager").rglob("*")]
    assert not [n for n in names if n.startswith("unpack.") or n.endswith(".tar")], names


def test_a_dropped_connection_resumes_the_layer_with_a_range(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    layer = _tar([("model.safetensors", WEIGHTS)])
    push_image(registry, "org/pack", "v1", [Layer(layer, PACK_TAR)])
    front.cut(sha256_digest(layer), after_bytes=MIB)
    run = pod.run(env=_env(front, "org/pack:v1", pod))
    assert run.returncode == 0, run
    assert (pod.cache_dir / "model.safetensors").read_bytes() == WEIGHTS
    ranges = [s.range for s in front.seen("GET", sha256_digest(layer))]
    assert ranges[-1].startswith(f"bytes={MIB}-"), ranges


def test_a_pod_killed_mid_layer_resumes_from_its_partial(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    big = payload(32 * MIB)
    layer = _tar([("model.safetensors", big)])
    push_image(registry, "org/big", "v1", [Layer(layer, PACK_TAR)])
    front.slow(sha256_digest(layer), bytes_per_s=16 * MIB)
    env = _env(front, "org/big:v1", pod)
    proc = pod.popen(env=env)
    wait_for(lambda: front.state.sent_bytes >= 20 * MIB, 30, "20 MiB sent", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _published(pod.cache_dir) == []

    run = pod.run(env=env)
    assert run.returncode == 0, run
    assert (pod.cache_dir / "model.safetensors").read_bytes() == big
    resume = front.seen("GET", sha256_digest(layer))[-1]
    offset = int(resume.range.removeprefix("bytes=").split("-")[0])
    assert 0 < offset < len(layer) and resume.status == 206


def test_a_tar_zstd_layer_is_refused_by_name_before_any_blob(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    layer = Layer(
        b"\x28\xb5\x2f\xfd not really zstd", "application/vnd.oci.image.layer.v1.tar+zstd"
    )
    push_image(registry, "org/z", "v1", [layer], config_media=IMAGE_CONFIG)
    run = pod.run(env=_env(front, "org/z:v1", pod))
    assert run.returncode == 4, run
    assert run.reason == "ModelSourceRejected"
    assert "no zstd decoder" in run.stderr
    assert not front.seen("GET", "/blobs/")


def test_a_pod_killed_while_unpacking_publishes_nothing_and_the_next_start_finishes(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    """SIGKILL once a file is being written into the private work directory:
    no file of the model is in CACHE_DIR; the restarted pod removes the
    half unpack, unpacks again from the checked layer and publishes."""
    files = [(f"shard-{i:02d}.bin", payload(4 * MIB + i)) for i in range(24)]
    layer = _tar(files)
    push_image(registry, "org/many", "v1", [Layer(layer, PACK_TAR)])
    env = _env(front, "org/many:v1", pod)
    private = pod.cache_dir / ".llmkube-stager"

    def unpacking() -> bool:
        return private.is_dir() and any(private.glob("unpack.*/shard-01.bin"))

    proc = pod.popen(env=env)
    wait_for(unpacking, 60, "the unpack under way", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _published(pod.cache_dir) == []
    blobs = len(front.seen("GET", "/blobs/"))

    run = pod.run(env=env)
    assert run.returncode == 0, run
    assert _published(pod.cache_dir) == sorted(name for name, _ in files)
    assert (pod.cache_dir / "shard-07.bin").read_bytes() == files[7][1]
    assert len(front.seen("GET", "/blobs/")) == blobs  # the checked layer was kept
    assert not list(private.glob("unpack.*"))


def test_a_modelcar_behind_the_bearer_flow_renews_its_token_mid_layer(pod: Pod) -> None:
    """Tokens live 3 s and the front holds the models/ layer's GET 4 s: the
    registry answers 401 to the token held, a new one is asked, the layer
    completes; the password is nowhere in what the agent wrote or said."""
    import json

    secret = canary("pw")
    try:
        reg = Registry(mode="token", token_ttl_s=3, password=secret).start()
    except RegistryUnavailable as err:
        missing_feature(str(err))
    with reg, RegistryFront(reg) as fr:
        _modelcar(reg)
        models_layer = _modelcar_layers()[1].data
        config_dir = pod.tmp / "docker"
        docker_config(str(config_dir), reg)
        path = config_dir / "config.json"
        doc = json.loads(path.read_text())
        doc["auths"] = {fr.hostport: doc["auths"][reg.hostport]}
        path.write_text(json.dumps(doc))
        fr.delay(sha256_digest(models_layer), 4.0)
        env = {**_env(fr, "org/car:v1", pod), "DOCKER_CONFIG": str(config_dir)}
        run = pod.run(env={**env, "LLMKUBE_STALL_TIMEOUT": "10"})
        assert run.returncode == 0, run
        assert (pod.cache_dir / "weights" / "model.safetensors").read_bytes() == WEIGHTS
        statuses = [s.status for s in fr.seen("GET", sha256_digest(models_layer))]
        assert statuses == [401, 200], statuses
        assert not leaks(secret, *outputs_of(run, pod.models).values())


def test_the_room_check_counts_the_layers_then_the_unpacked_sizes(
    pod: Pod, registry: Registry, front: RegistryFront, tmp_path: Path
) -> None:
    """On a 3 MiB volume: a 4 MiB layer is refused before any blob is asked;
    an 8 KiB tar+gzip layer declaring 8 MiB of zeros is fetched, then
    refused before anything is unpacked."""
    from tests.harness.mounts import tmpfs

    with tmpfs(tmp_path / "small", "size=3m") as volume:
        env = {"CACHE_DIR": str(volume / "m")}
        big = _tar([("model.safetensors", payload(4 * MIB))])
        push_image(registry, "org/big", "v1", [Layer(big, PACK_TAR)])
        run = pod.run(env={**_env(front, "org/big:v1", pod), **env})
        assert run.reason == "ModelTransferOutOfSpace", run
        assert not front.seen("GET", "/blobs/")

        bomb = _tar([("model.safetensors", bytes(8 * MIB))], gz=True)
        push_image(registry, "org/zeros", "v1", [Layer(bomb, PACK_TGZ)])
        run = pod.run(env={**_env(front, "org/zeros:v1", pod), **env})
        assert run.reason == "ModelTransferOutOfSpace", run
        assert "nothing was unpacked" in run.stderr, run
        assert front.seen("GET", sha256_digest(bomb))
        assert _published(volume / "m") == []
        assert not list((volume / "m" / ".llmkube-stager").glob("unpack.*"))
