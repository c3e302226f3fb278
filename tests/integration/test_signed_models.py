"""#34: signed models. Models signed by model-signing's own API with keys
and certificate chains made by the test (tests/harness/signing.py), staged
through every source (a loopback origin, the fake hub with the real
huggingface_hub client, SeaweedFS, a local directory), then tampered with:
a changed byte, an added file, a removed file, a renamed file, a bundle of
another key, a bundle of another model, a truncated bundle, no bundle.
None is ever published (no model file on disk, exit 4, reason
ModelSignatureInvalid), every untampered one is; a warm start checks its
record offline, and a changed key or bundle is refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.harness.hub import FakeHub
from tests.harness.origin import Origin
from tests.harness.pod import Pod, import_lines
from tests.harness.sample import payload
from tests.harness.seaweed import s3_env
from tests.harness.signing import (
    FILES,
    REASON,
    RECORD,
    Signer,
    changed_byte,
    nothing_published,
    refused,
)

KIB = 1024
REPO = "org/repo"
PATH = "/" + REPO


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    return Signer(tmp_path / "publisher")


@pytest.fixture
def cert_signer(tmp_path: Path) -> Signer:
    return Signer(tmp_path / "publisher-ca", certs=True)


def _http_model(origin: Origin, files: dict[str, bytes], bundle: bytes | None) -> str:
    for rel, data in files.items():
        origin.put(f"{PATH}/{rel}", data)
    if bundle is not None:
        origin.put(f"{PATH}/model.sig", bundle)
    return origin.url + PATH + "/"


# -- http: untampered, then every tamper -------------------------------------------------


def test_signed_http_model_is_published_and_its_warm_start_is_offline(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    base = _http_model(origin, FILES, signer.sign(FILES))
    cache_dir = pod.multi(base, FILES)

    cold = pod.run(env=signer.anchor_env)

    cold.ok(files=len(FILES), fetched=len(FILES))
    for rel, data in FILES.items():
        assert (cache_dir / rel).read_bytes() == data, rel
    record = json.loads((cache_dir / RECORD).read_text())
    assert sorted(record["files"]) == sorted(FILES)
    assert record["method"] == "files"
    assert record["signature"] == base + "model.sig"
    # Each file was read once, its digest taken while it was received.
    for rel in FILES:
        assert len(origin.requests(f"{PATH}/{rel}", "GET")) == 1, rel

    origin.clear_log()
    warm = pod.run(env=signer.anchor_env, python_flags=("-X", "importtime"))
    warm.ok(files=len(FILES), fetched=0, reused=len(FILES))
    assert origin.requests() == [], "a warm start with a record must not contact the origin"
    loaded = import_lines(warm.stderr)
    assert len(loaded) > 20  # the importtime output was captured
    assert not {m for m in loaded if m.startswith(("model_signing", "sigstore", "OpenSSL"))}
    # #40 item 3's budget: one ECDSA verify, without cryptography's OpenSSL
    # backend (~12 ms) that ec.ECDSA's constructor imports.
    assert not {m for m in loaded if m.startswith("cryptography.hazmat.backends")}


def test_a_warm_start_with_another_key_is_refused_offline(
    pod: Pod, origin: Origin, signer: Signer, tmp_path: Path
) -> None:
    base = _http_model(origin, FILES, signer.sign(FILES))
    cache_dir = pod.multi(base, FILES)
    pod.run(env=signer.anchor_env).ok(files=len(FILES), fetched=len(FILES))
    origin.clear_log()

    other = Signer(tmp_path / "other")
    run = pod.run(env=other.anchor_env)

    doc = run.failed(REASON).term
    assert run.returncode == 4
    assert "another trust anchor" in str(doc["message"])
    assert origin.requests() == []
    # What was served before is not removed: it may be serving elsewhere.
    assert (cache_dir / "config.json").read_bytes() == FILES["config.json"]


def test_without_an_anchor_nothing_of_model_signing_is_imported(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    base = _http_model(origin, FILES, signer.sign(FILES))
    pod.multi(base, FILES)
    cold = pod.run(python_flags=("-X", "importtime"))
    cold.ok(files=len(FILES), fetched=len(FILES))
    loaded = import_lines(cold.stderr)
    assert len(loaded) > 20
    assert not {m for m in loaded if m.startswith(("model_signing", "sigstore", "OpenSSL"))}
    assert origin.requests(f"{PATH}/model.sig") == []
    warm = pod.run(python_flags=("-X", "importtime"))
    warm.ok(files=len(FILES), fetched=0, reused=len(FILES))
    ours = (
        "llmkube_stager.staging.signed",
        "llmkube_stager.staging.bundle",
        "llmkube_stager.cache.sigrecord",
    )
    assert not {m for m in import_lines(warm.stderr) if m.startswith(("model_signing", *ours))}
    # The check can fail: with an anchor, the cold start does import it.
    signed = pod.run(
        env=signer.anchor_env,
        python_flags=("-X", "importtime"),
        LLMKUBE_REFRESH_POLICY="OnChange",
    )
    signed.ok()
    assert "model_signing" in import_lines(signed.stderr)


TAMPERS: dict[str, tuple[Callable[[dict[str, bytes]], dict[str, bytes]], str]] = {
    # (the files the origin serves and MODEL_FILES lists, what the refusal says)
    "changed_byte": (changed_byte, "does not have the sha256 its signature gives it"),
    "added_file": (lambda f: {**f, "extra.bin": b"not signed"}, "staged but not signed"),
    "removed_file": (
        lambda f: {k: v for k, v in f.items() if k != "config.json"},
        "signed but not staged",
    ),
    "renamed_file": (
        lambda f: {("config2.json" if k == "config.json" else k): v for k, v in f.items()},
        "staged but not signed",
    ),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_a_tampered_http_model_is_never_published(
    pod: Pod, origin: Origin, signer: Signer, tamper: str
) -> None:
    change, words = TAMPERS[tamper]
    bundle = signer.sign(FILES)
    served = change(FILES)
    base = _http_model(origin, served, bundle)
    cache_dir = pod.multi(base, served)

    run = pod.run(env=signer.anchor_env)

    refused(run, cache_dir, sorted(set(FILES) | set(served)), words)


def _other_key(signer: Signer, tmp: Path) -> bytes:
    return Signer(tmp / "impostor").sign(FILES)


def _other_model(signer: Signer, tmp: Path) -> bytes:
    return signer.sign({"other.safetensors": payload(10 * KIB, 9)})


def _truncated(signer: Signer, tmp: Path) -> bytes:
    bundle = signer.sign(FILES)
    return bundle[: len(bundle) // 2]


def _sharded(signer: Signer, tmp: Path) -> bytes:
    return signer.sign_sharded(FILES)


def _blake2(signer: Signer, tmp: Path) -> bytes:
    import model_signing

    hashing = model_signing.hashing.Config().use_file_serialization(hashing_algorithm="blake2")
    return signer.sign_hashed(FILES, hashing)


BUNDLES: dict[str, tuple[Callable[[Signer, Path], bytes], str]] = {
    "blake2": (_blake2, "hashed with blake2"),
    "other_key": (_other_key, "does not verify against the key"),
    "other_model": (_other_model, "staged but not signed"),
    "truncated": (_truncated, "not a model-signing bundle"),
    "sharded": (_sharded, "per-file serialization"),
}


@pytest.mark.parametrize("bundle_kind", sorted(BUNDLES))
def test_a_wrong_bundle_is_never_published(
    pod: Pod, origin: Origin, signer: Signer, tmp_path: Path, bundle_kind: str
) -> None:
    make, words = BUNDLES[bundle_kind]
    base = _http_model(origin, FILES, make(signer, tmp_path))
    cache_dir = pod.multi(base, FILES)

    run = pod.run(env=signer.anchor_env)

    refused(run, cache_dir, sorted(FILES), words)
    # Refused before any file of the model was asked for.
    for rel in FILES:
        assert origin.requests(f"{PATH}/{rel}", "GET") == [], rel


def test_an_unsigned_model_is_never_published(pod: Pod, origin: Origin, signer: Signer) -> None:
    base = _http_model(origin, FILES, None)
    cache_dir = pod.multi(base, FILES)

    run = pod.run(env=signer.anchor_env)

    doc = refused(run, cache_dir, sorted(FILES), "no signature bundle at")
    assert "sign the model with model-signing" in str(doc["remedy"])


def test_a_pin_that_disagrees_with_the_signature_is_refused(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    base = _http_model(origin, FILES, signer.sign(FILES))
    cache_dir = pod.multi(base, FILES)
    pins = f"{'0' * 64} config.json"

    run = pod.run(env={**signer.anchor_env, "MODEL_FILE_SHA256": pins})

    refused(run, cache_dir, sorted(FILES), "disagree")


# -- certificate chains -----------------------------------------------------------------


def test_a_model_signed_under_a_trusted_ca_is_published(
    pod: Pod, origin: Origin, cert_signer: Signer
) -> None:
    base = _http_model(origin, FILES, cert_signer.sign(FILES))
    cache_dir = pod.multi(base, FILES)

    pod.run(env=cert_signer.anchor_env).ok(files=len(FILES), fetched=len(FILES))

    for rel, data in FILES.items():
        assert (cache_dir / rel).read_bytes() == data, rel
    assert json.loads((cache_dir / RECORD).read_text())["method"] == "files"


def test_a_model_signed_under_another_ca_is_never_published(
    pod: Pod, origin: Origin, cert_signer: Signer, tmp_path: Path
) -> None:
    other = Signer(tmp_path / "other-ca", certs=True)
    base = _http_model(origin, FILES, other.sign(FILES))
    cache_dir = pod.multi(base, FILES)

    run = pod.run(env=cert_signer.anchor_env)

    refused(run, cache_dir, sorted(FILES), "certificate chain of LLMKUBE_SIGNING_CERTS")


def test_a_changed_byte_under_a_certificate_chain_is_never_published(
    pod: Pod, origin: Origin, cert_signer: Signer
) -> None:
    served = changed_byte(FILES)
    base = _http_model(origin, served, cert_signer.sign(FILES))
    cache_dir = pod.multi(base, served)

    run = pod.run(env=cert_signer.anchor_env)

    refused(run, cache_dir, sorted(FILES), "does not have the sha256")


# -- Hugging Face ------------------------------------------------------------------------


def _hf_env(pod: Pod, hub: FakeHub, anchor: dict[str, str]) -> dict[str, str]:
    return pod.multi_env(f"hf://{REPO}@main", FILES, HF_ENDPOINT=hub.url, **anchor)


def test_a_signed_hf_model_is_published(pod: Pod, hub: FakeHub, signer: Signer) -> None:
    hub.add_repo(REPO, {**FILES, "model.sig": signer.sign(FILES)})

    pod.run(env=_hf_env(pod, hub, signer.anchor_env)).ok(files=len(FILES), fetched=len(FILES))

    for rel, data in FILES.items():
        assert pod.dest(rel).read_bytes() == data, rel
    assert (pod.cache_dir / RECORD).is_file()


def test_an_hf_file_whose_lfs_digest_is_not_the_signed_one_is_never_fetched(
    pod: Pod, hub: FakeHub, cdn: Origin, signer: Signer
) -> None:
    """A new commit changed a shard; the bundle is the old one: the LFS
    sha256 the hub lists and the signature disagree (#34 item 2)."""
    hub.add_repo(REPO, {**changed_byte(FILES), "model.sig": signer.sign(FILES)})

    run = pod.run(env=_hf_env(pod, hub, signer.anchor_env))

    refused(run, pod.cache_dir, sorted(FILES), "its signature")
    changed = hub.cdn_path_of(REPO, "model-00002-of-00002.safetensors")
    assert [r for r in cdn.requests(method="GET") if r.path.split("?")[0] == changed] == []


# -- S3 ----------------------------------------------------------------------------------


def _s3_model(s3, bucket: str, files: dict[str, bytes], bundle: bytes) -> str:  # type: ignore[no-untyped-def]
    for rel, data in files.items():
        s3.put(bucket, f"signed/{rel}", data)
    s3.put(bucket, "signed/model.sig", bundle)
    return f"s3://{bucket}/signed"


def test_a_signed_s3_model_is_published(pod: Pod, s3, bucket: str, signer: Signer) -> None:  # type: ignore[no-untyped-def]
    source = _s3_model(s3, bucket, FILES, signer.sign(FILES))
    env = pod.multi_env(source, FILES, **s3_env(s3), **signer.anchor_env)

    pod.run(env=env).ok(files=len(FILES), fetched=len(FILES))

    for rel, data in FILES.items():
        assert pod.dest(rel).read_bytes() == data, rel
    assert (pod.cache_dir / RECORD).is_file()


def test_a_changed_byte_on_s3_is_never_published(  # type: ignore[no-untyped-def]
    pod: Pod, s3, bucket: str, signer: Signer
) -> None:
    source = _s3_model(s3, bucket, changed_byte(FILES), signer.sign(FILES))
    env = pod.multi_env(source, FILES, **s3_env(s3), **signer.anchor_env)

    run = pod.run(env=env)

    refused(run, pod.cache_dir, sorted(FILES), "does not have the sha256")


# -- a local directory -------------------------------------------------------------------


def _local_model(root: Path, files: dict[str, bytes], bundle: bytes) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "model.sig").write_bytes(bundle)
    return root


def test_a_signed_local_model_and_its_changed_bundle_on_a_warm_start(
    pod: Pod, signer: Signer, tmp_path: Path
) -> None:
    model = _local_model(tmp_path / "src", FILES, signer.sign(FILES))
    env = pod.multi_env(str(model), FILES, **signer.anchor_env)

    pod.run(env=env).ok(files=len(FILES), fetched=len(FILES))
    pod.run(env=env).ok(files=len(FILES), fetched=0, reused=len(FILES))
    for rel, data in FILES.items():
        assert pod.dest(rel).read_bytes() == data, rel
    assert (pod.cache_dir / RECORD).is_file()

    # The publisher signs again (the same files, a new bundle): a warm
    # start sees the bundle changed since its verification and refuses.
    (model / "model.sig").write_bytes(signer.sign(FILES))
    run = pod.run(env=env)
    doc = run.failed(REASON).term
    assert "changed since the model was verified" in str(doc["message"])


def test_a_changed_byte_in_a_local_model_is_never_published(
    pod: Pod, signer: Signer, tmp_path: Path
) -> None:
    model = _local_model(tmp_path / "src", changed_byte(FILES), signer.sign(FILES))
    env = pod.multi_env(str(model), FILES, **signer.anchor_env)

    run = pod.run(env=env)

    refused(run, pod.cache_dir, sorted(FILES), "does not have the sha256")


def test_a_bundle_by_absolute_path_signs_a_single_file(
    pod: Pod, origin: Origin, signer: Signer, tmp_path: Path
) -> None:
    data = payload(48 * KIB, 5)
    origin.put("/single/model.gguf", data)
    bundle = tmp_path / "mounted" / "model.sig"
    bundle.parent.mkdir()
    bundle.write_bytes(signer.sign({"model.gguf": data}))
    env = pod.single_env(
        origin.url + "/single/model.gguf", **signer.anchor_env, LLMKUBE_SIGNATURE=str(bundle)
    )

    pod.run(env=env).ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data

    origin.put("/single/model.gguf", data[:-1] + b"\x00")
    pod.dest().unlink()
    run = pod.run(env=env)
    refused(run, pod.cache_dir, ["model.gguf"], "does not have the sha256")


def test_a_listed_s3_prefix_is_the_signed_set_or_nothing(  # type: ignore[no-untyped-def]
    pod: Pod, s3, bucket: str, signer: Signer
) -> None:
    """Without MODEL_FILES the listing is the staged set; the bundle in it
    is not a file of the model (model-signing's own rule)."""
    source = _s3_model(s3, bucket, FILES, signer.sign(FILES))
    env = {**pod.env, "MODEL_SOURCE": source, "CACHE_DIR": str(pod.cache_dir)}
    env.update(s3_env(s3), **signer.anchor_env)

    pod.run(env=env).ok()
    for rel, data in FILES.items():
        assert pod.dest(rel).read_bytes() == data, rel
    assert sorted(json.loads((pod.cache_dir / RECORD).read_text())["files"]) == sorted(FILES)

    # An object added under the prefix: the listing is no longer the signed set.
    other = Pod(pod.tmp / "second-node")
    s3.put(bucket, "signed/backdoor.py", b"import os")
    env2 = {**other.env, "MODEL_SOURCE": source, "CACHE_DIR": str(other.cache_dir)}
    env2.update(s3_env(s3), **signer.anchor_env)
    run = other.run(env=env2)
    words = "'backdoor.py' is staged but not signed"
    refused(run, other.cache_dir, [*FILES, "backdoor.py"], words)


# -- where the bundle is -----------------------------------------------------------------


def test_a_single_hf_file_finds_model_sig_at_the_repo_root(
    pod: Pod, hub: FakeHub, signer: Signer
) -> None:
    data = payload(40 * KIB, 7)
    hub.add_repo(REPO, {"gguf/model-Q4.gguf": data, "model.sig": signer.sign({"m.gguf": data})})
    env = pod.single_env(
        f"hf://{REPO}/gguf/model-Q4.gguf", name="model-Q4.gguf", HF_ENDPOINT=hub.url
    )

    pod.run(env={**env, **signer.anchor_env}).ok(files=1, fetched=1)

    assert pod.dest("model-Q4.gguf").read_bytes() == data
    assert any(r.path.endswith("/model.sig") for r in hub.requests("resolve"))


def test_a_single_http_file_finds_model_sig_beside_it(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    data = payload(40 * KIB, 8)
    origin.put("/files/llama.gguf", data)
    origin.put("/files/model.sig", signer.sign({"llama.gguf": payload(40 * KIB, 9)}))
    env = pod.single_env(origin.url + "/files/llama.gguf", **signer.anchor_env)

    run = pod.run(env=env)

    # The bundle beside it signs other bytes: refused, nothing published.
    refused(run, pod.cache_dir, ["model.gguf"], "does not have the sha256")
    origin.put("/files/model.sig", signer.sign({"llama.gguf": data}))
    pod.run(env=env).ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data


def test_a_bundle_at_an_http_url_with_credentials_is_shown_without_them(  # type: ignore[no-untyped-def]
    pod: Pod, origin: Origin, s3, bucket: str, signer: Signer
) -> None:
    """An S3 model, its bundle at an http(s) URL of its own; the URL's
    userinfo and query never appear in the output, the termination message
    or the record."""
    for rel, data in FILES.items():
        s3.put(bucket, f"plain/{rel}", data)
    origin.put("/sigs/model.sig", signer.sign(FILES))
    host = origin.url.split("://", 1)[1]
    url = f"http://reader:Canary-Pass-1@{host}/sigs/model.sig?X-Token=Canary-Query-2"
    env = pod.multi_env(
        f"s3://{bucket}/plain", FILES, **s3_env(s3), **signer.anchor_env, LLMKUBE_SIGNATURE=url
    )

    run = pod.run(env=env)

    run.ok(files=len(FILES), fetched=len(FILES))
    record = (pod.cache_dir / RECORD).read_text()
    assert json.loads(record)["signature"] == f"http://{host}/sigs/model.sig"
    for canary in ("Canary-Pass-1", "Canary-Query-2"):
        assert canary not in run.outputs and canary not in record


def test_a_refused_refresh_keeps_the_verified_version_serving(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    """The publisher signs a new version of a shard, the origin serves other
    bytes for it: OnChange refuses, nothing is published, and the version
    verified before still serves offline from its record (a record is
    replaced only by a verified set)."""
    base = _http_model(origin, FILES, signer.sign(FILES))
    cache_dir = pod.multi(base, FILES)
    pod.run(env=signer.anchor_env).ok(files=len(FILES), fetched=len(FILES))
    rel = "model-00002-of-00002.safetensors"
    release = {**FILES, rel: payload(64 * KIB, 20)}
    origin.put(f"{PATH}/model.sig", signer.sign(release))
    origin.put(f"{PATH}/{rel}", changed_byte(release)[rel])

    refresh = pod.run(env=signer.anchor_env, LLMKUBE_REFRESH_POLICY="OnChange")

    refresh.failed(REASON)
    assert rel in refresh.term["message"]
    assert (cache_dir / rel).read_bytes() == FILES[rel]
    origin.clear_log()
    warm = pod.run(env=signer.anchor_env)
    warm.ok(files=len(FILES), fetched=0, reused=len(FILES))
    assert origin.requests() == []


def test_diagnose_reads_the_cause_back_from_the_log(
    pod: Pod, origin: Origin, signer: Signer, tmp_path: Path
) -> None:
    """A controller without the termination message (a log tail only) gets
    the cause's own remedy, not the reason's default one."""
    base = _http_model(origin, FILES, None)
    pod.multi(base, FILES)
    run = pod.run(env=signer.anchor_env)
    run.failed(REASON)
    tail = tmp_path / "tail.log"
    tail.write_text(run.stderr)

    condition = json.loads(pod.run("diagnose", str(tail)).stdout)

    assert condition["reason"] == REASON
    assert "sign the model with model-signing" in condition["message"]
    assert "stage the signed revision" not in condition["message"]


def test_a_bundle_without_a_key_hint_verifies_and_stdout_stays_empty(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    """model-signing print()s a warning for a bundle of the older format
    (no key hint); `stage` keeps stdout empty (the harness checks) and logs it."""
    doc = json.loads(signer.sign(FILES))
    del doc["verificationMaterial"]["publicKey"]["hint"]
    base = _http_model(origin, FILES, json.dumps(doc).encode())
    pod.multi(base, FILES)

    run = pod.run(env=signer.anchor_env)

    run.ok(files=len(FILES), fetched=len(FILES))
    assert "older verification material format" in run.stderr


def test_plan_says_a_writer_verifies_a_model_not_staged_yet(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    base = _http_model(origin, FILES, signer.sign(FILES))
    pod.multi(base, FILES)

    doc = json.loads(pod.run("plan", "--json", env=signer.anchor_env).stdout)

    assert doc["signature"]["state"] == "pending", doc["signature"]
    assert origin.requests() == []  # plan asks nothing without --probe
    pod.run(env=signer.anchor_env).ok(files=len(FILES), fetched=len(FILES))
    doc = json.loads(pod.run("plan", "--json", env=signer.anchor_env).stdout)
    assert doc["signature"]["state"] == "verified", doc["signature"]


def test_a_changed_byte_on_the_hub_cdn_is_never_published(
    pod: Pod, hub: FakeHub, signer: Signer
) -> None:
    """The hub lists the signed LFS sha256 but its CDN serves other bytes:
    the hub and the signature agree, the copy on the way is bad, so the
    reason is the origin-digest mismatch (retryable, #12 item 5), and
    nothing of the model is published either way."""
    hub.add_repo(REPO, {**FILES, "model.sig": signer.sign(FILES)})
    hub.corrupt(REPO, "model-00002-of-00002.safetensors")

    run = pod.run(env=_hf_env(pod, hub, signer.anchor_env))

    run.failed("ModelTransferChecksumMismatch", retryable=True)
    nothing_published(pod.cache_dir, sorted(FILES))


@pytest.mark.parametrize("change", ["added", "removed"])
def test_a_key_first_run_judges_the_listing_not_an_unsigned_run_record(  # type: ignore[no-untyped-def]
    pod: Pod, s3, bucket: str, signer: Signer, change: str
) -> None:
    """#40 item 6: an earlier run without a key recorded the prefix's
    listing; the publisher then changed the set and signed it. The key's
    first IfNotPresent run lists the source again: an added file is
    fetched and the signed set served; a file the source no longer has is
    refused as what it is (a file beside the signed set), never as a
    signed set the source does not match."""
    before = {k: v for k, v in FILES.items() if k != "config.json"}
    if change == "removed":
        before = {**FILES, "old.bin": b"an older file"}
    for rel, data in before.items():
        s3.put(bucket, f"signed/{rel}", data)
    source = f"s3://{bucket}/signed"
    env = {**pod.env, "MODEL_SOURCE": source, "CACHE_DIR": str(pod.cache_dir), **s3_env(s3)}
    pod.run(env=env).ok(files=len(before), fetched=len(before))

    if change == "removed":
        s3.admin().delete_object(Bucket=bucket, Key="signed/old.bin")
    _s3_model(s3, bucket, FILES, signer.sign(FILES))
    run = pod.run(env={**env, **signer.anchor_env})

    if change == "added":
        run.ok(files=len(FILES) + 1, fetched=2, reused=len(FILES) - 1)
        assert pod.dest("config.json").read_bytes() == FILES["config.json"]
        assert sorted(json.loads((pod.cache_dir / RECORD).read_text())["files"]) == sorted(FILES)
        return
    doc = run.failed(REASON).term
    assert "holds what the signature does not sign: 'old.bin'" in str(doc["message"])
    assert "MODEL_FILES" not in str(doc["remedy"])
    assert not (pod.cache_dir / RECORD).exists()


# -- git files the publisher chose to sign (#40 item 5) -----------------------------------

GIT_FILES = {**FILES, ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"}


def _signed_with_git_paths(signer: Signer) -> bytes:
    """`model_signing sign key --no-ignore-git-paths`: .gitattributes signed."""
    import model_signing

    hashing = model_signing.hashing.Config().set_ignored_paths(paths=[], ignore_git_paths=False)
    return signer.sign_hashed(GIT_FILES, hashing)


def _git_source(
    kind: str, pod: Pod, origin: Origin, hub: FakeHub, served: dict[str, bytes], bundle: bytes
) -> dict[str, str]:
    if kind == "hf":
        hub.add_repo(REPO, {**served, "model.sig": bundle})
        return pod.multi_env(f"hf://{REPO}@main", served, HF_ENDPOINT=hub.url)
    if kind == "local":
        model = _local_model(pod.tmp / "src", served, bundle)
        return pod.multi_env(str(model), served)
    return pod.multi_env(_http_model(origin, served, bundle), served)


@pytest.mark.parametrize("kind", ["http", "local", "hf"])
@pytest.mark.parametrize("tampered", [False, True], ids=["intact", "gitattributes_changed"])
def test_a_model_signed_with_its_git_files_is_verified_with_them(
    pod: Pod, origin: Origin, hub: FakeHub, signer: Signer, kind: str, tampered: bool
) -> None:
    """Signed with --no-ignore-git-paths, the statement records no git
    path among its ignore_paths and signs .gitattributes: it is staged and
    pinned like any signed file (before: 'signed but not staged')."""
    bundle = _signed_with_git_paths(signer)
    served = dict(GIT_FILES)
    if tampered:
        served[".gitattributes"] = b"*.safetensors -filter\n"
    env = {**_git_source(kind, pod, origin, hub, served, bundle), **signer.anchor_env}

    run = pod.run(env=env)

    if tampered:
        refused(run, pod.cache_dir, sorted(served), "does not have the sha256")
        return
    run.ok(files=len(GIT_FILES), fetched=len(GIT_FILES))
    for rel, data in GIT_FILES.items():
        assert pod.dest(rel).read_bytes() == data, rel
    assert ".gitattributes" in json.loads((pod.cache_dir / RECORD).read_text())["files"]
    pod.run(env=env).ok(files=len(GIT_FILES), fetched=0, reused=len(GIT_FILES))


def test_a_default_signature_still_leaves_git_files_out(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    """model-signing's default records the git paths in ignore_paths: a
    .gitattributes beside the model is staged outside the signed set."""
    env = {**pod.multi_env(_http_model(origin, GIT_FILES, signer.sign(FILES)), GIT_FILES)}

    pod.run(env={**env, **signer.anchor_env}).ok(files=len(GIT_FILES), fetched=len(GIT_FILES))
