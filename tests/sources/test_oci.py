"""oci:// sources against the real registry (Debian's docker-registry, the
CNCF distribution) on loopback, behind the suite's recording front
(tests/harness/registry_front.py), with artifacts the tests push
themselves (#43). What went over the wire is the front's record.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.canary import canary, leaks, outputs_of
from tests.harness.features import missing_feature
from tests.harness.pod import ON_CHANGE, Pod, wait_for
from tests.harness.registry import (
    DOCKER_LIST,
    DOCKER_MANIFEST,
    Layer,
    Mode,
    Registry,
    RegistryUnavailable,
    docker_config,
    modelpack_layer,
    push_image,
    push_index,
    sha256_digest,
)
from tests.harness.registry_front import BlobStorage, RegistryFront
from tests.harness.sample import MIB, payload


def _started(mode: Mode, **kw: int | str) -> Registry:
    try:
        return Registry(mode=mode, **kw).start()  # type: ignore[arg-type]
    except RegistryUnavailable as err:
        missing_feature(str(err))


@pytest.fixture
def registry() -> Iterator[Registry]:
    with _started("anonymous") as reg:
        yield reg


@pytest.fixture
def front(registry: Registry) -> Iterator[RegistryFront]:
    with RegistryFront(registry) as fr:
        yield fr


WEIGHTS = payload(3 * MIB + 17)
CONFIG = b'{"architectures": ["Llama"]}\n'


def _model(old: bool = False) -> list[Layer]:
    return [
        modelpack_layer("model.safetensors", WEIGHTS, old=old),
        modelpack_layer("config.json", CONFIG, old=old),
        modelpack_layer("tokenizer/tokenizer.json", b'{"v": 1}', old=old),
    ]


def _env(front: RegistryFront, ref: str, pod: Pod, **extra: str) -> dict[str, str]:
    return {
        "MODEL_SOURCE": f"oci://{front.hostport}/{ref}",
        "CACHE_DIR": str(pod.cache_dir),
        **extra,
    }


def _assert_model(cache: Path) -> None:
    assert (cache / "model.safetensors").read_bytes() == WEIGHTS
    assert (cache / "config.json").read_bytes() == CONFIG
    assert (cache / "tokenizer" / "tokenizer.json").read_bytes() == b'{"v": 1}'


# -- references, manifests, layers --------------------------------------------------------


@pytest.mark.parametrize("old", [False, True], ids=["cncf", "cnai"])
def test_a_modelpack_artifact_is_staged_and_a_warm_start_asks_nothing(
    pod: Pod, registry: Registry, front: RegistryFront, old: bool
) -> None:
    """Every raw layer becomes the file its annotation names, checked
    against its digest; the second IfNotPresent start makes no request."""
    digest, _ = push_image(registry, "org/llama", "v1", _model(old))
    run = pod.run(env=_env(front, "org/llama:v1", pod))
    assert run.returncode == 0, run
    _assert_model(pod.cache_dir)
    assert run.stats[:2] == (3, 3)
    gets = front.seen("GET", "/manifests/")
    assert [s.path for s in gets] == ["/v2/org/llama/manifests/v1"]
    listing = json.loads((pod.cache_dir / ".llmkube-listing").read_bytes())
    assert listing["base"] == digest

    stamp = (pod.cache_dir / "model.safetensors.sha256").read_text()
    assert stamp.split()[0] == sha256_digest(WEIGHTS).partition(":")[2]

    before = len(front.seen())
    again = pod.run(env=_env(front, "org/llama:v1", pod))
    assert again.returncode == 0, again
    assert again.stats[:2] == (3, 0)
    checked = pod.run("verify", env=_env(front, "org/llama:v1", pod))
    assert checked.returncode == 0, checked
    assert len(front.seen()) == before


def test_a_digest_reference_and_a_docker_list_resolved_to_the_platform(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    """A Docker manifest list is resolved to LLMKUBE_OCI_PLATFORM; the
    other platform's layers are never asked for."""
    arm = [modelpack_layer("model.safetensors", b"arm weights")]
    _, arm_raw = push_image(registry, "org/multi", "arm", arm, media_type=DOCKER_MANIFEST)
    _, amd_raw = push_image(registry, "org/multi", "amd", _model(), media_type=DOCKER_MANIFEST)
    index = push_index(
        registry,
        "org/multi",
        "v1",
        {"linux/arm64": arm_raw, "linux/amd64": amd_raw},
        media_type=DOCKER_LIST,
    )
    run = pod.run(env=_env(front, f"org/multi@{index}", pod))
    assert run.returncode == 0, run
    _assert_model(pod.cache_dir)
    assert not front.seen("GET", sha256_digest(b"arm weights"))

    other = Pod(pod.tmp / "arm")
    run = other.run(env=_env(front, "org/multi:v1", other, LLMKUBE_OCI_PLATFORM="linux/arm64"))
    assert run.returncode == 0, run
    assert (other.cache_dir / "model.safetensors").read_bytes() == b"arm weights"


def test_an_index_without_the_platform_is_refused_by_name(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    _, arm_raw = push_image(registry, "org/arm", "arm", _model())
    push_index(registry, "org/arm", "v1", {"linux/arm64": arm_raw})
    run = pod.run(env=_env(front, "org/arm:v1", pod))
    assert run.returncode == 4, run
    assert run.reason == "ModelSourceNotFound"
    assert "linux/amd64" in run.term["message"] and "linux/arm64" in run.term["message"]
    assert "LLMKUBE_OCI_PLATFORM" in run.term["remedy"]
    assert not (pod.cache_dir / "model.safetensors").exists()


def test_docker_model_runner_layers_get_the_runner_s_names(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    gguf = payload(MIB + 3)
    layers = [
        Layer(gguf, "application/vnd.docker.ai.gguf.v3"),
        Layer(b"MIT\n", "application/vnd.docker.ai.license"),
    ]
    push_image(
        registry,
        "ai/smol",
        "latest",
        layers,
        config_media="application/vnd.docker.ai.model.config.v0.1+json",
    )
    run = pod.run(env=_env(front, "ai/smol", pod))
    assert run.returncode == 0, run
    assert (pod.cache_dir / "model.gguf").read_bytes() == gguf
    assert (pod.cache_dir / "LICENSE").read_bytes() == b"MIT\n"


@pytest.mark.parametrize("name", ["../../escape.bin", "/etc/cron.d/x", ".llmkube-listing"])
def test_a_hostile_file_name_refuses_the_artifact_and_writes_nothing(
    pod: Pod, registry: Registry, front: RegistryFront, name: str
) -> None:
    layers = [modelpack_layer("config.json", CONFIG), modelpack_layer(name, b"evil")]
    push_image(registry, "org/evil", "v1", layers)
    run = pod.run(env=_env(front, "org/evil:v1", pod))
    assert run.returncode in (2, 4), run
    assert run.reason == "InvalidFileSet", run
    assert not front.seen("GET", "/blobs/")
    assert not (pod.tmp / "escape.bin").exists() and not (pod.models / "escape.bin").exists()
    assert not pod.cache_dir.exists() or not (pod.cache_dir / "config.json").exists()


def test_a_layer_that_is_no_tar_is_refused_and_kserve_s_form_refuses_tar_layers(
    pod: Pod, registry: Registry, front: RegistryFront, tmp_path: Path
) -> None:
    """A tar+gzip layer (its digest right) whose bytes are no archive: refused
    with nothing published (tests/sources/test_oci_layers.py has the rest).
    KServe's form does not unpack tar layers: refused before any blob."""
    layer = Layer(b"not really a tar", "application/vnd.oci.image.layer.v1.tar+gzip")
    push_image(registry, "org/car", "v1", [layer])
    run = pod.run(env=_env(front, "org/car:v1", pod))
    assert run.returncode == 4, run
    assert run.reason == "ModelSourceRejected"
    assert not [
        p for p in pod.cache_dir.iterdir() if p.name not in (".llmkube-stager", ".llmkube.lock")
    ]

    mark = len(front.seen())
    kserve = pod.run(f"oci+fetch://{front.hostport}/org/car:v1", str(tmp_path / "dest"))
    assert kserve.returncode == 4, kserve
    assert "archive (tar) layers" in kserve.stderr
    assert not [s for s in front.seen()[mark:] if "/blobs/" in s.path]


def test_on_change_fetches_only_the_layers_whose_digest_moved(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    """The tag moves to a manifest where one layer changed: OnChange asks
    the manifest again and fetches that layer only."""
    push_image(registry, "org/llama", "v1", _model())
    assert pod.run(env=_env(front, "org/llama:v1", pod)).returncode == 0
    newer = [modelpack_layer("model.safetensors", WEIGHTS), modelpack_layer("config.json", b"{}")]
    newer.append(modelpack_layer("tokenizer/tokenizer.json", b'{"v": 1}'))
    push_image(registry, "org/llama", "v1", newer)
    mark = len(front.seen())
    run = pod.run(env=_env(front, "org/llama:v1", pod, **ON_CHANGE))
    assert run.returncode == 0, run
    assert (pod.cache_dir / "config.json").read_bytes() == b"{}"
    blobs = [s.path for s in front.seen()[mark:] if "/blobs/" in s.path]
    assert blobs == [f"/v2/org/llama/blobs/{sha256_digest(b'{}')}"]


def test_kserve_oci_fetch_form_stages_every_layer_under_dest(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    """KServe's initializer form: `oci+fetch://...` and a DEST_DIR."""
    push_image(registry, "org/llama", "v1", _model())
    dest = pod.tmp / "mnt" / "models"
    run = pod.run(f"oci+fetch://{front.hostport}/org/llama:v1", str(dest))
    assert run.returncode == 0, run
    _assert_model(dest)


def test_on_change_of_an_unmoved_tag_costs_one_head(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    push_image(registry, "org/llama", "v1", _model())
    assert pod.run(env=_env(front, "org/llama:v1", pod)).returncode == 0
    mark = len(front.seen())
    run = pod.run(env=_env(front, "org/llama:v1", pod, **ON_CHANGE))
    assert run.returncode == 0, run
    assert run.stats[:2] == (3, 0)
    assert [(s.method, s.path) for s in front.seen()[mark:]] == [
        ("HEAD", "/v2/org/llama/manifests/v1")
    ]
    _assert_model(pod.cache_dir)


# -- faults ---------------------------------------------------------------------------------


def test_a_wrong_byte_in_a_layer_is_never_published(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    """The registry serves one flipped byte every time: the file's pin (its
    layer digest) refuses it, and nothing is published."""
    push_image(registry, "org/llama", "v1", _model())
    front.flip(sha256_digest(WEIGHTS), at=1000, times=99)
    run = pod.run(env=_env(front, "org/llama:v1", pod, LLMKUBE_CONNECTIONS="1"))
    assert run.returncode != 0, run
    assert run.reason == "ModelTransferChecksumMismatch"
    assert not (pod.cache_dir / "model.safetensors").exists()


def test_a_dropped_connection_and_a_503_are_resumed(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    push_image(registry, "org/llama", "v1", _model())
    front.fail("/manifests/", 503)
    front.cut(sha256_digest(WEIGHTS), after_bytes=MIB)
    run = pod.run(env=_env(front, "org/llama:v1", pod, LLMKUBE_CONNECTIONS="1"))
    assert run.returncode == 0, run
    _assert_model(pod.cache_dir)
    ranges = [s.range for s in front.seen("GET", sha256_digest(WEIGHTS))]
    assert ranges[-1].startswith(f"bytes={MIB}-"), ranges


def test_a_pod_killed_mid_layer_resumes_from_its_partial(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    """SIGKILL while the weights layer is received (config.json published
    already, so the listing is recorded); the restarted pod asks no
    manifest and resumes the layer with a Range."""
    big = payload(32 * MIB)
    layers = [modelpack_layer("config.json", CONFIG), modelpack_layer("model.safetensors", big)]
    push_image(registry, "org/big", "v1", layers)
    front.slow(sha256_digest(big), bytes_per_s=16 * MIB)
    env = _env(front, "org/big:v1", pod, LLMKUBE_CONNECTIONS="1", LLMKUBE_FILES_IN_FLIGHT="1")
    proc = pod.popen(env=env)
    wait_for(lambda: front.state.sent_bytes >= 20 * MIB, 30, "20 MiB sent", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    manifests = len(front.seen("GET", "/manifests/"))

    run = pod.run(env=env)
    assert run.returncode == 0, run
    assert (pod.cache_dir / "model.safetensors").read_bytes() == big
    assert len(front.seen("GET", "/manifests/")) == manifests == 1
    resume = front.seen("GET", sha256_digest(big))[-1]
    offset = int(resume.range.removeprefix("bytes=").split("-")[0])
    assert 0 < offset < len(big) and resume.status == 206


def test_a_registry_that_ignores_range_is_read_as_one_stream(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    push_image(registry, "org/llama", "v1", _model())
    front.state.ignore_range = True
    run = pod.run(env=_env(front, "org/llama:v1", pod, LLMKUBE_CONNECTIONS="4"))
    assert run.returncode == 0, run
    _assert_model(pod.cache_dir)


def test_rate_limited_past_the_budget_is_a_reason_with_its_remedy(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    push_image(registry, "org/llama", "v1", _model())
    front.fail("/manifests/", 429, times=99)
    run = pod.run(env=_env(front, "org/llama:v1", pod))
    assert run.returncode == 1, run
    assert run.reason == "ModelSourceRateLimited"
    assert "LLMKUBE_OCI_DOCKER_CONFIG" in run.term["remedy"]
    assert not pod.cache_dir.exists() or not any(pod.cache_dir.iterdir())


def test_a_manifest_whose_bytes_are_not_its_digest_is_refused(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    """A wrong byte in the manifest (or a manifest changed between the
    registry naming its digest and sending it): never read as a listing."""
    push_image(registry, "org/llama", "v1", _model())
    front.flip("/manifests/", at=40, times=99)
    run = pod.run(env=_env(front, "org/llama:v1", pod))
    assert run.returncode == 1, run
    assert run.reason == "ModelSourceChanged"
    assert not front.seen("GET", "/blobs/")


def test_a_tag_moved_mid_pull_finishes_the_manifest_it_started(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    """A pull cut short, the tag moved, then the pod restarted: the run
    finishes the artifact it recorded (blobs are asked by digest), never a
    mix of two."""
    first, _ = push_image(registry, "org/llama", "v1", _model())
    front.cut(sha256_digest(WEIGHTS), after_bytes=MIB, times=99)
    cut = pod.run(
        env=_env(front, "org/llama:v1", pod, LLMKUBE_CONNECTIONS="1", LLMKUBE_RETRIES="0")
    )
    assert cut.returncode != 0, cut
    push_image(registry, "org/llama", "v1", [modelpack_layer("model.safetensors", b"newer")])
    with front.state.lock:
        front.state.faults.clear()
    run = pod.run(env=_env(front, "org/llama:v1", pod))
    assert run.returncode == 0, run
    _assert_model(pod.cache_dir)
    listing = json.loads((pod.cache_dir / ".llmkube-listing").read_bytes())
    assert listing["base"] == first


# -- auth -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["basic", "token"])
def test_credentials_from_a_docker_config_never_printed(pod: Pod, mode: Mode) -> None:
    secret = canary("pw")
    with _started(mode, password=secret) as reg, RegistryFront(reg) as fr:
        push_image(reg, "org/private", "v1", _model())
        config_dir = pod.tmp / "docker"
        docker_config(str(config_dir), reg)
        # The registry's config names the registry itself; the front is
        # where the agent goes: the entry is for the front's host:port.
        _rekey(config_dir, reg.hostport, fr.hostport)
        denied = pod.run(env=_env(fr, "org/private:v1", pod))
        assert denied.returncode == 4, denied
        assert denied.reason == "ModelSourceUnauthorized"
        run = pod.run(env=_env(fr, "org/private:v1", pod, DOCKER_CONFIG=str(config_dir)))
        assert run.returncode == 0, run
        _assert_model(pod.cache_dir)
        assert not leaks(secret, *outputs_of(run, pod.models).values())
        if mode == "token":
            assert reg.token_server is not None
            asked = [r for r in reg.token_server.requests if r["auth"] == "Basic"]
            assert asked and asked[0]["scope"] == "repository:org/private:pull"


def test_a_public_repository_behind_the_bearer_flow_needs_no_credentials(pod: Pod) -> None:
    """Docker Hub's public images: a 401 with a Bearer challenge, an
    anonymous token from the realm, then the pull."""
    with _started("token") as reg, RegistryFront(reg) as fr:
        assert reg.token_server is not None
        reg.token_server.public = True
        push_image(reg, "library/llama", "v1", _model())
        run = pod.run(env=_env(fr, "library/llama:v1", pod))
        assert run.returncode == 0, run
        _assert_model(pod.cache_dir)
        assert [r["auth"] for r in reg.token_server.requests] == [""]


@pytest.mark.parametrize("mode", ["basic", "token"])
def test_a_wrong_password_is_unauthorized_with_the_registry_s_remedy(pod: Pod, mode: Mode) -> None:
    with _started(mode) as reg, RegistryFront(reg) as fr:
        push_image(reg, "org/private", "v1", _model())
        wrong = canary("wrong")
        config_dir = pod.tmp / "docker"
        docker_config(str(config_dir), Registry(user=reg.user, password=wrong, port=reg.port))
        _rekey(config_dir, reg.hostport, fr.hostport)
        run = pod.run(env=_env(fr, "org/private:v1", pod, DOCKER_CONFIG=str(config_dir)))
        assert run.returncode == 4, run
        assert run.reason == "ModelSourceUnauthorized"
        assert "LLMKUBE_OCI_DOCKER_CONFIG" in run.term["remedy"]
        assert not leaks(wrong, *outputs_of(run, pod.models).values())


def test_a_missing_tag_is_not_found_naming_the_reference(
    pod: Pod, registry: Registry, front: RegistryFront
) -> None:
    push_image(registry, "org/llama", "v1", _model())
    run = pod.run(env=_env(front, "org/llama:v2", pod))
    assert run.returncode == 4, run
    assert run.reason == "ModelSourceNotFound"
    assert "org/llama:v2" in run.term["message"]
    assert "tag" in run.term["remedy"]


def test_an_identity_token_is_traded_at_the_realm(pod: Pod) -> None:
    with _started("token") as reg, RegistryFront(reg) as fr:
        assert reg.token_server is not None
        refresh = canary("refresh")
        reg.token_server.refresh_token = refresh
        push_image(reg, "org/private", "v1", _model())
        config_dir = pod.tmp / "kserve-docker"
        docker_config(str(config_dir), reg, identity_token=refresh)
        _rekey(config_dir, reg.hostport, fr.hostport)
        env = _env(fr, "org/private:v1", pod, KSERVE_OCI_DOCKER_CONFIG=str(config_dir))
        run = pod.run(env=env)
        assert run.returncode == 0, run
        grants = [r for r in reg.token_server.requests if r["method"] == "POST"]
        assert grants and grants[0]["grant_type"] == "refresh_token"
        assert not leaks(refresh, *outputs_of(run, pod.models).values())


def test_a_token_expiring_mid_pull_is_renewed(pod: Pod) -> None:
    """Tokens live 1 s; the front holds the weights' GET 2 s, so the
    registry itself answers 401 to the token the agent holds: a new token
    is asked with the last challenge and the file completes. The push
    before it gets long tokens: its own uploads under load outlast 1 s."""
    with _started("token") as reg, RegistryFront(reg) as fr:
        push_image(reg, "org/private", "v1", _model())
        assert reg.token_server is not None
        reg.token_server.ttl_s = 1
        config_dir = pod.tmp / "docker"
        docker_config(str(config_dir), reg)
        _rekey(config_dir, reg.hostport, fr.hostport)
        fr.delay(sha256_digest(WEIGHTS), 2.5)
        env = _env(
            fr,
            "org/private:v1",
            pod,
            DOCKER_CONFIG=str(config_dir),
            LLMKUBE_CONNECTIONS="1",
            LLMKUBE_STALL_TIMEOUT="10",
        )
        run = pod.run(env=env)
        assert run.returncode == 0, run
        _assert_model(pod.cache_dir)
        statuses = [s.status for s in fr.seen("GET", sha256_digest(WEIGHTS))]
        assert statuses == [401, 200], statuses
        assert "timed out" not in run.stderr


def test_a_blob_redirected_to_another_host_gets_no_authorization(pod: Pod) -> None:
    with _started("basic") as reg, RegistryFront(reg) as fr, BlobStorage(reg) as storage:
        push_image(reg, "org/private", "v1", _model())
        fr.state.storage = storage
        config_dir = pod.tmp / "docker"
        docker_config(str(config_dir), reg)
        _rekey(config_dir, reg.hostport, fr.hostport)
        run = pod.run(env=_env(fr, "org/private:v1", pod, DOCKER_CONFIG=str(config_dir)))
        assert run.returncode == 0, run
        _assert_model(pod.cache_dir)
        assert storage.authorized and not any(storage.authorized)
        assert all(s.authorized for s in fr.seen("GET", "/blobs/"))


def test_a_signed_redirect_that_expired_is_asked_for_again(pod: Pod) -> None:
    """The storage host answers 403 once (its signed URL expired): the
    agent asks the registry again, which redirects anew, and the layer
    completes."""
    with _started("anonymous") as reg, RegistryFront(reg) as fr, BlobStorage(reg) as storage:
        push_image(reg, "org/llama", "v1", _model())
        fr.state.storage = storage
        storage.expired = 1
        run = pod.run(env=_env(fr, "org/llama:v1", pod, LLMKUBE_FILES_IN_FLIGHT="1"))
        assert run.returncode == 0, run
        _assert_model(pod.cache_dir)
        assert len(storage.authorized) == 4


def _rekey(config_dir: Path, old: str, new: str) -> None:
    path = config_dir / "config.json"
    doc = json.loads(path.read_text())
    doc["auths"] = {new: doc["auths"][old]}
    path.write_text(json.dumps(doc))
