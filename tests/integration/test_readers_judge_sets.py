"""Every read-only command judges a publish in progress as `stage` does
(#21 item 3). An OnChange publish of 300 files stopped after 6 renames (the
real publish loop, ended at its 6th "revalidated (downloaded)" line by an
exception standing for a SIGKILL: the disk is left exactly as a kill leaves
it) holds 6 new and 294 old files, each with a matching size record, and the
intent with its 294 partials. `stage` on a read-only cache refused it;
`verify`, the reader pod's command, exited 0. Now `verify` fails with
ModelCacheIncomplete, `plan` shows the refusal, `inspect` the intent. Failed
before the fix: verify rc 0, "succeeded"."""

from __future__ import annotations

import json

import pytest

from tests.harness.origin import Origin
from tests.harness.pod import Pod, as_fuse
from tests.harness.sample import payload

FILES = 300
RENAMED = 6
RECORD = ".llmkube-size"


class SimulatedKill(BaseException):
    """A SIGKILL at this moment: nothing after it runs."""


def _half_published(pod: Pod, origin: Origin) -> tuple[dict[str, str], dict[str, bytes]]:
    files = [f"shard-{i:03d}.bin" for i in range(FILES)]
    cache = pod.cache_dir
    cache.mkdir(parents=True)
    old, new = {}, {}
    for i, rel in enumerate(files):
        old[rel] = payload(512 + i, i)
        (cache / rel).write_bytes(old[rel])
        (cache / (rel + RECORD)).write_text(str(len(old[rel])))
        new[rel] = payload(1024 + i, 1000 + i)
        origin.put(f"/repo/{rel}", new[rel])
    env = pod.multi_env(
        origin.url + "/repo/", files, LLMKUBE_REFRESH_POLICY="OnChange", LLMKUBE_RETRIES="0"
    )
    renamed: list[str] = []

    def kill_after_renames(text: str) -> None:
        if "revalidated (downloaded)" in text:
            renamed.append(text)
            if len(renamed) == RENAMED:
                raise SimulatedKill

    with pytest.raises(SimulatedKill):
        pod.stage(env, on_line=kill_after_renames)
    got = {rel: (cache / rel).read_bytes() for rel in files}
    assert sum(got[r] == new[r] for r in files) == RENAMED
    assert sum(got[r] == old[r] for r in files) == FILES - RENAMED
    for rel in files:  # every file matches its record: only the intent tells
        assert (cache / (rel + RECORD)).read_text() == str(len(got[rel]))
    return env, new


def test_verify_refuses_a_half_published_onchange_set(origin: Origin, pod: Pod) -> None:
    env, _new = _half_published(pod, origin)
    reader = {**env, "LLMKUBE_REFRESH_POLICY": "IfNotPresent"}
    origin.clear_log()

    verify = pod.run("verify", env=reader, timeout=30)
    verify.failed("ModelCacheIncomplete", retryable=False)
    assert "interrupted" in verify.term["message"], verify.term
    refused = pod.stage(reader, fs=as_fuse)  # stage, as before: the same verdict
    assert refused.reason == "ModelCacheIncomplete", refused.stderr
    assert refused.error is not None and refused.error.detail in verify.term["message"]
    assert verify.term["file"] == refused.error.file

    plan = pod.run("plan", "--json", env=reader, timeout=30)
    assert plan.returncode == 0, plan
    doc = json.loads(plan.stdout)
    # This plan's pod may write (a local disk): it rolls the publish forward.
    assert [len(p["files"]) for p in doc["publishing"]] == [FILES - RENAMED], doc["publishing"]
    assert doc["refusal"] is None, doc["refusal"]

    inspect = pod.run("inspect", "--json", str(pod.cache_dir), timeout=30)
    assert inspect.returncode == 0, inspect
    report = json.loads(inspect.stdout)
    assert report["refusal"]["reason"] == "ModelCacheIncomplete", report.get("refusal")
    assert report["refusal"]["detail"] == refused.error.detail
    assert [len(v) for v in report["publishing"].values()] == [FILES - RENAMED]
    assert origin.requests() == [], "a read-only command asked the origin"


def test_verify_passes_once_a_writer_rolled_the_set_forward(origin: Origin, pod: Pod) -> None:
    env, new = _half_published(pod, origin)
    reader = {**env, "LLMKUBE_REFRESH_POLICY": "IfNotPresent"}
    origin.clear_log()
    pod.stage(reader).ok()
    assert origin.requests(method="GET") == [], "rolled forward without fetching again"
    pod.run("verify", env=reader, timeout=30).ok()
    for rel, data in new.items():
        assert (pod.cache_dir / rel).read_bytes() == data
    plan = json.loads(pod.run("plan", "--json", env=reader, timeout=30).stdout)
    assert plan["refusal"] is None and plan["publishing"] == []
