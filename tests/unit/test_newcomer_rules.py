"""#46 items 1, 2, 4: the pure rules, one case a row (the e2e tests run
them through the CLI): which validator a probe answer gives, what OnChange
decides with it, when a directory's recorded source refuses a run, which
variables are named as misspelt."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmkube_stager.config import unknown_variables
from llmkube_stager.model import Decision, LocalState, Remote
from llmkube_stager.plan import model_source_id, source_refusal
from llmkube_stager.sources.base import RemoteMeta
from tests.harness.plan_inputs import SIZE, local_file, plan_of

LM = "Tue, 14 Nov 2023 22:13:20 GMT"


@pytest.mark.parametrize(
    ("etag", "last_modified", "validator"),
    [
        ('"abc"', LM, '"abc"'),  # a strong ETag wins
        ('W/"abc"', LM, LM),  # a weak one never: Last-Modified
        ('W/"abc"', None, None),  # nothing to compare: the size decides
        (None, LM, LM),
        (None, None, None),
    ],
)
def test_the_validator_of_a_probe_answer(
    etag: str | None, last_modified: str | None, validator: str | None
) -> None:
    meta = RemoteMeta("https://h/m", SIZE, etag, True, last_modified=last_modified)
    assert meta.validator == validator


@pytest.mark.parametrize(
    ("recorded", "remote", "decision", "note"),
    [
        ('"v1"', '"v1"', Decision.REUSE, False),
        ('"v1"', '"v2"', Decision.REFRESH, False),  # same size, new bytes (#46 item 1)
        (None, '"v2"', Decision.REUSE, True),  # the scripts' copy: their rule, said
        ('"v1"', None, Decision.REUSE, True),  # the origin says nothing: size, said
    ],
)
def test_onchange_compares_validators_and_says_when_it_could_not(
    recorded: str | None, remote: str | None, decision: Decision, note: bool
) -> None:
    local = replace(local_file(LocalState.COMPLETE), validator=recorded)
    probe = {local.rel: Remote(answered=True, size_bytes=SIZE, validator=remote)}

    (action,) = plan_of(local, remote=probe, policy="OnChange", kind="http").actions

    assert action.decision is decision
    assert ("by its size only" in action.note) is note


def test_the_source_is_recorded_without_credentials_or_query() -> None:
    source = "https://user:s3cret@host.example/m.gguf?X-Amz-Signature=abc#frag"
    assert model_source_id(source) == "https://host.example/m.gguf"


@pytest.mark.parametrize(
    ("recorded", "present", "pinned", "refused"),
    [
        ("https://a/m", True, False, True),
        ("https://b/m", True, False, False),  # the same source
        ("", True, False, False),  # nothing recorded: the scripts' rule
        ("https://a/m", False, False, False),  # nothing of it there
        ("https://a/m", True, True, False),  # the pins prove the bytes
    ],
)
def test_a_directory_of_another_source_is_refused(
    recorded: str, present: bool, pinned: bool, refused: bool
) -> None:
    err = source_refusal(
        "/models/k", recorded, "https://b/m", any_present=present, all_pinned=pinned
    )
    assert (err is not None) is refused
    if err is not None:
        assert err.exit_code == 2 and "https://a/m" in err.detail and "https://b/m" in err.detail


def test_misspelt_variables_are_named_with_the_closest() -> None:
    names = ["MODEL_SOUCE", "CACHE_DIR", "LLMKUBE_WHATEVER", "MODEL_DIGEST_FIELD", "HOME"]
    assert unknown_variables(names) == [
        "LLMKUBE_WHATEVER is not a variable of llmkube-stager; it is ignored",
        "MODEL_SOUCE is not a variable of llmkube-stager; did you mean MODEL_SOURCE?",
    ]
