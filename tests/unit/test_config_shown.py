"""How config quotes a value in a message: one helper (#32 item 2), whole
when short, else only its length, never a prefix. Four ways existed; the
path checks cut a path at 200 characters, and a cut value escapes the
redactor, which knows whole values only. Each case below is a message
that quoted a long path by its first 200 characters before."""

from __future__ import annotations

import pytest

from llmkube_stager.config import load_config
from llmkube_stager.errors import ConfigError

# Long enough that any prefix the message held would be a strict one.
LONG = "/models/" + "segment/" * 30
SINGLE = {"MODEL_SOURCE": "https://host.example/m.gguf", "MODEL_PATH": "/models/k/m.gguf"}
MULTI = {"MODEL_SOURCE": "hf://org/repo", "CACHE_DIR": "/models/k", "MODEL_FILES": "a.json"}

CASES = [
    # (what the message says, the variables, the value it names)
    ("a control character", {**MULTI, "CACHE_DIR": LONG + "\x01"}, LONG + "\x01"),
    ("'..' parts", {**MULTI, "CACHE_DIR": LONG + "../x"}, LONG + "../x"),
    ("names no file", {**SINGLE, "MODEL_PATH": LONG}, LONG),
    ("a reserved name", {**SINGLE, "MODEL_PATH": LONG + ".llmkube.lock"}, LONG + ".llmkube.lock"),
    ("not absolute", {**SINGLE, "LLMKUBE_HOST_MODEL": LONG[1:]}, LONG[1:]),
    ("'.' parts", {**SINGLE, "LLMKUBE_TERMINATION_LOG": LONG + "./t"}, LONG + "./t"),
    ("a relative root", {**SINGLE, "LLMKUBE_ALLOWED_HOST_ROOTS": LONG[1:]}, LONG[1:]),
]


@pytest.mark.parametrize(("what", "env", "value"), CASES, ids=[c[0] for c in CASES])
def test_a_long_value_is_named_by_its_length_never_cut(
    what: str, env: dict[str, str], value: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(env, {})
    message = str(caught.value)
    assert f"<{len(value)} characters>" in message, message
    assert repr(value)[:40] not in message, message


def test_a_short_value_is_still_quoted_whole() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({**MULTI, "CACHE_DIR": "/models/../k"}, {})
    assert str(caught.value) == "CACHE_DIR must not contain '..' parts, got '/models/../k'"
