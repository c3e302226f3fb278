"""Every default is written once, in config.VARS (#23 item 4): the reader
falls back on it, Config and Timeouts start from it, `--help` shows it; and
`inspect`'s directory comes from config/ too."""

from __future__ import annotations

import dataclasses

import click
import pytest

from llmkube_stager.cli import cli
from llmkube_stager.config import (
    DEFAULTS,
    VARS,
    Config,
    Timeouts,
    Var,
    inspect_target,
    load_config,
)

SINGLE = {"MODEL_SOURCE": "https://h/m.gguf", "CACHE_DIR": "/models/k", "MODEL_PATH": "/models/k/m"}
# Fields load_config fills from the environment alone, never from a default.
_GIVEN = {"source", "cache_dir", "model_path", "model_files", "pins", "aws_env", "secrets"}


def test_config_and_timeouts_start_from_what_the_reader_falls_back_on() -> None:
    loaded = load_config(SINGLE, {})
    made = Config(loaded.source, loaded.cache_dir, loaded.model_path, loaded.model_files)
    for field in dataclasses.fields(Config):
        if field.name not in _GIVEN:
            assert getattr(made, field.name) == getattr(loaded, field.name), field.name
    assert Timeouts() == loaded.timeouts


def test_the_termination_log_default_is_the_kubelets_path() -> None:
    assert DEFAULTS["LLMKUBE_TERMINATION_LOG"] == "/dev/termination-log"
    assert Config("s", "c", "p", ()).termination_log == "/dev/termination-log"


@pytest.mark.parametrize("var", [v for v in VARS if v.default], ids=lambda v: v.env)
def test_help_shows_the_default(var: Var) -> None:
    option = next(p for p in cli.commands["stage"].params if var.flag in p.opts)
    assert isinstance(option, click.Option)
    assert f"default {var.default}]" in (option.help or "")


@pytest.mark.parametrize(
    ("given", "environ", "target"),
    [
        ("/given", {"CACHE_DIR": "/env"}, "/given"),
        (None, {"CACHE_DIR": "/env"}, "/env"),
        ("", {"CACHE_DIR": "/env"}, "/env"),
        (None, {}, ""),
    ],
)
def test_inspect_target_argument_first_then_cache_dir(
    given: str | None, environ: dict[str, str], target: str
) -> None:
    assert inspect_target(environ, given) == target
