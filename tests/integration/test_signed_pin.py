"""#40 item 7: rollback and replay. model-signing proves who signed a
statement, not which one: an older version the same key signed, or another
model it signed, verifies. LLMKUBE_SIGNED_DIGEST pins the signed statement
(the sha256 of the DSSE payload); with it set, every other statement is
refused: from the source (before anything is published), and from a cache
another writer rolled back (files, stamps, record and kept bundle of an
older version, all consistent), offline by a reader, by `verify`, and by a
writer which verifies the source again. Bundles by model-signing's own API.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.harness.origin import Origin
from tests.harness.pod import Pod, as_fuse
from tests.harness.signing import (
    FILES,
    REASON,
    RECORD,
    Signer,
    changed_byte,
    refused,
    statement_sha256,
)

PATH = "/org/repo"
OLD = changed_byte(FILES)  # the version before: one shard differs
OTHER = {"model.safetensors": b"another model the same key signed", "config.json": b"{}"}


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    return Signer(tmp_path / "publisher")


def _serve(origin: Origin, path: str, files: dict[str, bytes], bundle: bytes) -> str:
    for rel, data in files.items():
        origin.put(f"{path}/{rel}", data)
    origin.put(f"{path}/model.sig", bundle)
    return origin.url + path + "/"


def test_the_pinned_statement_is_published_and_shown_by_plan_and_inspect(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    bundle = signer.sign(FILES)
    pin = statement_sha256(bundle)
    cache_dir = pod.multi(_serve(origin, PATH, FILES, bundle), FILES)
    env = {**signer.anchor_env, "LLMKUBE_SIGNED_DIGEST": pin}

    pod.run(env=env).ok(files=len(FILES), fetched=len(FILES))
    origin.clear_log()
    pod.run(env=env).ok(files=len(FILES), fetched=0, reused=len(FILES))
    assert origin.requests() == []

    plan = json.loads(pod.run("plan", "--json", env=env).stdout)["signature"]
    assert plan["state"] == "verified", plan
    assert plan["signed_digest"] == pin
    assert pin[:16] in pod.run("plan", env=env).stdout
    shown = json.loads(pod.run("inspect", str(cache_dir), "--json").stdout)["signatures"]
    assert [s["statement_sha256"] for s in shown] == [pin]
    assert pod.run("verify", env=env).returncode == 0


@pytest.mark.parametrize("served", ["older_version", "other_model"])
def test_another_statement_of_the_same_key_is_refused_with_the_pin(
    pod: Pod, origin: Origin, signer: Signer, served: str
) -> None:
    pin = statement_sha256(signer.sign(FILES))
    files = OLD if served == "older_version" else OTHER
    base = _serve(origin, PATH, files, signer.sign(files))
    cache_dir = pod.multi(base, files)

    # Without the pin it verifies: the attack.
    other = Pod(pod.tmp / "unpinned")
    other.multi(base, files)
    other.run(env=signer.anchor_env).ok(files=len(files), fetched=len(files))

    run = pod.run(env={**signer.anchor_env, "LLMKUBE_SIGNED_DIGEST": pin})

    doc = refused(run, cache_dir, sorted(files), "LLMKUBE_SIGNED_DIGEST")
    assert pin[:16] in str(doc["message"])


def test_a_cache_rolled_back_by_another_writer_is_never_served_with_the_pin(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    """Another pod with write access copies an older version's whole
    directory (files, stamps, record, kept bundle: each consistent with the
    others, all signed by the key) over the pinned one."""
    older = Pod(pod.tmp / "older")  # the older version, staged when it was current
    old_dir = older.multi(_serve(origin, PATH, OLD, signer.sign(OLD)), OLD)
    older.run(env=signer.anchor_env).ok(files=len(OLD), fetched=len(OLD))
    bundle = signer.sign(FILES)
    pin = statement_sha256(bundle)
    env = {**signer.anchor_env, "LLMKUBE_SIGNED_DIGEST": pin}
    cache_dir = pod.multi(_serve(origin, PATH, FILES, bundle), FILES)
    pod.run(env=env).ok(files=len(FILES), fetched=len(FILES))
    shutil.copytree(old_dir, cache_dir, dirs_exist_ok=True)
    # Without the pin the rolled-back cache is served: the attack.
    assert pod.run(env=signer.anchor_env).ok(files=len(FILES), fetched=0, reused=len(FILES))
    origin.clear_log()

    reader = pod.stage(env, fs=as_fuse)
    reader.failed(REASON)
    assert "LLMKUBE_SIGNED_DIGEST" in str(reader.term["message"]), reader.term
    assert origin.requests() == []
    check = pod.run("verify", env=env)
    assert check.returncode == 4, check

    writer = pod.run(env=env)
    writer.ok(files=len(FILES), fetched=1, reused=len(FILES) - 1)  # the rolled-back shard
    for rel, data in FILES.items():
        assert (cache_dir / rel).read_bytes() == data, rel
    assert statement_sha256((cache_dir / (RECORD + ".bundle")).read_bytes()) == pin


@pytest.mark.parametrize("value", ["abc", "sha256:" + "g" * 64])
def test_a_malformed_pin_is_a_configuration_error(
    pod: Pod, origin: Origin, signer: Signer, value: str
) -> None:
    pod.multi(_serve(origin, PATH, FILES, signer.sign(FILES)), FILES)

    run = pod.run(env={**signer.anchor_env, "LLMKUBE_SIGNED_DIGEST": value})

    doc = run.failed("InvalidConfiguration").term
    assert run.returncode == 2
    assert "LLMKUBE_SIGNED_DIGEST" in str(doc["message"])
    assert origin.requests() == []


def test_a_pin_without_an_anchor_is_a_configuration_error(pod: Pod, origin: Origin) -> None:
    pod.multi(_serve(origin, PATH, FILES, b"{}"), FILES)

    run = pod.run(LLMKUBE_SIGNED_DIGEST="0" * 64)

    assert run.returncode == 2
    assert "LLMKUBE_SIGNED_DIGEST" in str(run.failed("InvalidConfiguration").term["message"])
    assert origin.requests() == []
