"""#24 item 6: the image run exactly as KServe's webhook runs its storage
initializer: the entrypoint with `args: [<storageUri>, <emptyDir>]`, the
credential variables, uid 100, a read-only root filesystem and no /tmp,
the model volume, an emptyDir-like host directory at /mnt/models, the only
writable place. One case per URI form: an http(s) file,
an s3:// prefix, an hf:// repo, an archive.

`make image-test` selects these (-m image); they need the built image."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.archives import tar_of
from tests.harness.hub import FakeHub
from tests.harness.image import KSERVE_MODELS_DIR, UID, Container, ImagePod
from tests.harness.origin import Origin
from tests.harness.pod import Run
from tests.harness.sample import payload
from tests.harness.seaweed import SeaweedS3, kserve_s3_env

pytestmark = pytest.mark.image

DEST = KSERVE_MODELS_DIR
PRIVATE = ".llmkube-stager"


@pytest.fixture
def pod(container: Container, tmp_path: Path) -> ImagePod:
    """The image's pod with its model volume where KServe mounts it."""
    return ImagePod(container, tmp_path, models_at=KSERVE_MODELS_DIR)


def shown(pod: ImagePod) -> dict[str, bytes]:
    """What the model server's listing of the volume shows (no dot entries)."""
    return {
        str(p.relative_to(pod.models)): p.read_bytes()
        for p in pod.models.rglob("*")
        if p.is_file() and not any(x.startswith(".") for x in p.relative_to(pod.models).parts)
    }


def succeeded(run: Run) -> None:
    assert run.returncode == 0, str(run)
    doc = run.compact_term()
    assert doc["outcome"] == "succeeded" and doc["reason"] == "ModelTransferSucceeded", doc


def test_an_https_file_cold_then_warm(pod: ImagePod, origin: Origin) -> None:
    data = payload(2 << 20, seed=31)
    origin.put("/iris/model.joblib", data)
    uri = f"{origin.url}/iris/model.joblib"

    cold = pod.run(uri, DEST, tmp_writable=False)
    succeeded(cold)
    assert shown(pod) == {"model.joblib": data}
    assert (pod.models / "model.joblib").stat().st_uid == UID
    origin.clear_log()

    warm = pod.run(uri, DEST, tmp_writable=False)
    succeeded(warm)
    assert origin.requests() == [], "a warm start must not contact the origin"
    assert pod.container.writes() == [], "the runs wrote into the image's root filesystem"


def test_an_s3_prefix_with_kserves_variables(pod: ImagePod, s3: SeaweedS3, bucket: str) -> None:
    files = {"model.joblib": payload(300 << 10, seed=32), "meta/info.json": b"{}"}
    for rel, data in files.items():
        s3.put(bucket, f"sklearn/iris/{rel}", data)
    run = pod.run(f"s3://{bucket}/sklearn/iris/", DEST, env=kserve_s3_env(s3), tmp_writable=False)

    succeeded(run)
    assert shown(pod) == files
    assert pod.container.writes() == []


def test_an_hf_repo(pod: ImagePod, origin: Origin) -> None:
    files = {"config.json": b'{"model_type": "llama"}', "model.safetensors": payload(1 << 20, 33)}
    with FakeHub(origin) as hub:
        hub.add_repo("org/tiny", files)
        run = pod.run("hf://org/tiny", DEST, env={"HF_ENDPOINT": hub.url}, tmp_writable=False)
        assert hub.requests("api"), "the hub got no API request"
    succeeded(run)
    assert shown(pod) == files
    assert pod.container.writes() == []


def test_an_archive(pod: ImagePod, origin: Origin) -> None:
    data = payload(512 << 10, seed=34)
    origin.put("/tf/model.tar.gz", tar_of({"1/model.savedmodel/weights.bin": data}))

    run = pod.run(f"{origin.url}/tf/model.tar.gz", DEST, tmp_writable=False)

    succeeded(run)
    assert shown(pod) == {"1/model.savedmodel/weights.bin": data}
    assert sorted(p.name for p in pod.models.iterdir()) == sorted(["1", PRIVATE])
    assert pod.container.writes() == []


def test_an_azure_blob_prefix_with_kserves_variables(pod: ImagePod) -> None:
    """#33 item 2: KServe's Azure Blob URI, the account key in KServe's
    variable, Azurite on loopback (its endpoint by the connection string):
    no azure library is needed for a key, and none is written anywhere."""
    from tests.harness.azurite import ACCOUNT_KEY, Azurite, azurite_binary
    from tests.harness.features import missing_feature

    if azurite_binary() is None:
        missing_feature("Azurite is missing (tools/system-deps test installs npm azurite@3)")
    files = {"model.joblib": payload(300 << 10, seed=35), "meta/info.json": b"{}"}
    with Azurite() as az:
        az.service().create_container("models")
        for rel, data in files.items():
            az.service().get_blob_client("models", f"sklearn/iris/{rel}").upload_blob(data)
        env = {
            "AZURE_STORAGE_ACCESS_KEY": ACCOUNT_KEY,
            "AZURE_STORAGE_CONNECTION_STRING": az.connection_string(key=False),
        }
        run = pod.run(Azurite.source("models", "sklearn/iris"), DEST, env=env, tmp_writable=False)
        assert any("comp=list" in r.query for r in az.requests("GET"))

    succeeded(run)
    assert shown(pod) == files
    assert pod.container.writes() == []


def test_an_azure_blob_with_a_service_principal(pod: ImagePod, tmp_path: Path) -> None:
    """#33 item 2: azure-identity in the image, as KServe's Secret gives a
    service principal: its token from the suite's fake Entra ID over TLS
    (the CA at /custom-certs, its bundle under TMPDIR on the model volume,
    as the llmkube-stager-azure ClusterStorageContainer sets, no /tmp),
    checked by Azurite's OAuth."""
    from tests.harness.azurite import Azurite, azurite_binary
    from tests.harness.canary import canary
    from tests.harness.entra import CLIENT_ID, TENANT, FakeEntra
    from tests.harness.features import missing_feature
    from tests.harness.image import CA_DIR, Volume
    from tests.harness.tlsca import make_ca

    if azurite_binary() is None:
        missing_feature("Azurite is missing (tools/system-deps test installs npm azurite@3)")
    ca = make_ca(tmp_path / "ca")
    secret = canary("azsecret", 40)
    data = payload(200 << 10, seed=36)
    with Azurite(ca=ca) as az, FakeEntra(ca.server_context(), secret=secret, assertion="") as entra:
        az.service().create_container("models")
        az.service().get_blob_client("models", "llm/model.gguf").upload_blob(data)
        env = {
            "AZURE_CLIENT_ID": CLIENT_ID,
            "AZURE_TENANT_ID": TENANT,
            "AZURE_CLIENT_SECRET": secret,
            "AZURE_AUTHORITY_HOST": entra.authority,
            "AZURE_STORAGE_CONNECTION_STRING": az.connection_string(key=False),
            "TMPDIR": f"{DEST}/{PRIVATE}",
        }
        run = pod.run(
            Azurite.source("models", "llm"),
            DEST,
            env=env,
            tmp_writable=False,
            extra=[Volume(ca.ca_dir, CA_DIR, read_only=True)],
        )
        assert [i.grant for i in entra.issued] == ["secret"]

    succeeded(run)
    assert shown(pod) == {"model.gguf": data}
    assert secret not in run.stdout + run.stderr
    assert pod.container.writes() == []


def test_an_llminferenceservice_with_lora_adapters(
    container: Container, tmp_path: Path, origin: Origin, s3: SeaweedS3, bucket: str
) -> None:
    """#44 item 1: the image as an LLMInferenceService's overridden
    storage-initializer: its entrypoint (command unset) with the
    controller's args, the model at /mnt/models and each LoRA adapter at
    /mnt/lora/<name>, one emptyDir at /mnt, KServe's Hugging Face
    variables, no /tmp."""
    from tests.harness.kserve_pods import HF_DEFAULT_ENV, LORA_ROOT, MODELS

    pod = ImagePod(container, tmp_path, models_at="/mnt")
    base = {"config.json": b'{"model_type": "llama"}', "model.safetensors": payload(1 << 20, 36)}
    chat = {"adapter_config.json": b'{"r": 8}', "adapter_model.safetensors": payload(64 << 10, 37)}
    for rel, data in chat.items():
        s3.put(bucket, f"adapters/chat/{rel}", data)
    args = [
        "hf://org/base", MODELS,
        f"s3://{bucket}/adapters/chat", f"{LORA_ROOT}/chat",
    ]  # fmt: skip
    with FakeHub(origin) as hub:
        hub.add_repo("org/base", base)
        env = {"HF_ENDPOINT": hub.url, **HF_DEFAULT_ENV, **kserve_s3_env(s3)}
        run = pod.run(*args, env=env, tmp_writable=False)

    succeeded(run)
    assert sorted(p.name for p in pod.models.iterdir()) == ["lora", "models"]
    shown_of = {
        str(p.relative_to(pod.models)): p.read_bytes()
        for p in pod.models.rglob("*")
        if p.is_file() and not any(x.startswith(".") for x in p.relative_to(pod.models).parts)
    }
    assert shown_of == {
        **{f"models/{rel}": data for rel, data in base.items()},
        **{f"lora/chat/{rel}": data for rel, data in chat.items()},
    }
    assert pod.container.writes() == []


def test_an_llminferenceservice_tokenizer(pod: ImagePod, origin: Origin) -> None:
    """#44 item 1: the scheduler's tokenizer container: the allow patterns
    as the controller writes them; the weights never fetched."""
    from tests.harness.kserve_pods import TOKENIZER_ALLOW_PATTERNS, llmisvc_env

    files = {
        "tokenizer.json": b'{"t": 1}',
        "config.json": b"{}",
        "model.safetensors": payload(1 << 20, 38),
    }
    with FakeHub(origin) as hub:
        hub.add_repo("org/tok", files)
        env = {"HF_ENDPOINT": hub.url, **llmisvc_env("hf://org/tok", tokenizer=True)}
        assert env["STORAGE_ALLOW_PATTERNS"] == TOKENIZER_ALLOW_PATTERNS
        run = pod.run("hf://org/tok", DEST, env=env, tmp_writable=False)

    succeeded(run)
    assert shown(pod) == {"tokenizer.json": files["tokenizer.json"], "config.json": b"{}"}
    assert not [
        r for r in origin.requests() if hub.cdn_path_of("org/tok", "model.safetensors") in r.path
    ]


def test_a_local_model_cache_download_job(
    container: Container, tmp_path: Path, s3: SeaweedS3, bucket: str
) -> None:
    """#44 item 2: the image as the local model cache's download Job: the
    entrypoint with `[uri, /mnt/models]`, the PVC's models/<key> directory
    at /mnt/models, no /tmp. KServe launches a new Job when the folder
    exists but its status is not Downloaded: that one exits 0 without a GET."""
    from tests.harness.kserve_pods import MODELS

    files = {"config.json": b"{}", "model.safetensors": payload(512 << 10, 39)}
    for rel, data in files.items():
        s3.put(bucket, f"cache/llm/{rel}", data)
    pod = ImagePod(container, tmp_path, models_at=MODELS)
    uri = f"s3://{bucket}/cache/llm"

    first = pod.run(uri, MODELS, env=kserve_s3_env(s3), tmp_writable=False)
    succeeded(first)
    assert shown(pod) == files
    s3.clear()

    again = pod.run(uri, MODELS, env=kserve_s3_env(s3), tmp_writable=False)
    succeeded(again)
    assert again.compact_term()["stats"]["fetched"] == 0
    assert s3.requests() == [], "a warm start must not contact the origin"
    assert pod.container.writes() == []
