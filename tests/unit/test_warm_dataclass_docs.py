"""The value types a warm start imports (config/, model.py, proxy.py) each
have a docstring: without one, `dataclass` builds one from the class's
signature at import (inspect.signature), which cost the warm start about
1 ms across them (#32 item 2: what the config package's extra modules
cost, paid back)."""

from __future__ import annotations

import dataclasses
import inspect
import types

import pytest

import llmkube_stager.config.kserve_env
import llmkube_stager.config.load
import llmkube_stager.config.paths
import llmkube_stager.config.reader
import llmkube_stager.config.rules
import llmkube_stager.config.settings
import llmkube_stager.config.variables
import llmkube_stager.model
import llmkube_stager.proxy

MODULES = [
    llmkube_stager.config.kserve_env,
    llmkube_stager.config.load,
    llmkube_stager.config.paths,
    llmkube_stager.config.reader,
    llmkube_stager.config.rules,
    llmkube_stager.config.settings,
    llmkube_stager.config.variables,
    llmkube_stager.model,
    llmkube_stager.proxy,
]


def undocumented(module: types.ModuleType) -> list[str]:
    """Dataclasses defined in `module` whose docstring dataclass wrote."""
    found = []
    for name, obj in vars(module).items():
        if not (inspect.isclass(obj) and dataclasses.is_dataclass(obj)):
            continue
        if obj.__module__ != module.__name__:
            continue
        if "__doc__" not in obj.__dict__ or (obj.__doc__ or "").startswith(name + "("):
            found.append(name)
    return found


@pytest.mark.parametrize("module", MODULES, ids=[m.__name__ for m in MODULES])
def test_every_dataclass_has_its_docstring(module: types.ModuleType) -> None:
    assert undocumented(module) == []


def test_the_check_sees_a_dataclass_without_one() -> None:
    @dataclasses.dataclass(frozen=True)
    class Bare:
        x: int

    module = types.ModuleType("bare")
    Bare.__module__ = "bare"
    module.Bare = Bare  # type: ignore[attr-defined]
    assert undocumented(module) == ["Bare"]
