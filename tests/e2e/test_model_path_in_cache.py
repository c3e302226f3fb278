"""#46 item 3: MODEL_PATH outside CACHE_DIR is refused before any I/O.

A bare `MODEL_PATH=model.gguf` wrote the model, its size record and the
lock into the working directory (`/` in a pod), an absolute path elsewhere
wrote there, and CACHE_DIR was never created: writes outside the cache
volume. Now `stage`, `plan` and `verify` exit 2 (InvalidConfiguration)
naming both variables, and nothing is written or asked for. Evidence: the
exit code, the termination message, the trees of the working directory and
the cache, the origin's request log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.disk import snapshot
from tests.harness.origin import Origin
from tests.harness.pod import Pod, Run
from tests.harness.sample import payload

pytestmark = pytest.mark.e2e

DATA = payload(16 * 1024, seed=21)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def _refused(run: Run, *names: str) -> None:
    """Exit 2 naming both variables (paths are shown whole up to 80
    characters, config/reader.py `shown`)."""
    assert run.returncode == 2, str(run)
    text = run.stderr
    assert "InvalidConfiguration" in text and "outside CACHE_DIR" in text, text
    for name in names:
        assert name in text, text


@pytest.mark.parametrize("command", ["stage", "plan", "verify"])
def test_a_bare_model_path_is_refused_and_nothing_is_written(
    tmp_path: Path, workdir: Path, origin: Origin, command: str
) -> None:
    origin.put("/m.gguf", DATA)
    pod = Pod(tmp_path, cwd=workdir)
    cache = pod.models / "k1"

    run = pod.run(command, MODEL_SOURCE=origin.url + "/m.gguf", CACHE_DIR=str(cache),
                  MODEL_PATH="model.gguf")  # fmt: skip

    _refused(run, "MODEL_PATH", "CACHE_DIR", "(given as 'model.gguf')")
    assert snapshot(workdir) == {".": snapshot(workdir)["."]}  # nothing in the working dir
    assert not pod.models.exists()
    assert origin.requests() == []
    if command != "plan":
        assert run.term["reason"] == "InvalidConfiguration"


def test_an_absolute_model_path_elsewhere_is_refused(tmp_path: Path, origin: Origin) -> None:
    origin.put("/m.gguf", DATA)
    pod = Pod(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    run = pod.run(MODEL_SOURCE=origin.url + "/m.gguf", CACHE_DIR=str(pod.models / "k1"),
                  MODEL_PATH=str(elsewhere / "model.gguf"))  # fmt: skip

    _refused(run, "MODEL_PATH", "CACHE_DIR")
    run.failed("InvalidConfiguration", exit_code=2)
    assert list(elsewhere.iterdir()) == []
    assert not pod.models.exists()
    assert origin.requests() == []


def test_a_sibling_with_the_cache_dir_as_prefix_is_outside(tmp_path: Path, origin: Origin) -> None:
    # /models/k1-old/model.gguf starts with "/models/k1" but is not in it.
    origin.put("/m.gguf", DATA)
    pod = Pod(tmp_path)
    cache = pod.models / "k1"

    run = pod.run(MODEL_SOURCE=origin.url + "/m.gguf", CACHE_DIR=str(cache),
                  MODEL_PATH=str(cache) + "-old/model.gguf")  # fmt: skip

    _refused(run)
    assert not pod.models.exists()


def test_a_model_path_in_the_cache_dir_stages_as_before(tmp_path: Path, origin: Origin) -> None:
    origin.put("/m.gguf", DATA)
    pod = Pod(tmp_path)
    cache = pod.models / "k1"

    pod.run(MODEL_SOURCE=origin.url + "/m.gguf", CACHE_DIR=str(cache),
            MODEL_PATH=str(cache / "sub" / "model.gguf")).ok()  # fmt: skip

    assert (cache / "sub" / "model.gguf").read_bytes() == DATA


def test_an_emptydir_model_without_cache_dir_stages_as_before(
    tmp_path: Path, origin: Origin
) -> None:
    # The operator's emptyDir single-file form: CACHE_DIR="" (spec §2.1).
    origin.put("/m.gguf", DATA)
    pod = Pod(tmp_path)
    dest = pod.models / "ns-model.gguf"
    pod.models.mkdir()

    pod.run(MODEL_SOURCE=origin.url + "/m.gguf", CACHE_DIR="", MODEL_PATH=str(dest)).ok()

    assert dest.read_bytes() == DATA
