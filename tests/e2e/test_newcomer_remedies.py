"""#46 item 6, remedies in the user's words: the CLI run as a person or a Job
of one's own runs it names the variables they set (MODEL_SOURCE, HF_TOKEN,
AWS_*, MODEL_SHA256, LLMKUBE_CA_DIR), never an LLMKube Model's `spec.*`
field or an operator flag; under the operator (LLMKUBE_REMEDY_WORDS=operator,
which the image's `sh` sets for an operator command) the constants stay byte
for byte what the operator's diagnosis matches (spec §11.2). And the other
dead ends of a first hour: `verify` on a bad copy, an unsigned S3 request,
the commit an `hf://` run used, `plan --probe` of a missing file, `diagnose`
of text that holds no termination message, a 401 from a plain origin.
Evidence: exit codes, the termination message, the log, stdout."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from llmkube_stager import errors
from llmkube_stager.schemes import REMEDY_LOCK_UNSUPPORTED_PREFETCH
from llmkube_stager.words import variables_remedy
from tests.harness.canary import HF_TOKEN
from tests.harness.hub import FakeHub
from tests.harness.origin import Fault, Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload
from tests.harness.seaweed import SeaweedS3, s3_env, without_keys

pytestmark = pytest.mark.e2e

DATA = payload(8 * 1024, seed=46)
# What an LLMKube Model has, and the operator's flags: not a user's words.
OPERATOR_WORDS = re.compile(r"spec\.[a-zA-Z]|--ca-cert-configmap|--allowed-host-path-roots")


def _no_operator_words(doc: dict[str, object]) -> None:
    """The remedy (which `message` ends with); the cause keeps the scripts'
    words, which alerts grep for (spec §11.4: `spec.sha256 mismatch`)."""
    assert not OPERATOR_WORDS.search(str(doc["remedy"])), doc["remedy"]
    assert str(doc["message"]).endswith(str(doc["remedy"]))


def test_a_missing_file_names_model_source(pod: Pod, origin: Origin) -> None:
    pod.single(origin.url + "/gone.gguf")

    doc = pod.run().failed("ModelSourceNotFound").compact_term()

    _no_operator_words(doc)
    assert "MODEL_SOURCE" in doc["remedy"], doc


def test_under_the_operator_the_remedy_is_the_operators_constant(pod: Pod, origin: Origin) -> None:
    pod.single(origin.url + "/gone.gguf")

    doc = pod.run(LLMKUBE_REMEDY_WORDS="operator").failed("ModelSourceNotFound").compact_term()

    assert doc["remedy"] == errors.REMEDY_NOT_FOUND


def test_a_wrong_pin_names_model_sha256(pod: Pod, origin: Origin) -> None:
    origin.put("/m.gguf", DATA)
    pod.single(origin.url + "/m.gguf")

    doc = pod.run(MODEL_SHA256="0" * 64).failed("ModelTransferChecksumMismatch").compact_term()

    _no_operator_words(doc)
    assert "MODEL_SHA256" in doc["remedy"], doc


def test_a_401_from_a_plain_origin_says_which_credentials_it_can_carry(
    pod: Pod, origin: Origin
) -> None:
    origin.put("/m.gguf", DATA)
    origin.set_fault("/m.gguf", Fault(status=401))
    pod.single(origin.url + "/m.gguf")

    doc = pod.run().failed("ModelSourceUnauthorized").compact_term()

    _no_operator_words(doc)
    assert "user:password@" in doc["remedy"].lower(), doc  # userinfo in MODEL_SOURCE
    assert "MODEL_SOURCE" in doc["remedy"], doc


def test_verify_of_a_bad_copy_says_to_run_stage_and_stage_repairs_it(
    pod: Pod, origin: Origin
) -> None:
    origin.put("/m.gguf", DATA)
    dest = pod.single(origin.url + "/m.gguf")
    pin = hashlib.sha256(DATA).hexdigest()
    pod.run(MODEL_SHA256=pin).ok()
    bad = bytearray(DATA)
    bad[100] ^= 0xFF
    dest.write_bytes(bytes(bad))  # same size, other bytes: the size record still matches

    doc = pod.run("verify", MODEL_SHA256=pin).failed("ModelTransferChecksumMismatch")
    term = doc.compact_term()

    _no_operator_words(term)
    assert "llmkube-stager stage" in term["remedy"], term
    assert "marker" not in term["remedy"], term  # verify writes none; there is none to delete
    pod.run(MODEL_SHA256=pin).ok()
    assert dest.read_bytes() == DATA
    pod.run("verify", MODEL_SHA256=pin).ok()


def test_plan_probe_of_a_missing_file_exits_non_zero(pod: Pod, origin: Origin) -> None:
    origin.put("/r/config.json", b"{}")
    pod.multi(origin.url + "/r/", ["config.json", "gone.safetensors"])

    run = pod.run("plan", "--json", "--probe")

    assert run.returncode == 4, str(run)  # the probe's own reason: not found, exit 4
    doc = json.loads(run.stdout)  # the whole plan is still printed
    rows = {row["file"]: row for row in doc["files"]}
    assert rows["gone.safetensors"]["remote"]["error"] == "ModelSourceNotFound"
    assert "gone.safetensors" in run.line_with("ERROR: ModelSourceNotFound")
    assert not pod.models.exists()


def test_plan_probe_that_succeeds_exits_0(pod: Pod, origin: Origin) -> None:
    origin.put("/r/config.json", b"{}")
    pod.multi(origin.url + "/r/", ["config.json"])

    assert pod.run("plan", "--probe").returncode == 0


def test_diagnose_of_text_without_a_termination_message_says_so(pod: Pod) -> None:
    run = pod.run("diagnose", "-", stdin="all good\nnothing to see\n")

    assert run.returncode == 0, str(run)
    assert json.loads(run.stdout) == {}  # a controller sets no condition
    assert "no termination message" in run.stderr, run.stderr


def test_inspect_lists_no_record_of_the_agent_as_a_model_file(pod: Pod, tmp_path: Path) -> None:
    cache = tmp_path / "models" / "k"
    cache.mkdir(parents=True)
    (cache / "model.gguf").write_bytes(DATA)
    digest = hashlib.sha256(DATA).hexdigest()
    # Every record kind the agent keeps beside a model (layout.py, cache/).
    for name in (
        "model.gguf.llmkube-size",
        "model.gguf.sha256",
        "model.gguf.llmkube-evidence",
        f"model.gguf.{digest}.sha256-rejected",
        ".llmkube.lock",
        ".llmkube-validators",
        ".llmkube-validators.writers",
        ".llmkube-validators.job-commit",
        ".llmkube-validators.signature",
        ".llmkube-validators.signature.bundle",
        ".llmkube-validators.0-of-2",
        ".llmkube-shards",
        ".llmkube-listing",
    ):
        (cache / name).write_text("x")

    run = pod.run("inspect", "--json", str(cache))

    assert run.returncode == 0, str(run)
    assert [f["path"] for f in json.loads(run.stdout)["files"]] == ["model.gguf"]


def test_an_hf_run_logs_its_commit_and_inspect_shows_it(pod: Pod, hub: FakeHub) -> None:
    commit = hub.add_repo("org/m", {"model.gguf": DATA})
    dest = pod.single("hf://org/m/model.gguf", name="model.gguf", key="hf")

    run = pod.run(HF_ENDPOINT=hub.url, HF_TOKEN=HF_TOKEN).ok()

    assert commit in run.line_with("commit"), run.stderr
    shown = pod.run("inspect", str(dest.parent))
    assert shown.returncode == 0, str(shown)
    assert commit in shown.stdout, shown.stdout
    assert commit in json.dumps(json.loads(pod.run("inspect", "--json", str(dest.parent)).stdout))


def test_an_unsigned_s3_request_refused_says_no_credentials_were_found(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    s3.put(bucket, "m.gguf", DATA)
    env = pod.single_env(f"s3://{bucket}/m.gguf", **without_keys(s3_env(s3)))

    doc = pod.run(env=env).failed("ModelSourceUnauthorized").compact_term()

    assert "no AWS credentials were found" in doc["message"], doc
    assert "AWS_ACCESS_KEY_ID" in doc["remedy"] and "AWS_SECRET_ACCESS_KEY" in doc["remedy"], doc
    _no_operator_words(doc)


def test_diagnose_of_a_log_tail_finds_the_lock_remedy_in_the_variables_words(pod: Pod) -> None:
    remedy = variables_remedy(REMEDY_LOCK_UNSUPPORTED_PREFETCH, "http")
    line = (
        "ERROR: ModelCacheLockUnsupported: FUSE cache cannot guarantee cross-node file locking "
        f"for staging model.gguf; {remedy}\n"
    )

    run = pod.run("diagnose", "-", stdin=line)

    assert run.returncode == 0, str(run)
    condition = json.loads(run.stdout)
    assert condition["reason"] == "ModelCacheLockUnsupported"
    assert remedy in condition["message"], condition
