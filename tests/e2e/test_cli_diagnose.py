"""`diagnose` from the command line: a failed stage's termination file -> condition."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.harness.origin import closed_port_url


def _cli(
    *args: str, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmkube_stager", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_diagnose_turns_a_failed_stage_into_its_condition(tmp_path: Path) -> None:
    term = tmp_path / "termination-log"
    env = {
        "PATH": "/usr/bin:/bin",
        "MODEL_SOURCE": closed_port_url() + "/m.gguf",
        "MODEL_PATH": str(tmp_path / "cache" / "m.gguf"),
        "LLMKUBE_TERMINATION_LOG": str(term),
        "LLMKUBE_CONNECT_TIMEOUT": "1",
        "LLMKUBE_RETRIES": "0",
    }
    assert _cli("stage", env=env).returncode == 1  # unreachable: retryable

    from_file = _cli("diagnose", str(term), env=env)
    from_stdin = _cli(
        "diagnose", "-", env=env, stdin="curl: (22) The requested URL returned error: 404"
    )

    condition = json.loads(from_file.stdout)
    assert from_file.returncode == 0
    assert condition["type"] == "ModelTransferHealthy" and condition["status"] == "False"
    assert condition["reason"] == "ModelSourceUnreachable" and condition["retryable"] is True
    assert json.loads(from_stdin.stdout)["reason"] == "ModelSourceNotFound"
    assert json.loads(_cli("diagnose", "-", env=env, stdin="all good\n").stdout) == {}
