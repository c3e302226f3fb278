"""#40 item 2: files beside a signed set that the bundle does not sign.
With a trust anchor set, the served directory holds the signed set and the
agent's own records, and nothing else: anything else is refused, named
(docs/reliability.md says why refused, not moved). Bundles made by
model-signing's own signing API; the extra files are put there as another
writer of the cache would (an earlier run without a key, another pod).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness.origin import Origin
from tests.harness.pod import Pod, as_fuse
from tests.harness.signing import FILES, REASON, Signer

PATH = "/org/repo"


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    return Signer(tmp_path / "publisher")


def _signed_model(pod: Pod, origin: Origin, signer: Signer) -> Path:
    for rel, data in FILES.items():
        origin.put(f"{PATH}/{rel}", data)
    origin.put(f"{PATH}/model.sig", signer.sign(FILES))
    return pod.multi(origin.url + PATH + "/", FILES)


def _refused_naming(run_term: dict[str, object], rel: str) -> None:
    assert rel in str(run_term["message"]), run_term["message"]
    assert "not signed" in str(run_term["message"]), run_term["message"]


def test_an_unsigned_file_left_by_a_run_without_a_key_is_refused_by_name(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    cache_dir = _signed_model(pod, origin, signer)
    origin.put(f"{PATH}/tokenizer_config.json", b'{"unsigned": true}')
    unsigned = [*FILES, "tokenizer_config.json"]
    pod.run(env={"MODEL_FILES": "\n".join(unsigned)}).ok(files=len(unsigned), fetched=len(unsigned))
    assert (cache_dir / "tokenizer_config.json").is_file()

    run = pod.run(env=signer.anchor_env)

    run.failed(REASON)
    assert run.returncode == 4
    _refused_naming(run.term, "tokenizer_config.json")


def test_a_file_another_writer_adds_beside_a_verified_set_is_refused_on_the_warm_start(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    cache_dir = _signed_model(pod, origin, signer)
    pod.run(env=signer.anchor_env).ok(files=len(FILES), fetched=len(FILES))
    (cache_dir / "tokenizer" / "added_tokens.json").write_bytes(b'{"evil": 1}')
    origin.clear_log()

    run = pod.run(env=signer.anchor_env)

    run.failed(REASON)
    _refused_naming(run.term, "tokenizer/added_tokens.json")
    assert origin.requests() == []
    # Refused, never removed: the file is another writer's.
    assert (cache_dir / "tokenizer" / "added_tokens.json").read_bytes() == b'{"evil": 1}'


def test_a_reader_that_may_not_write_refuses_a_directory_with_an_unsigned_file(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    cache_dir = _signed_model(pod, origin, signer)
    pod.run(env=signer.anchor_env, LLMKUBE_PREFETCH_STAGER="true").ok(
        files=len(FILES), fetched=len(FILES)
    )
    (cache_dir / "extra.safetensors").write_bytes(b"unsigned weights")
    origin.clear_log()

    run = pod.stage(signer.anchor_env, fs=as_fuse)

    run.failed(REASON)
    _refused_naming(run.term, "extra.safetensors")
    assert origin.requests() == []


def test_the_agents_own_records_beside_a_signed_set_are_not_refused(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    _signed_model(pod, origin, signer)
    pod.run(env=signer.anchor_env).ok(files=len(FILES), fetched=len(FILES))
    pod.run(env=signer.anchor_env).ok(files=len(FILES), fetched=0, reused=len(FILES))
    pod.run(env=signer.anchor_env, LLMKUBE_REFRESH_POLICY="OnChange").ok(
        files=len(FILES), fetched=0, reused=len(FILES)
    )


def _tree(root: Path) -> dict[str, bytes]:
    """Every entry under `root` with its bytes (a symlink: its target)."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = b"-> " + str(path.readlink()).encode()
        elif path.is_file():
            found[rel] = path.read_bytes()
    return found


@pytest.mark.parametrize(
    "stray",
    ["tokenizer.json", "tokenizer/added_tokens.json", "model-00003-of-00002.safetensors"],
)
def test_verify_refuses_an_unsigned_file_beside_a_verified_set_as_a_reader_does(
    pod: Pod, origin: Origin, signer: Signer, stray: str
) -> None:
    # Review of #40 item 2: `verify` with a key said "fine" while the
    # directory served an unsigned tokenizer.json beside the signed set.
    cache_dir = _signed_model(pod, origin, signer)
    pod.run(env=signer.anchor_env).ok(files=len(FILES), fetched=len(FILES))
    if stray.startswith("model-"):
        # A symlink named like a shard, as another writer might leave.
        (cache_dir / stray).symlink_to(cache_dir / "model-00001-of-00002.safetensors")
    else:
        (cache_dir / stray).write_bytes(b'{"unsigned": true}')
    before = _tree(cache_dir)
    origin.clear_log()

    check = pod.run("verify", env=signer.anchor_env)

    check.failed(REASON)
    assert check.returncode == 4
    _refused_naming(check.term, stray)
    reader = pod.stage(signer.anchor_env, fs=as_fuse)
    reader.failed(REASON)
    assert check.term["reason"] == reader.term["reason"]
    # Read-only: nothing moved, removed or rewritten.
    assert _tree(cache_dir) == before
    assert origin.requests() == []


def test_inspect_lists_an_unsigned_file_beside_a_signed_set(
    pod: Pod, origin: Origin, signer: Signer
) -> None:
    cache_dir = _signed_model(pod, origin, signer)
    pod.run(env=signer.anchor_env).ok(files=len(FILES), fetched=len(FILES))
    (cache_dir / "tokenizer.json").write_bytes(b'{"unsigned": true}')

    shown = pod.run("inspect", str(cache_dir), env=signer.anchor_env)

    assert shown.returncode == 0, shown
    assert "NOT SIGNED" in shown.stdout and "tokenizer.json" in shown.stdout, shown.stdout
    listed = json.loads(pod.run("inspect", str(cache_dir), "--json").stdout)["signatures"]
    assert [s["unsigned"] for s in listed] == [["tokenizer.json"]]
