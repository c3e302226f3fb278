"""#34 item 5: the image carries model-signing and what it imports
(pyOpenSSL, which 1.1.1 does not declare): a signed model verifies inside
the image, as its user on a read-only root; a tampered one is refused
there with exit 4 and nothing published; the warm start checks its record
offline."""

from __future__ import annotations

import pytest

from tests.harness.image import ImagePod
from tests.harness.origin import Origin
from tests.harness.sample import payload
from tests.harness.signing import Signer

pytestmark = pytest.mark.image

FILES = {"model.safetensors": payload(256 * 1024, 4), "config.json": b'{"model_type": "llama"}'}


def test_a_signed_model_in_the_image(pod: ImagePod, origin: Origin) -> None:
    signer = Signer(pod.tmp.parent / "publisher", certs=True)
    for rel, data in FILES.items():
        origin.put(f"/signed/{rel}", data)
    origin.put("/signed/model.sig", signer.sign(FILES))
    cache_dir = pod.multi(origin.url + "/signed/", FILES)

    pod.run(env=signer.anchor_env).ok(files=len(FILES), fetched=len(FILES))
    for rel, data in FILES.items():
        assert (cache_dir / rel).read_bytes() == data, rel
    assert (cache_dir / ".llmkube-validators.signature").is_file()  # verified, recorded
    origin.clear_log()
    pod.run(env=signer.anchor_env).ok(files=len(FILES), fetched=0, reused=len(FILES))
    assert origin.requests() == []


def test_a_tampered_model_is_refused_in_the_image(pod: ImagePod, origin: Origin) -> None:
    signer = Signer(pod.tmp.parent / "publisher")
    for rel, data in FILES.items():
        origin.put(f"/tampered/{rel}", data)
    origin.put("/tampered/model.sig", signer.sign(FILES))
    origin.put("/tampered/model.safetensors", FILES["model.safetensors"][:-1] + b"\x00")
    cache_dir = pod.multi(origin.url + "/tampered/", FILES)

    run = pod.run(env=signer.anchor_env)

    run.failed("ModelSignatureInvalid")
    assert run.returncode == 4
    for rel in FILES:
        assert not (cache_dir / rel).exists(), rel
