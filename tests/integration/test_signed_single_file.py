"""#40 item 4: a single file signed as a file (`model_signing sign key
m.gguf` names the one resource `.`) is accepted for a single-file source;
a directory's files are never judged by such a bundle. Bundles made by
model-signing's own signing API, given the file itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload
from tests.harness.signing import FILES, REASON, Signer, refused

KIB = 1024


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    return Signer(tmp_path / "publisher")


def test_a_single_file_signed_as_a_file_is_published(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    data = payload(40 * KIB, 8)
    origin.put("/files/llama.gguf", data)
    origin.put("/files/model.sig", signer.sign_file("llama.gguf", data))
    env = pod.single_env(origin.url + "/files/llama.gguf", **signer.anchor_env)

    pod.run(env=env).ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    pod.run(env=env).ok(files=1, fetched=0, reused=1)


def test_a_single_file_signed_as_a_file_with_other_bytes_is_refused(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    data = payload(40 * KIB, 8)
    origin.put("/files/llama.gguf", data)
    other = payload(40 * KIB, 9)
    origin.put("/files/model.sig", signer.sign_file("llama.gguf", other))
    env = pod.single_env(origin.url + "/files/llama.gguf", **signer.anchor_env)

    refused(pod.run(env=env), pod.cache_dir, ["model.gguf"], "does not have the sha256")


def test_a_directory_is_never_judged_by_a_bundle_of_one_file(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    for rel, data in FILES.items():
        origin.put(f"/org/repo/{rel}", data)
    rel = "config.json"
    origin.put("/org/repo/model.sig", signer.sign_file(rel, FILES[rel]))
    pod.multi(origin.url + "/org/repo/", FILES)

    run = pod.run(env=signer.anchor_env)

    run.failed(REASON)
    assert run.returncode == 4
