"""#40 item 2: files beside a signed set that the bundle does not sign.
With a trust anchor set, the served directory holds the signed set and the
agent's own records, and nothing else: anything else is refused, named
(docs/reliability.md says why refused, not moved). Bundles made by
model-signing's own signing API; the extra files are put there as another
writer of the cache would (an earlier run without a key, another pod).
"""

from __future__ import annotations

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
