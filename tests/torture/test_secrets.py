"""Secrets (#11): a canary in every secret-bearing input (HF token, AWS keys
and session token, URL userinfo, proxy password, presigned query) never
appears in any output -- stdout, the log, the termination message, any file
left in the cache -- on the hostile paths: configuration mistakes, over-long
values, hostile caches, and every command. (tests/e2e/test_no_secret_leaks.py
covers the origin's failure paths.)

Each canary is random; any 12-character piece of one in an output is a leak.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.harness.canary import Secrets, assert_no_leak, outputs_of
from tests.harness.origin import Origin
from tests.harness.pod import Run
from tests.harness.sandbox import Sandbox

pytestmark = pytest.mark.torture

SECRETS = Secrets.new()
URL_PASSWORD = SECRETS.url_password
SIGNATURE = SECRETS.url_signature
PROXY_PASSWORD = SECRETS.proxy_password


def assert_no_canary(run: Run, cache: Path) -> None:
    assert_no_leak(outputs_of(run, cache), SECRETS.named)


@pytest.fixture
def origin(origin: Origin) -> Origin:
    """The suite's origin, serving the model."""
    origin.put("/m/model.gguf", b"weights" * 1000)
    return origin


def _secret_source(origin: Origin) -> str:
    host = origin.url.split("://", 1)[1]
    return f"http://user:{URL_PASSWORD}@{host}/m?X-Amz-Signature={SIGNATURE}&X-Amz-Credential=c"


def _with_secrets(box: Sandbox, origin: Origin) -> None:
    box.env.update(SECRETS.env)
    box.env["HTTPS_PROXY"] = f"http://u:{PROXY_PASSWORD}@127.0.0.1:9"
    box.env["NO_PROXY"] = "127.0.0.1,localhost"
    box.multi(_secret_source(origin), ["model.gguf"])


MISTAKES = {
    "log-format": {"LLMKUBE_LOG_FORMAT": "xml"},
    "climbing-cache": {"CACHE_DIR": "rel/../../k"},
    "bad-file-set": {"MODEL_FILES": "../x"},
    "stamp-name": {"MODEL_FILES": "model.gguf\nmodel.gguf.sha256"},
    "long-name": {"MODEL_FILES": "n" * 240},
    "bad-pin": {"MODEL_FILE_SHA256": "zz model.gguf"},
    "bad-timeout": {"LLMKUBE_LOCK_TIMEOUT": "nan"},
    "bad-proxy": {"HTTPS_PROXY": f"ftp://u:{PROXY_PASSWORD}@proxy:21"},
    "garbage-proxy": {"HTTP_PROXY": f"::{PROXY_PASSWORD}::"},
    "long-proxy": {"HTTPS_PROXY": f"http://u:{PROXY_PASSWORD}" + "p" * 9000 + "@127.0.0.1:9"},
    "long-source": {"MODEL_SOURCE": None, "MODEL_PATH": None},
    "bad-cidr": {"NO_PROXY": f"{PROXY_PASSWORD}/99"},
}


_QUICK = frozenset({"stamp-name", "bad-proxy", "long-proxy", "long-source"})


@pytest.mark.parametrize(
    "mistake",
    [
        pytest.param(v, id=k, marks=() if k in _QUICK else (pytest.mark.slow,))
        for k, v in MISTAKES.items()
    ],
)
def test_no_secret_in_a_configuration_mistake(
    sandbox: Sandbox, origin: Origin, mistake: dict[str, str | None]
) -> None:
    _with_secrets(sandbox, origin)
    env = dict(mistake)
    if "MODEL_SOURCE" in env:
        env["MODEL_SOURCE"] = _secret_source(origin) + "&pad=" + "x" * 9000

    for command in ("stage", "verify", "plan"):
        run = sandbox.run(command, env=env).ended_with_a_reason()
        assert run.returncode == 2, str(run)
        assert_no_canary(run, sandbox.cache)


HOSTILE = {
    "lock-symlink": lambda c: (c / ".llmkube.lock").symlink_to("/nonexistent/x"),
    "fifo-record": lambda c: os.mkfifo(c / "model.gguf.llmkube-size"),
    "dir-final": lambda c: (c / "model.gguf").mkdir(),
    "symlink-final": lambda c: (c / "model.gguf").symlink_to("/etc/hostname"),
    "garbage-validators": lambda c: (c / ".llmkube-validators").write_bytes(b'{"a":' * 9999),
}


@pytest.mark.parametrize("plant", HOSTILE.values(), ids=HOSTILE.keys())
def test_no_secret_on_a_hostile_cache(sandbox: Sandbox, origin: Origin, plant: object) -> None:
    _with_secrets(sandbox, origin)
    sandbox.cache.mkdir(parents=True)
    assert callable(plant)
    plant(sandbox.cache)

    for args in (("stage",), ("verify",), ("plan", "--json"), ("inspect", str(sandbox.cache))):
        run = sandbox.run(*args, timeout=20).ended_with_a_reason()
        assert_no_canary(run, sandbox.cache)


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_no_secret_when_staging_succeeds_and_then_runs_warm(
    sandbox: Sandbox, origin: Origin, log_format: str
) -> None:
    _with_secrets(sandbox, origin)
    sandbox.env.pop("MODEL_FILES")
    host = origin.url.split("://", 1)[1]
    source = f"http://user:{URL_PASSWORD}@{host}/m/model.gguf?X-Amz-Signature={SIGNATURE}"
    sandbox.single(source)
    sandbox.env["LLMKUBE_LOG_FORMAT"] = log_format

    for args in (("stage",), ("stage",), ("verify",), ("plan", "--probe"), ("inspect",)):
        extra = (str(sandbox.cache),) if args[0] == "inspect" else ()
        run = sandbox.run(*args, *extra).ended_with_a_reason()
        assert run.returncode == 0, str(run)
        assert_no_canary(run, sandbox.cache)
