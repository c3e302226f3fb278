"""#40 item 1: a pre-staged model (pvc://, verified where the claim is
mounted) with a trust anchor set is verified against its bundle or
refused; never "verified" with the key unused. Bundles made by
model-signing's own signing API (tests/harness/signing.py); the claim's
mount is compared before and after (nothing is written on it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.disk import snapshot
from tests.harness.pod import Pod
from tests.harness.sample import payload
from tests.harness.signing import REASON, Signer, changed_byte

KIB = 1024


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    return Signer(tmp_path / "publisher")


def _claim(pod: Pod, files: dict[str, bytes], bundle: bytes | None) -> Path:
    """The claim mounted read-only: llama/model.gguf and, when signed, its
    model.sig beside it (as a publisher ships a signed file)."""
    mounted = pod.tmp / "model-source" / "llama"
    mounted.mkdir(parents=True)
    for rel, data in files.items():
        (mounted / rel).write_bytes(data)
    if bundle is not None:
        (mounted / "model.sig").write_bytes(bundle)
    return mounted / "model.gguf"


def _pvc_env(pod: Pod, mounted: Path, anchor: dict[str, str], **extra: str) -> dict[str, str]:
    return {
        **pod.env,
        "MODEL_SOURCE": "pvc://models-claim/llama/model.gguf",
        "MODEL_PATH": str(mounted),
        **anchor,
        **extra,
    }


def _refused(pod: Pod, run_env: dict[str, str], mounted: Path, words: str) -> None:
    before = snapshot(mounted.parent)
    run = pod.run(env=run_env)
    doc = run.failed(REASON).term
    assert run.returncode == 4
    assert words in str(doc["message"]), doc["message"]
    assert "Pre-staged model" not in run.stderr  # never said "verified"
    assert snapshot(mounted.parent) == before


def test_a_signed_pvc_model_is_verified_against_its_bundle(pod: Pod, signer: Signer) -> None:
    files = {"model.gguf": payload(40 * KIB, 3)}
    mounted = _claim(pod, files, signer.sign(files))
    before = snapshot(mounted.parent)

    run = pod.run(env=_pvc_env(pod, mounted, signer.anchor_env))

    run.ok(files=1, fetched=0, reused=1)
    assert run.has_line("verifies against the trust anchor")
    assert snapshot(mounted.parent) == before  # no record, stamp or lock on the claim


def test_an_unsigned_pvc_model_is_refused_not_verified(pod: Pod, signer: Signer) -> None:
    mounted = _claim(pod, {"model.gguf": payload(40 * KIB, 3)}, None)

    _refused(pod, _pvc_env(pod, mounted, signer.anchor_env), mounted, "no signature bundle")


def test_a_changed_byte_in_a_signed_pvc_model_is_refused(pod: Pod, signer: Signer) -> None:
    files = {"model.gguf": payload(40 * KIB, 3)}
    bad = changed_byte({"model-00002-of-00002.safetensors": files["model.gguf"]})
    mounted = _claim(
        pod, {"model.gguf": bad["model-00002-of-00002.safetensors"]}, signer.sign(files)
    )

    _refused(
        pod,
        _pvc_env(pod, mounted, signer.anchor_env),
        mounted,
        "does not have the sha256 its signature gives it",
    )


def test_a_pvc_model_signed_by_another_key_is_refused(
    pod: Pod, signer: Signer, tmp_path: Path
) -> None:
    files = {"model.gguf": payload(40 * KIB, 3)}
    other = Signer(tmp_path / "other")
    mounted = _claim(pod, files, other.sign(files))

    _refused(
        pod, _pvc_env(pod, mounted, signer.anchor_env), mounted, "does not verify against the key"
    )


def test_a_pvc_bundle_by_absolute_path(pod: Pod, signer: Signer, tmp_path: Path) -> None:
    files = {"model.gguf": payload(40 * KIB, 3)}
    mounted = _claim(pod, files, None)
    secret = tmp_path / "secret" / "model.sig"
    secret.parent.mkdir()
    secret.write_bytes(signer.sign(files))

    run = pod.run(env=_pvc_env(pod, mounted, signer.anchor_env, LLMKUBE_SIGNATURE=str(secret)))

    run.ok(files=1, fetched=0, reused=1)


# -- a local model staged before the key was set --------------------------------------------


def _local(root: Path, files: dict[str, bytes], bundle: bytes | None) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    if bundle is not None:
        (root / "model.sig").write_bytes(bundle)
    return root


def test_a_local_model_staged_without_a_key_is_refused_once_a_key_is_set(
    pod: Pod, signer: Signer, tmp_path: Path
) -> None:
    files = {"model.gguf": payload(40 * KIB, 3)}
    model = _local(tmp_path / "src", files, None)
    pod.run(env=pod.single_env(str(model / "model.gguf"))).ok(files=1, fetched=1)

    run = pod.run(env=pod.single_env(str(model / "model.gguf"), **signer.anchor_env))

    doc = run.failed(REASON).term
    assert "no signature bundle" in str(doc["message"])


def test_a_prestaged_local_file_changed_in_the_cache_is_never_served(
    pod: Pod, signer: Signer, tmp_path: Path
) -> None:
    files = {"model.gguf": payload(40 * KIB, 3)}
    model = _local(tmp_path / "src", files, signer.sign(files))
    env = pod.single_env(str(model / "model.gguf"))
    pod.run(env=env).ok(files=1, fetched=1)
    # Another writer of the cache changes a byte in place (size kept).
    bad = bytearray(files["model.gguf"])
    bad[100] ^= 0x01
    with pod.dest().open("r+b") as f:
        f.seek(100)
        f.write(bytes(bad[100:101]))

    run = pod.run(env={**env, **signer.anchor_env})

    if run.returncode == 0:
        assert pod.dest().read_bytes() == files["model.gguf"]
    else:
        assert run.failed(REASON).term
