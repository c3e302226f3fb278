"""#34 in KServe mode: a ClusterStorageContainer's `env` carries
LLMKUBE_SIGNING_KEY, and `SRC_URI DEST_DIR` applies the rule of `stage`: a
signed S3 prefix or Hugging Face repo is staged and exposed; a tampered one
exposes nothing in DEST_DIR (exit 4, ModelSignatureInvalid, the remedy in
KServe's words). An archive KServe unpacks is verified as the one file the
bundle signs (the archive object itself, its bundle beside it), before a
member is unpacked; a bundle that signs the unpacked tree is refused with
words saying so. Models signed by model-signing's own API
(tests/harness/signing.py), the real CLI, SeaweedFS, the fake hub with the
real huggingface_hub client, the loopback origin."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.archives import tar_built
from tests.harness.canary import HF_TOKEN
from tests.harness.hub import FakeHub
from tests.harness.origin import Origin
from tests.harness.pod import Pod, Run
from tests.harness.sample import KIB, payload
from tests.harness.seaweed import SeaweedS3, s3_env
from tests.harness.signing import Signer

pytestmark = pytest.mark.e2e

REASON = "ModelSignatureInvalid"
FILES = {
    "model.safetensors": payload(96 * KIB, 1),
    "config.json": b'{"model_type": "llama"}',
    "tokenizer/tokenizer.json": b'{"version": "1.0"}',
}
REPO = "org/signed-llm"


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    return Signer(tmp_path / "publisher")


def visible(dest: Path) -> dict[str, bytes]:
    """What the model server sees in DEST_DIR (the private dot directory aside)."""
    return {
        str(p.relative_to(dest)): p.read_bytes()
        for p in dest.rglob("*")
        if p.is_file() and not any(x.startswith(".") for x in p.relative_to(dest).parts)
    }


def _refused(run: Run, dest: Path, words: str) -> None:
    assert run.returncode == 4, str(run)
    doc = run.compact_term()
    assert doc["reason"] == REASON, doc
    assert doc["retryable"] is False
    assert words in str(doc["message"]), doc["message"]
    # KServe's words: no LLMKube field, no prefetch Job (kserve/words.py).
    for llmkube in ("MODEL_FILES", "spec.", "prefetch Job"):
        assert llmkube not in str(doc["remedy"]), doc["remedy"]
    assert {k: v for k, v in visible(dest).items() if k != "model.sig"} == {}


def _changed_byte(files: dict[str, bytes]) -> dict[str, bytes]:
    bad = bytearray(files["model.safetensors"])
    bad[len(bad) // 2] ^= 0x01
    return {**files, "model.safetensors": bytes(bad)}


# -- an S3 prefix -------------------------------------------------------------------------


def _s3_prefix(s3: SeaweedS3, bucket: str, files: dict[str, bytes], bundle: bytes) -> str:
    for rel, data in files.items():
        s3.put(bucket, f"signed/{rel}", data)
    s3.put(bucket, "signed/model.sig", bundle)
    return f"s3://{bucket}/signed"


def test_a_signed_s3_prefix_is_staged_and_exposed(
    pod: Pod, s3: SeaweedS3, bucket: str, signer: Signer
) -> None:
    uri = _s3_prefix(s3, bucket, FILES, signer.sign(FILES))
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(uri, str(dest), env={**s3_env(s3), **signer.anchor_env})

    assert run.returncode == 0, str(run)
    shown = visible(dest)
    assert {k: v for k, v in shown.items() if k != "model.sig"} == FILES
    assert "signature_verified" in run.stderr or "verifies against" in run.stderr


@pytest.mark.parametrize(
    ("tamper", "words"),
    [
        ("changed_byte", "does not have the sha256 its signature gives it"),
        ("added_object", "'backdoor.py' is staged but not signed"),
    ],
)
def test_a_tampered_s3_prefix_exposes_nothing(
    pod: Pod, s3: SeaweedS3, bucket: str, signer: Signer, tamper: str, words: str
) -> None:
    served = _changed_byte(FILES) if tamper == "changed_byte" else {**FILES, "backdoor.py": b"x"}
    uri = _s3_prefix(s3, bucket, served, signer.sign(FILES))
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(uri, str(dest), env={**s3_env(s3), **signer.anchor_env})

    _refused(run, dest, words)


def test_an_unsigned_s3_prefix_exposes_nothing(
    pod: Pod, s3: SeaweedS3, bucket: str, signer: Signer
) -> None:
    for rel, data in FILES.items():
        s3.put(bucket, f"plain/{rel}", data)
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"s3://{bucket}/plain", str(dest), env={**s3_env(s3), **signer.anchor_env})

    _refused(run, dest, "no signature bundle at")


# -- a Hugging Face repo ------------------------------------------------------------------


def test_a_signed_hf_repo_is_exposed_and_a_tampered_one_is_not(
    pod: Pod, hub: FakeHub, signer: Signer, tmp_path: Path
) -> None:
    hub.add_repo(REPO, {**FILES, "model.sig": signer.sign(FILES)})
    env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": HF_TOKEN, **signer.anchor_env}
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"hf://{REPO}", str(dest), env=env)

    assert run.returncode == 0, str(run)
    assert {k: v for k, v in visible(dest).items() if k != "model.sig"} == FILES

    # Another pod, the repo signed by an impostor.
    hub.add_repo("org/impostor", {**FILES, "model.sig": Signer(tmp_path / "x").sign(FILES)})
    other = pod.tmp / "mnt2" / "models"
    run = pod.run("hf://org/impostor", str(other), env=env)
    _refused(run, other, "does not verify against the key")


# -- an archive KServe unpacks ------------------------------------------------------------


def _tree(tar) -> None:  # type: ignore[no-untyped-def]
    from tests.harness.archives import add_member

    for rel, data in FILES.items():
        add_member(tar, rel, data, 0o644)


ARCHIVE = tar_built(_tree, "w:gz")


def test_a_signed_archive_is_verified_as_one_file_before_it_is_unpacked(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    origin.put("/a/m.tar.gz", ARCHIVE)
    origin.put("/a/model.sig", signer.sign({"m.tar.gz": ARCHIVE}))
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/a/m.tar.gz", str(dest), env=signer.anchor_env)

    assert run.returncode == 0, str(run)
    assert visible(dest) == FILES


def test_a_changed_archive_unpacks_nothing(pod: Pod, origin: Origin, signer: Signer) -> None:
    bad = bytearray(ARCHIVE)
    bad[len(bad) // 2] ^= 0x01
    origin.put("/a/m.tar.gz", bytes(bad))
    origin.put("/a/model.sig", signer.sign({"m.tar.gz": ARCHIVE}))
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/a/m.tar.gz", str(dest), env=signer.anchor_env)

    _refused(run, dest, "does not have the sha256 its signature gives it")
    assert not list((dest / ".llmkube-stager").glob("unpack.*"))


def test_a_bundle_of_the_unpacked_tree_is_refused_with_its_own_words(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    """The publisher signed the directory, not the archive: the agent does
    not verify members it has not yet unpacked (they would be published
    before their digests were checked)."""
    origin.put("/a/m.tar.gz", ARCHIVE)
    origin.put("/a/model.sig", signer.sign(FILES))
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/a/m.tar.gz", str(dest), env=signer.anchor_env)

    _refused(run, dest, "sign the archive file itself")


def test_a_signed_archive_alone_under_an_s3_prefix_is_unpacked(
    pod: Pod, s3: SeaweedS3, bucket: str, signer: Signer
) -> None:
    """KServe unpacks the one object of a prefix; model.sig beside it is
    the signature, not a second object of the model."""
    s3.put(bucket, "arch/m.tar.gz", ARCHIVE)
    s3.put(bucket, "arch/model.sig", signer.sign({"m.tar.gz": ARCHIVE}))
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"s3://{bucket}/arch", str(dest), env={**s3_env(s3), **signer.anchor_env})

    assert run.returncode == 0, str(run)
    assert visible(dest) == FILES


@pytest.mark.parametrize("where", ["http", "s3"])
def test_an_archive_signed_as_the_archive_file_is_unpacked(
    pod: Pod, origin: Origin, signer: Signer, where: str, request: pytest.FixtureRequest
) -> None:
    """`model_signing sign key m.tar.gz`: the statement's one resource is
    '.', the archive file's digest; checked on the archive before any
    member is unpacked (#40 item 4). The same bundle over other bytes
    unpacks nothing."""
    bundle = signer.sign_file("m.tar.gz", ARCHIVE)
    bad = bytearray(ARCHIVE)
    bad[len(bad) // 2] ^= 0x01
    dest = pod.tmp / "mnt" / "models"
    if where == "http":
        origin.put("/a/model.sig", bundle)

        def serve(data: bytes) -> tuple[str, dict[str, str]]:
            origin.put("/a/m.tar.gz", data)
            return f"{origin.url}/a/m.tar.gz", {}
    else:
        s3, bucket = request.getfixturevalue("s3"), request.getfixturevalue("bucket")
        s3.put(bucket, "arch/model.sig", bundle)

        def serve(data: bytes) -> tuple[str, dict[str, str]]:
            s3.put(bucket, "arch/m.tar.gz", data)
            return f"s3://{bucket}/arch", s3_env(s3)

    uri, env = serve(bytes(bad))
    run = pod.run(uri, str(dest), env={**env, **signer.anchor_env})
    _refused(run, dest, "does not have the sha256 its signature gives it")
    assert not list((dest / ".llmkube-stager").glob("unpack.*"))

    uri, env = serve(ARCHIVE)
    run = pod.run(uri, str(dest), env={**env, **signer.anchor_env})
    assert run.returncode == 0, str(run)
    assert visible(dest) == FILES
    warm = pod.run(uri, str(dest), env={**env, **signer.anchor_env})
    assert warm.returncode == 0, str(warm)
    assert visible(dest) == FILES
