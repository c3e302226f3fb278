"""#34 item 4: every reader of a signed model, on a real FUSE mount
(bindfs). A prefetch Job stages the signed model through the mount; a
serving pod on the mount (which never writes there) serves it only when the
recorded verification fits its trust anchor, offline; `verify` checks the
record and the files against the signed digests; `plan` and `inspect` show
the signature's state. The backing directory (what the storage holds) is
left bit-for-bit identical by every reader.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness.disk import snapshot
from tests.harness.mounts import FuseCache
from tests.harness.origin import Origin
from tests.harness.pod import Pod, multi_env
from tests.harness.sample import payload
from tests.harness.signing import Signer

FILES = {"model.safetensors": payload(64 * 1024, 3), "config.json": b'{"model_type": "llama"}'}
KEY = "0123456789abcdef"
RECORD = ".llmkube-validators.signature"


def _staged(tmp_path: Path, origin: Origin, fuse_cache: FuseCache) -> tuple[Signer, dict[str, str]]:
    signer = Signer(tmp_path / "publisher")
    for rel, data in FILES.items():
        origin.put(f"/repo/{rel}", data)
    origin.put("/repo/model.sig", signer.sign(FILES))
    env = multi_env(origin.url + "/repo/", fuse_cache.mnt / KEY, FILES)
    job = Pod(tmp_path / "job", {**env, **signer.anchor_env}, stager=True)
    job.run().ok(files=len(FILES), fetched=len(FILES))
    assert (fuse_cache.backing / KEY / RECORD).is_file()
    origin.clear_log()
    return signer, env


def test_a_serving_pod_on_fuse_serves_the_verified_model_offline(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    signer, env = _staged(tmp_path, origin, fuse_cache)
    before = snapshot(fuse_cache.backing)

    serving = Pod(tmp_path / "serving", {**env, **signer.anchor_env})
    serving.run().ok(files=len(FILES), fetched=0, reused=len(FILES))
    verified = serving.run("verify")
    verified.ok()
    assert "signature: verified against anchor" in verified.stderr

    assert origin.requests() == []
    assert snapshot(fuse_cache.backing) == before


def test_a_serving_pod_on_fuse_refuses_a_record_of_another_anchor(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    _signer, env = _staged(tmp_path, origin, fuse_cache)
    before = snapshot(fuse_cache.backing)
    other = Signer(tmp_path / "other")

    serving = Pod(tmp_path / "serving", {**env, **other.anchor_env})
    run = serving.run()
    run.failed("ModelSignatureInvalid")
    assert "another trust anchor" in run.term["message"]
    reader = serving.run("verify")
    reader.failed("ModelSignatureInvalid")

    assert origin.requests() == []
    assert snapshot(fuse_cache.backing) == before


def test_a_serving_pod_on_fuse_refuses_a_model_never_verified(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    """Staged by a Job without an anchor: nothing says it was verified; a
    serving pod with an anchor refuses rather than trusting it, and never
    fetches the bundle itself (it may not write there)."""
    signer = Signer(tmp_path / "publisher")
    for rel, data in FILES.items():
        origin.put(f"/repo/{rel}", data)
    origin.put("/repo/model.sig", signer.sign(FILES))
    env = multi_env(origin.url + "/repo/", fuse_cache.mnt / KEY, FILES)
    Pod(tmp_path / "job", env, stager=True).run().ok(files=len(FILES), fetched=len(FILES))
    origin.clear_log()

    serving = Pod(tmp_path / "serving", {**env, **signer.anchor_env})
    run = serving.run()

    run.failed("ModelSignatureInvalid")
    assert "not verified against a signature" in run.term["message"]
    assert origin.requests() == []


def test_verify_checks_the_files_against_the_signed_digests(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    """A byte changed in the storage behind the cache's back (the size
    record still fits): `verify` with the anchor hashes against the signed
    digest and refuses."""
    signer, env = _staged(tmp_path, origin, fuse_cache)
    weights = fuse_cache.backing / KEY / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[100] ^= 0x01
    weights.write_bytes(bytes(data))

    reader = Pod(tmp_path / "reader", {**env, **signer.anchor_env}).run("verify")

    reader.failed("ModelSignatureInvalid")
    assert "model.safetensors" in reader.term["message"]
    # Without an anchor there is no digest to hold it to: the size fits.
    Pod(tmp_path / "plain", env).run("verify").ok()


def test_plan_and_inspect_show_the_signature_state(
    tmp_path: Path, origin: Origin, fuse_cache: FuseCache
) -> None:
    signer, env = _staged(tmp_path, origin, fuse_cache)
    pod = Pod(tmp_path / "viewer", {**env, **signer.anchor_env})

    doc = json.loads(pod.run("plan", "--json").stdout)
    assert doc["signature"]["state"] == "verified"
    assert doc["signature"]["signed_files"] == len(FILES)
    table = pod.run("plan").stdout
    assert "signature: verified against anchor" in table
    other = Signer(tmp_path / "other")
    refused = json.loads(pod.run("plan", "--json", env=other.anchor_env).stdout)
    assert refused["signature"]["state"] == "refused"
    unchecked = json.loads(
        pod.run("plan", "--json", LLMKUBE_SIGNING_KEY=None, LLMKUBE_SIGNING_CERTS=None).stdout
    )
    assert unchecked["signature"]["state"] == "unchecked"

    inspected = pod.run("inspect", str(fuse_cache.mnt / KEY), "--json")
    found = json.loads(inspected.stdout)["signatures"]
    assert [(s["record"], s["signed_files"]) for s in found] == [(RECORD, len(FILES))]
    text = pod.run("inspect", str(fuse_cache.mnt / KEY)).stdout
    assert "SIGNATURE: verified against anchor" in text
    assert RECORD not in [line.split()[0] for line in text.splitlines() if line.startswith("  ")]
    assert origin.requests() == []
