"""#33 item 5: gs:// through the image, as KServe's webhook runs its storage
initializer (`args: [<storageUri>, /mnt/models]`, uid 100, a read-only root
filesystem, no /tmp): the real gcp-storage-emulator behind the suite's
front, GKE Workload Identity from the suite's fake metadata server (both on
the host's loopback, which chroot isolation shares). Shows that the image
carries google-auth (the scheme's library is checked before any request)
and that a warm start asks nothing.

`make image-test` selects it (-m image); it needs the built image."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.gcs import GceMetadata, GcsEmulator, GcsFront, gcs_env, new_bucket
from tests.harness.image import KSERVE_MODELS_DIR, Container, ImagePod
from tests.harness.sample import payload

pytestmark = pytest.mark.image


def test_a_gs_prefix_with_workload_identity_cold_then_warm(
    container: Container, tmp_path: Path
) -> None:
    pod = ImagePod(container, tmp_path, models_at=KSERVE_MODELS_DIR)
    files = {"model.joblib": payload(3 << 20, seed=33), "meta/info.json": b"{}"}
    with GcsEmulator() as emulator, GcsFront(emulator) as front, GceMetadata() as metadata:
        bucket = new_bucket(emulator)
        for rel, data in files.items():
            emulator.put(bucket, f"sklearn/iris/{rel}", data)
        front.accept("never-issued")
        metadata.state.on_issue = lambda token: front.state.tokens.add(token)  # type: ignore[union-attr]
        uri = f"gs://{bucket}/sklearn/iris"

        cold = pod.run(uri, KSERVE_MODELS_DIR, env=gcs_env(front, metadata), tmp_writable=False)

        assert cold.returncode == 0, str(cold)
        assert cold.compact_term()["reason"] == "ModelTransferSucceeded"
        shown = {
            str(p.relative_to(pod.models)): p.read_bytes()
            for p in pod.models.rglob("*")
            if p.is_file() and not any(x.startswith(".") for x in p.relative_to(pod.models).parts)
        }
        assert shown == files
        (token,) = metadata.issued
        assert {r.bearer for r in front.requests()} == {token}
        asked = len(front.requests())

        warm = pod.run(uri, KSERVE_MODELS_DIR, env=gcs_env(front, metadata), tmp_writable=False)

        assert warm.returncode == 0, str(warm)
        assert len(front.requests()) == asked and len(metadata.issued) == 1
        assert pod.container.writes() == [], "the runs wrote into the image's root filesystem"
