"""#34, an adversarial pass on the gate itself: statements a publisher's
key really signed (the DSSE envelope made by model-signing's own EC signer,
tests/harness/signing.py's key) but whose file names a verifier could read
two ways: a name with '..', an absolute name, a trailing '/', './', a name
listed twice (model-signing's Manifest keeps the LAST digest, silently),
two Unicode spellings of one name, the bundle's own name in the signed set;
and a local source whose file is a symlink pointing outside. Each is
refused (exit 4, ModelSignatureInvalid, nothing of the model on disk) or
handled without publishing a byte that was not signed.
"""

from __future__ import annotations

import hashlib
import unicodedata
from pathlib import Path

import pytest

from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload
from tests.harness.signing import Signer, refused

KIB = 1024
FILES = {
    "model.safetensors": payload(64 * KIB, 1),
    "config.json": b'{"model_type": "llama"}',
}
PATH = "/org/crafted"


def crafted_bundle(signer: Signer, resources: list[tuple[str, bytes]]) -> bytes:
    """A bundle signed by `signer`'s key over a statement listing exactly
    `resources` (name, bytes), names as given: what a publisher's buggy or
    hostile tool could sign. The statement is model-signing's own v1 form
    (its Payload), with a root digest that matches the resources."""
    import model_signing
    from in_toto_attestation.v1 import statement
    from model_signing._hashing import memory
    from model_signing._signing import sign_ec_key, signing

    scratch = signer.workdir / "crafted-model"
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "x").write_bytes(b"x")
    manifest = model_signing.hashing.Config().hash(scratch)
    body = signing.Payload(manifest)
    root = memory.SHA256()
    rows = []
    for name, data in resources:
        digest = hashlib.sha256(data)
        root.update(digest.digest())
        rows.append({"name": name, "algorithm": "sha256", "digest": digest.hexdigest()})
    subject = statement.ResourceDescriptor(
        name="crafted", digest={"sha256": root.compute().digest_hex}
    ).pb
    body.statement = statement.Statement(
        subjects=[subject],
        predicate_type=signing._PREDICATE_TYPE,
        predicate={"serialization": manifest.serialization_type, "resources": rows},
    )
    signature = sign_ec_key.Signer(signer.key_path).sign(body)
    path = signer.workdir / "crafted.sig"
    signature.write(path)
    return path.read_bytes()


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    return Signer(tmp_path / "publisher")


def _serve(origin: Origin, files: dict[str, bytes], bundle: bytes) -> str:
    for rel, data in files.items():
        origin.put(f"{PATH}/{rel}", data)
    origin.put(f"{PATH}/model.sig", bundle)
    return origin.url + PATH + "/"


def test_the_crafted_bundle_itself_verifies(pod: Pod, origin: Origin, signer: Signer) -> None:
    """The helper's bundle is a valid one: with well-formed names it is
    published (so the refusals below are about the names, not the helper)."""
    base = _serve(origin, FILES, crafted_bundle(signer, list(FILES.items())))
    cache_dir = pod.multi(base, FILES)

    pod.run(env=signer.anchor_env).ok(files=len(FILES), fetched=len(FILES))

    for rel, data in FILES.items():
        assert (cache_dir / rel).read_bytes() == data


NAMES = {
    # (how config.json is named in the statement, what the refusal says)
    "dotdot": ("../config.json", "not a relative path of a model file"),
    "dotdot_inside": ("tokenizer/../config.json", "not a relative path of a model file"),
    "absolute": ("/config.json", "not a relative path of a model file"),
    "trailing_slash": ("config.json/", "not a relative path of a model file"),
    "dot_slash": ("./config.json", "not a relative path of a model file"),
    "double_slash": ("sub//config.json", "not a relative path of a model file"),
}


@pytest.mark.parametrize("case", sorted(NAMES))
def test_a_statement_naming_a_file_otherwise_than_a_signer_writes_it_is_refused(
    pod: Pod, origin: Origin, signer: Signer, case: str
) -> None:
    """model-signing reads 'config.json/' and './config.json' as
    'config.json' (PurePosixPath) and would accept them; no signer writes
    them, so the agent refuses rather than guess which file was meant."""
    name, words = NAMES[case]
    resources = [("model.safetensors", FILES["model.safetensors"]), (name, FILES["config.json"])]
    base = _serve(origin, FILES, crafted_bundle(signer, resources))
    cache_dir = pod.multi(base, FILES)

    run = pod.run(env=signer.anchor_env)

    refused(run, cache_dir, sorted(FILES), words)
    assert [r for r in origin.requests(method="GET") if "model.sig" not in r.path] == []


def test_a_name_listed_twice_is_refused_not_resolved_by_the_last_digest(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    """The statement lists config.json with other bytes' digest, then with
    the served bytes' digest: model-signing keeps the last (the served one)
    and the set would verify; another verifier could take the first."""
    resources = [
        ("model.safetensors", FILES["model.safetensors"]),
        ("config.json", b'{"model_type": "evil"}'),
        ("config.json", FILES["config.json"]),
    ]
    base = _serve(origin, FILES, crafted_bundle(signer, resources))
    cache_dir = pod.multi(base, FILES)

    run = pod.run(env=signer.anchor_env)

    refused(run, cache_dir, sorted(FILES), "lists 'config.json' twice")


def test_two_unicode_spellings_of_one_name_are_refused(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    nfc = unicodedata.normalize("NFC", "café.json")
    nfd = unicodedata.normalize("NFD", "café.json")
    assert nfc != nfd
    files = {**FILES, nfc: b'{"a": 1}', nfd: b'{"a": 2}'}
    base = _serve(origin, files, crafted_bundle(signer, list(files.items())))
    cache_dir = pod.multi(base, files)

    run = pod.run(env=signer.anchor_env)

    refused(run, cache_dir, sorted(files), "twice")


def test_a_name_signed_in_another_unicode_spelling_is_not_the_staged_file(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    """Signed as NFD, staged (MODEL_FILES, the origin) as NFC: not the same
    name, so not the signed set; nothing is published."""
    nfc = unicodedata.normalize("NFC", "café.json")
    nfd = unicodedata.normalize("NFD", "café.json")
    files = {**FILES, nfc: b'{"a": 1}'}
    resources = [*FILES.items(), (nfd, b'{"a": 1}')]
    base = _serve(origin, files, crafted_bundle(signer, resources))
    cache_dir = pod.multi(base, files)

    run = pod.run(env=signer.anchor_env)

    refused(run, cache_dir, sorted(files), "staged but not signed")


def test_a_statement_signing_the_bundles_own_name_is_refused_in_its_own_words(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    """The publisher signed a directory holding an old model.sig: the
    bundle is never a file of the model, so this set can never be staged."""
    old = Signer(signer.workdir / "old").sign(FILES)
    resources = [*FILES.items(), ("model.sig", old)]
    base = _serve(origin, FILES, crafted_bundle(signer, resources))
    cache_dir = pod.multi(base, [*FILES, "model.sig"])

    run = pod.run(env=signer.anchor_env)

    refused(run, cache_dir, sorted(FILES), "the name of the signature bundle itself")


def test_a_local_file_that_is_a_symlink_outside_publishes_only_signed_bytes(
    pod: Pod, signer: Signer, tmp_path: Path
) -> None:
    """A local model whose config.json is a symlink to a file outside the
    model directory: its bytes are not the signed ones, so nothing is
    published and the file outside is left as it was; pointed at a file
    holding the signed bytes, the set is published with those bytes."""
    model = tmp_path / "src"
    model.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.json"
    secret.write_bytes(b'{"token": "not for the model"}')
    (model / "model.safetensors").write_bytes(FILES["model.safetensors"])
    (model / "config.json").symlink_to(secret)
    (model / "model.sig").write_bytes(signer.sign(FILES))
    env = pod.multi_env(str(model), FILES, **signer.anchor_env)

    run = pod.run(env=env)

    refused(run, pod.cache_dir, sorted(FILES), "does not have the sha256")
    assert secret.read_bytes() == b'{"token": "not for the model"}'
    assert "not for the model" not in run.outputs

    good = outside / "config.json"
    good.write_bytes(FILES["config.json"])
    (model / "config.json").unlink()
    (model / "config.json").symlink_to(good)
    pod.run(env=env).ok(files=len(FILES), fetched=len(FILES))
    assert pod.dest("config.json").read_bytes() == FILES["config.json"]
    assert not pod.dest("config.json").is_symlink()
