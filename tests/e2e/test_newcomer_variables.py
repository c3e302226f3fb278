"""#46 item 4, variables: a misspelt variable of the agent's prefixes is
named, with the closest known name, instead of being ignored or answered
with "MODEL_SOURCE is required"; a comma-separated MODEL_FILES is told to
be one name per line; a pin may say `sha256:` first. `python -m
llmkube_stager` as a user runs it; evidence: the log, the exit code, the
bytes on disk."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload

pytestmark = pytest.mark.e2e

DATA = payload(8 * 1024, seed=31)


def test_a_misspelt_model_source_is_named_with_the_right_one(pod: Pod, origin: Origin) -> None:
    origin.put("/m.gguf", DATA)
    pod.single(origin.url + "/m.gguf")
    source = pod.env.pop("MODEL_SOURCE")

    run = pod.run(MODEL_SOUCE=source)

    run.failed("InvalidConfiguration", exit_code=2)
    assert "MODEL_SOUCE is not a variable of llmkube-stager; did you mean MODEL_SOURCE?" in (
        run.line_with("MODEL_SOUCE")
    )
    assert source not in run.stderr.replace("MODEL_SOURCE", "")  # the value is not echoed


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("LLMKUBE_REFRESH_POLCY", "LLMKUBE_REFRESH_POLICY"),
        ("CACHE_DIRR", "CACHE_DIR"),
        ("MODEL_SHA265", "MODEL_SHA256"),
    ],
)
def test_a_misspelt_setting_is_warned_about_and_the_run_goes_on(
    pod: Pod, origin: Origin, typo: str, meant: str
) -> None:
    origin.put("/m.gguf", DATA)
    dest = pod.single(origin.url + "/m.gguf")

    run = pod.run(**{typo: "x"}).ok()

    assert f"WARNING: {typo} is not a variable of llmkube-stager; did you mean {meant}?" in (
        run.stderr
    )
    assert dest.read_bytes() == DATA


def test_the_operators_own_variables_are_not_warned_about(pod: Pod, origin: Origin) -> None:
    # Set by the operator's pod spec (spec §2.1, §2.3), not read by the agent.
    origin.put("/m.gguf", DATA)
    pod.single(origin.url + "/m.gguf")

    run = pod.run(MODEL_DIGEST_FIELD="spec.sha256", LLMKUBE_CA_BUNDLE="/tmp/x").ok()

    assert "not a variable of llmkube-stager" not in run.stderr


def test_a_comma_separated_file_list_says_one_name_per_line(pod: Pod, origin: Origin) -> None:
    origin.put("/r/a.bin", DATA)
    origin.put("/r/b.bin", DATA)
    pod.multi(origin.url + "/r/", ["a.bin,b.bin"])

    run = pod.run()

    assert run.returncode != 0, str(run)  # one name, "a.bin,b.bin": not at the origin
    line = run.line_with("one name per line")
    assert line.startswith("WARNING: MODEL_FILES") and "'a.bin,b.bin'" in line


@pytest.mark.parametrize("prefix", ["sha256:", "SHA256:"])
def test_a_pin_may_say_sha256_first(pod: Pod, origin: Origin, prefix: str) -> None:
    origin.put("/m.gguf", DATA)
    origin.put("/r/a.bin", DATA)
    digest = hashlib.sha256(DATA).hexdigest()
    dest = pod.single(origin.url + "/m.gguf")

    pod.run(MODEL_SHA256=prefix + digest).ok()
    root = pod.multi(origin.url + "/r/", ["a.bin"])
    pod.run(MODEL_FILE_SHA256=f"{prefix}{digest} a.bin").ok()

    assert dest.read_bytes() == DATA and (root / "a.bin").read_bytes() == DATA
    assert Path(str(dest) + ".sha256").read_text().startswith(digest)


def test_a_wrong_pin_with_the_prefix_still_fails_closed(pod: Pod, origin: Origin) -> None:
    origin.put("/m.gguf", DATA)
    dest = pod.single(origin.url + "/m.gguf")

    run = pod.run(MODEL_SHA256="sha256:" + "0" * 64)

    assert run.returncode != 0, str(run)
    assert not dest.exists()


def test_a_ca_dir_that_is_not_there_is_named(pod: Pod, origin: Origin) -> None:
    # A ConfigMap not mounted, a path mistyped: before, nothing said so and
    # the first TLS failure blamed the origin's certificate.
    origin.put("/m.gguf", DATA)
    dest = pod.single(origin.url + "/m.gguf")
    missing = pod.tmp / "etc-llmkube-ca"

    run = pod.run(LLMKUBE_CA_DIR=str(missing)).ok()

    line = run.line_with("LLMKUBE_CA_DIR")
    assert line.startswith("WARNING: LLMKUBE_CA_DIR") and "no such directory" in line
    assert "system" in line  # what is trusted instead
    assert dest.read_bytes() == DATA


def test_the_default_ca_dir_missing_is_not_warned_about(pod: Pod, origin: Origin) -> None:
    # /custom-certs is mounted only with --ca-cert-configmap (spec §2.4).
    origin.put("/m.gguf", DATA)
    pod.single(origin.url + "/m.gguf")

    run = pod.run(LLMKUBE_CA_DIR=None).ok()

    assert "LLMKUBE_CA_DIR" not in run.stderr
