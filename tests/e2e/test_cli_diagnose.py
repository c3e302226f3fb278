"""`diagnose` from the command line: a failed stage's termination file -> condition."""

from __future__ import annotations

import json

from tests.harness.origin import closed_port_url
from tests.harness.pod import Pod


def test_diagnose_turns_a_failed_stage_into_its_condition(pod: Pod) -> None:
    pod.single(closed_port_url() + "/m.gguf", name="m.gguf")
    assert pod.run("stage", LLMKUBE_RETRIES="0").returncode == 1

    from_file = pod.run("diagnose", str(pod.term_path), fresh_term=False)
    from_stdin = pod.run("diagnose", "-", stdin="curl: (22) The requested URL returned error: 404")

    condition = json.loads(from_file.stdout)
    assert from_file.returncode == 0
    assert condition["type"] == "ModelTransferHealthy" and condition["status"] == "False"
    assert condition["reason"] == "ModelSourceUnreachable" and condition["retryable"] is True
    assert json.loads(from_stdin.stdout)["reason"] == "ModelSourceNotFound"
    assert json.loads(pod.run("diagnose", "-", stdin="all good\n").stdout) == {}
