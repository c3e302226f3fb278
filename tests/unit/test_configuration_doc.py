"""docs/configuration.md says what the code does (#13 item 8): exactly the
variables the agent reads, with their flags, defaults and secret marking,
every example accepted, and every command flag listed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from llmkube_stager.cli import cli
from llmkube_stager.config import VARS, Config, load_config

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "configuration.md").read_text()
BY_NAME = {v.env: v for v in VARS}
SINGLE = {"MODEL_SOURCE": "https://h/m.gguf", "CACHE_DIR": "/models/k", "MODEL_PATH": "/models/k/m"}
MULTI = {"MODEL_SOURCE": "https://h/r/", "CACHE_DIR": "/models/k", "MODEL_FILES": "config.json"}
# A share of a sharded prefetch: the two variables need each other and a stager.
SHARDED = {
    **MULTI,
    "LLMKUBE_PREFETCH_STAGER": "true",
    "LLMKUBE_SHARDS": "4",
    "JOB_COMPLETION_INDEX": "0",
}


def _section(title: str) -> str:
    return DOC.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _rows(title: str) -> list[list[str]]:
    rows = []
    for line in _section(title).splitlines():
        if line.startswith("| ") and not line.startswith("| variable") and "---" not in line:
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _code(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


VARIABLES = {_code(r[0])[0]: r for r in _rows("Variables")}


def test_the_doc_lists_exactly_the_variables_the_agent_reads() -> None:
    assert sorted(VARIABLES) == sorted(BY_NAME)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_flag_and_secret_marking(name: str) -> None:
    row = VARIABLES[name]
    assert _code(row[1]) == [BY_NAME[name].flag]
    assert row[4].startswith("secret") is BY_NAME[name].secret, row[4]


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_the_example_is_accepted(name: str) -> None:
    example = "\n".join(_code(VARIABLES[name][3]))
    assert example, f"{name} has no example"
    base = MULTI if name in ("MODEL_FILES", "MODEL_FILE_SHA256") else SINGLE
    if name in ("LLMKUBE_SHARDS", "JOB_COMPLETION_INDEX"):
        base = SHARDED
    env = {**base, name: example}
    if name == "CACHE_DIR":
        # MODEL_PATH is a file in CACHE_DIR (#46 item 3).
        env["MODEL_PATH"] = example + "/model.gguf"
    if name == "MODEL_PATH":
        env["CACHE_DIR"] = example.rsplit("/", 1)[0]
    if name == "MODEL_FILES":
        env.pop("MODEL_PATH", None)
    if name == "LLMKUBE_SIGNED_DIGEST":
        # A pin needs the anchor it is signed by (#40 item 7): the doc's key.
        env["LLMKUBE_SIGNING_KEY"] = "\n".join(_code(VARIABLES["LLMKUBE_SIGNING_KEY"][3]))
    load_config(env, {})


# Defaults the doc states, against what load_config makes of an environment
# that does not set the variable.
DEFAULTS: dict[str, Any] = {
    "LLMKUBE_REFRESH_POLICY": lambda c: c.refresh_policy,
    "LLMKUBE_PREFETCH_STAGER": lambda c: str(c.prefetch_stager).lower(),
    "LLMKUBE_CA_DIR": lambda c: c.ca_dir,
    "LLMKUBE_HOST_MODEL": lambda c: c.host_model,
    "LLMKUBE_TERMINATION_LOG": lambda c: c.termination_log,
    "PROGRESS_INTERVAL": lambda c: c.progress_interval_s,
    "LLMKUBE_LOG_FORMAT": lambda c: c.log_format,
    "LLMKUBE_CONNECT_TIMEOUT": lambda c: c.timeouts.connect_s,
    "LLMKUBE_STALL_TIMEOUT": lambda c: c.timeouts.stall_s,
    "LLMKUBE_RETRIES": lambda c: c.timeouts.retries,
    "LLMKUBE_MAX_RETRY_WAIT": lambda c: c.timeouts.max_retry_wait_s,
    "LLMKUBE_LOCK_TIMEOUT": lambda c: c.timeouts.lock_s,
    "LLMKUBE_CONNECTIONS": lambda c: c.connections,
    "LLMKUBE_DIRECT_IO": lambda c: "auto" if c.direct_io else "off",
}


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_the_stated_default_is_the_default(name: str) -> None:
    config: Config = load_config(SINGLE, {})
    stated = _code(VARIABLES[name][2])[0]
    actual = DEFAULTS[name](config)
    if isinstance(actual, int | float) and not isinstance(actual, bool):
        assert float(stated) == actual
    else:
        assert stated == actual


def test_every_command_flag_is_listed() -> None:
    listed = {(r[0].strip("`() "), c) for r in _rows("Command flags") for c in _code(r[1])}
    contract = {v.flag for v in VARS}
    for name, command in cli.commands.items():
        for param in command.params:
            opts = [o for o in param.opts if o not in contract]
            if param.param_type_name == "argument":
                assert (name, param.name.upper()) in listed or (name, "FILE") in listed, param
                continue
            for opt in opts:
                assert (name, opt) in listed, f"{name} {opt} is not in docs/configuration.md"
    assert ("any", "--version") in listed
