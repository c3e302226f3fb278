"""#24 item 1: the image as KServe's storage initializer. The webhook
injects the container `storage-initializer` with `args: [<storageUri>,
/mnt/models]` (and `src dest src dest ...` for several URIs, as KServe's
initializer-entrypoint takes them): `llmkube-stager SRC_URI DEST_DIR` runs
the same engine as `stage`, with the same termination message and exit codes
(CONTRACT §5)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.origin import Origin
from tests.harness.pod import ROOT, Pod
from tests.harness.sample import payload

pytestmark = pytest.mark.e2e


def visible(dest: Path) -> list[str]:
    """What `ls -R` (and a glob) of the model directory shows: no dot entries."""
    return sorted(
        str(p.relative_to(dest))
        for p in dest.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(dest).parts)
    )


def test_two_positionals_stage_an_https_file_into_dest(pod: Pod, origin: Origin) -> None:
    data = payload(300 << 10, seed=3)
    origin.put("/models/iris/model.joblib", data)
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/models/iris/model.joblib", str(dest))

    assert run.returncode == 0, str(run)
    doc = run.compact_term()
    assert doc["outcome"] == "succeeded" and doc["reason"] == "ModelTransferSucceeded", doc
    assert doc["stats"]["files"] == 1 and doc["stats"]["fetched"] == 1, doc
    assert doc["stats"]["bytes"] == len(data), doc
    assert (dest / "model.joblib").read_bytes() == data
    assert visible(dest) == ["model.joblib"]


def test_several_pairs_stage_each_source_into_its_dest(pod: Pod, origin: Origin) -> None:
    """KServe's initializer-entrypoint: `src_0 dest_0 ... src_n dest_n`."""
    first, second = payload(70 << 10, seed=4), payload(90 << 10, seed=5)
    origin.put("/a/model.onnx", first)
    origin.put("/b/tokenizer.json", second)
    one, two = pod.tmp / "mnt" / "models", pod.tmp / "mnt" / "extra"

    run = pod.run(
        f"{origin.url}/a/model.onnx", str(one), f"{origin.url}/b/tokenizer.json", str(two)
    )

    assert run.returncode == 0, str(run)
    doc = run.compact_term()
    assert doc["stats"]["files"] == 2 and doc["stats"]["fetched"] == 2, doc
    assert (one / "model.onnx").read_bytes() == first
    assert (two / "tokenizer.json").read_bytes() == second
    assert visible(one) == ["model.onnx"] and visible(two) == ["tokenizer.json"]


def test_an_odd_number_of_arguments_is_a_usage_error(pod: Pod, origin: Origin) -> None:
    dest = pod.tmp / "mnt" / "models"
    run = pod.run(f"{origin.url}/a/model.onnx", str(dest), f"{origin.url}/b/x.bin")

    assert run.returncode == 2, str(run)
    doc = run.compact_term()
    assert doc["reason"] == "InvalidConfiguration", doc
    assert "SRC_URI DEST_DIR" in doc["message"], doc
    assert not dest.exists()
    assert origin.requests() == []


@pytest.mark.parametrize(
    ("uri", "scheme"),
    [
        # Not an account's host (#33 item 2 stages those): KServe's looser
        # pattern takes it, so it is refused, never fetched as a plain URL.
        ("https://acct-x.blob.core.windows.net/container/model", "Azure Blob"),
        ("https://acct.file.core.windows.net/share/model", "Azure File"),
        ("hdfs://namenode/models/iris", "hdfs://"),
        ("webhdfs://namenode/models/iris", "webhdfs://"),
        ("oci://registry/model:tag", "oci://"),
        ("modelscope://owner/model", "modelscope://"),
        ("pvc://claim/models", "pvc://"),
        ("https://github.com/org/repo.git", "git"),
    ],
)
def test_schemes_kserve_handles_and_this_image_does_not_exit_2(
    pod: Pod, uri: str, scheme: str
) -> None:
    """Refused before any I/O, naming the scheme (#24 item 2): KServe's
    default initializer keeps serving them (docs/migration-kserve.md)."""
    dest = pod.tmp / "mnt" / "models"
    run = pod.run(uri, str(dest))

    assert run.returncode == 2, str(run)
    doc = run.compact_term()
    assert doc["reason"] == "InvalidConfiguration", doc
    assert scheme in doc["message"], doc
    assert not dest.exists()


def test_a_warm_restart_moves_no_byte_and_the_files_stay(pod: Pod, origin: Origin) -> None:
    """An init container restarted with its emptyDir kept: nothing fetched again."""
    data = payload(200 << 10, seed=6)
    origin.put("/m/model.bin", data)
    dest = pod.tmp / "mnt" / "models"
    pod.run(f"{origin.url}/m/model.bin", str(dest))
    origin.clear_log()

    run = pod.run(f"{origin.url}/m/model.bin", str(dest))

    assert run.returncode == 0, str(run)
    doc = run.compact_term()
    assert doc["stats"]["fetched"] == 0 and doc["stats"]["reused"] == 1, doc
    assert origin.requests() == []
    assert (dest / "model.bin").read_bytes() == data
    assert visible(dest) == ["model.bin"]


def test_a_bare_warm_start_imports_no_click(pod: Pod, origin: Origin) -> None:
    """The KServe form is dispatched before click, like a bare `stage` (#16)."""
    origin.put("/m/model.bin", payload(10 << 10, seed=7))
    dest = pod.tmp / "mnt" / "models"
    uri = f"{origin.url}/m/model.bin"
    pod.run(uri, str(dest))
    probe = (
        "import atexit, json, runpy, sys\n"
        "atexit.register(lambda: print(json.dumps(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('click', 'hashlib', 'tarfile', 'zipfile')))))\n"
        "sys.argv = ['llmkube-stager', *sys.argv[1:]]\n"
        "runpy.run_module('llmkube_stager', run_name='__main__')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, uri, str(dest)],
        env=pod.environ(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(ROOT),
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [], out.stdout


def test_a_killed_container_resumes_and_dest_shows_only_the_model(pod: Pod, origin: Origin) -> None:
    """#24 item 4: the kubelet restarts a killed init container with the
    emptyDir kept; it resumes its partial (kept in the private dot
    directory, invisible in DEST_DIR) instead of starting over."""
    data = payload(6 << 20, seed=21)
    origin.put("/big/model.bin", data, rate_bytes_per_s=2 << 20)
    dest = pod.tmp / "mnt" / "models"
    uri = f"{origin.url}/big/model.bin"
    private = dest / ".llmkube-stager" / "model"

    def partial_bytes() -> int:
        if not private.is_dir():
            return 0
        return sum(p.stat().st_size for p in private.iterdir() if p.name.startswith("model.bin."))

    proc = pod.popen(uri, str(dest), LLMKUBE_CONNECTIONS="1")
    deadline = time.monotonic() + 30
    while partial_bytes() < (1 << 20):
        assert proc.poll() is None, "the stager ended before it was killed"
        assert time.monotonic() < deadline, "no partial grew"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    pod.finish(proc)
    assert visible(dest) == []  # nothing half-done where the server looks
    origin.clear_log()
    origin.put("/big/model.bin", data)  # full speed now, same ETag

    run = pod.run(uri, str(dest))

    assert run.returncode == 0, str(run)
    assert (dest / "model.bin").read_bytes() == data
    ranges = [r.headers.get("range", "") for r in origin.requests(method="GET")]
    assert ranges and all(
        r.startswith("bytes=") and not r.startswith("bytes=0-") for r in ranges
    ), ranges
    assert visible(dest) == ["model.bin"]
    assert sorted(p.name for p in dest.iterdir()) == [".llmkube-stager", "model.bin"]


def test_an_unreachable_origin_exits_1_with_the_stage_message(pod: Pod) -> None:
    from tests.harness.origin import closed_port_url

    dest = pod.tmp / "mnt" / "models"
    run = pod.run(f"{closed_port_url()}/m/model.bin", str(dest))

    assert run.returncode == 1, str(run)
    doc = run.compact_term()
    assert doc["reason"] == "ModelSourceUnreachable" and doc["retryable"] is True, doc
    assert doc["message"].startswith("ERROR: ModelSourceUnreachable:"), doc
    assert doc["message"].endswith(doc["remedy"]), doc
    assert visible(dest) == []
