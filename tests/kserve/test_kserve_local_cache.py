"""#44 item 2: KServe's local model cache. The LocalModelNode agent runs one
download Job per model and node with the ClusterStorageContainer whose
workloadType is localModelDownloadJob: `args: [uri, /mnt/models]`, the
node's PVC mounted at /mnt/models with `subPath: models/<storage key>`,
`restartPolicy: Never` and a retried pod on failure (localmodelnode/
controller.go launchJob). Each test runs the CLI entry point with those
args against that directory (tests/harness/kserve_pods.py)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from tests.harness.hub import FakeHub
from tests.harness.kserve_pods import MODELS, job_models_dir, visible
from tests.harness.loopback import Request
from tests.harness.mounts import mount_ro_bind, tmpfs, unmount
from tests.harness.origin import Fault
from tests.harness.pod import Pod
from tests.harness.sample import payload

pytestmark = pytest.mark.e2e

REPO = "org/cached-llm"
URI = f"hf://{REPO}"
PRIVATE = ".llmkube-stager"


def model(seed: int, weights_bytes: int = 3 << 20) -> dict[str, bytes]:
    return {
        "config.json": b'{"model_type": "llama"}',
        "model-00001-of-00002.safetensors": payload(weights_bytes, seed),
        "model-00002-of-00002.safetensors": payload(weights_bytes, seed + 1),
    }


def job_args(pvc: Path) -> list[str]:
    """The Job container's args, /mnt/models being the PVC's subPath."""
    dest = job_models_dir(pvc, URI)
    dest.mkdir(parents=True, exist_ok=True)  # the kubelet creates a subPath
    return [URI, str(dest)]


def throttle(hub: FakeHub, files: dict[str, bytes], rate_bytes_per_s: int) -> None:
    for rel in files:
        if rel.endswith(".safetensors"):
            hub.cdn.set_fault(hub.cdn_path_of(REPO, rel), Fault(rate_bytes_per_s=rate_bytes_per_s))


def unthrottle(hub: FakeHub, files: dict[str, bytes]) -> None:
    for rel in files:
        if rel.endswith(".safetensors"):
            hub.cdn.set_fault(hub.cdn_path_of(REPO, rel), None)


def written_bytes(dest: Path) -> int:
    """Bytes on disk in the partials of the private directory."""
    parts = (dest / PRIVATE).rglob("*.llmkube-part*")
    return sum(p.stat().st_blocks * 512 for p in parts if p.is_file())


def shard_requests(hub: FakeHub, path: str) -> list[Request]:
    """The CDN's GETs of one LFS object (its URL carries a signed query)."""
    return [r for r in hub.cdn.requests() if r.path.split("?")[0] == path and r.method == "GET"]


def env_of(hub: FakeHub) -> dict[str, str]:
    return {"HF_ENDPOINT": hub.url, "LLMKUBE_FILES_IN_FLIGHT": "1"}


def test_a_killed_job_pod_resumes_in_the_retried_pod(pod: Pod, hub: FakeHub) -> None:
    """SIGKILL (an evicted or OOM-killed pod) mid-download; the Job's next
    pod mounts the same subPath and resumes with ranged requests."""
    files = model(11, weights_bytes=24 << 20)
    hub.add_repo(REPO, files)
    throttle(hub, files, 8 << 20)
    pvc = pod.tmp / "pvc"
    args = job_args(pvc)
    dest = Path(args[1])

    first = hub.cdn_path_of(REPO, "model-00001-of-00002.safetensors")
    proc = pod.popen(*args, env=env_of(hub))
    deadline = time.monotonic() + 30
    while written_bytes(dest) < (8 << 20):
        assert proc.poll() is None, "the download ended before it was killed"
        assert time.monotonic() < deadline, "no partial grew"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    pod.finish(proc)
    assert visible(dest) == {}, "a killed pod left files where the server looks"
    unthrottle(hub, files)
    hub.cdn.clear_log()

    retried = pod.run(*args, env=env_of(hub))

    retried.ok(files=3)
    assert visible(dest) == files
    starts = [int(r.headers["range"][6:].split("-")[0]) for r in shard_requests(hub, first)]
    size = len(files["model-00001-of-00002.safetensors"])
    assert starts and all(0 < start < size for start in starts), starts
    assert sorted(p.name for p in (pvc / "models").iterdir()) == [dest.name]


def test_two_jobs_for_one_key_end_with_the_right_model(pod: Pod, hub: FakeHub) -> None:
    """Two LocalModelNodes' Jobs (or a Job and its recreated twin) download
    one key into one directory at once: both end, the model is whole."""
    files = model(21, weights_bytes=2 << 20)
    hub.add_repo(REPO, files)
    throttle(hub, files, 4 << 20)
    args = job_args(pod.tmp / "pvc")
    dest = Path(args[1])

    # Two pods, each with its own termination log.
    pods = [pod, Pod(pod.tmp / "second-pod", budget=pod.budget)]
    procs = [(p, p.popen(*args, env=env_of(hub))) for p in pods]
    runs = [p.finish(proc, timeout=90) for p, proc in procs]

    for run in runs:
        run.ok(files=3)
    assert visible(dest) == files
    fetched = sum(run.compact_term()["stats"]["fetched"] for run in runs)
    assert fetched == 3, [run.compact_term()["stats"] for run in runs]


def test_a_model_that_does_not_fit_fails_before_downloading(pod: Pod, hub: FakeHub) -> None:
    """Two shards of 1.5 MiB on a 2 MiB volume: each fits alone, the model
    does not. Refused before the first byte, with what it needs and what
    the volume has (KServe's jobs otherwise fill the disk and fail late)."""
    files = model(31, weights_bytes=3 << 19)
    hub.add_repo(REPO, files)
    with tmpfs(pod.tmp / "pvc", "size=2m") as pvc:
        args = job_args(pvc)

        run = pod.run(*args, env=env_of(hub))

        run.failed("ModelTransferOutOfSpace")
        detail = run.compact_term()["message"]
        need = sum(len(d) for d in files.values())
        assert f"{need} bytes" in detail, detail
        assert "bytes free" in detail and "nothing was downloaded" in detail, detail
        assert hub.cdn.requests() == [], "bytes were fetched for a model that cannot fit"
        assert hub.requests("resolve") == [], "a file was fetched for a model that cannot fit"
        assert visible(Path(args[1])) == {}


def test_a_read_only_reader_sees_only_complete_files(pod: Pod, hub: FakeHub) -> None:
    """The serving pods mount the cache read-only while the Job downloads:
    every file they can open is whole, from the first glance to the last."""
    files = model(41, weights_bytes=1 << 20)
    hub.add_repo(REPO, files)
    throttle(hub, files, 2 << 20)
    args = job_args(pod.tmp / "pvc")
    reader = pod.tmp / "serving" / MODELS.lstrip("/")
    mount_ro_bind(Path(args[1]), reader)
    seen: list[dict[str, bytes]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(visible(reader))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        run = pod.run(*args, env=env_of(hub))
    finally:
        stop.set()
        watcher.join()
        final = visible(reader)
        unmount(reader)

    run.ok(files=3)
    assert final == files
    assert len(seen) > 10, "the reader did not look during the download"
    for glance in seen:
        for rel, data in glance.items():
            assert data == files[rel], f"{rel}: {len(data)} of {len(files[rel])} bytes"


FS_GROUP = 2000
JOB_UID = 65532  # the securityContext of docs/kubernetes/kserve/local-model-cache.yaml
SERVER_UID = 1001  # a serving pod's uid: another user of the same fsGroup


def test_the_job_writes_through_its_fs_group_and_servers_read(hub: FakeHub) -> None:
    """The Job's pod runs as a non-root uid whose only right on the PVC is
    the pod's fsGroup (the volume group-owned, setgid, group-writable): the
    model is staged, and a serving pod of another uid in that group reads
    every file."""
    import os
    import shutil
    import subprocess
    import tempfile

    from tests.harness.pod import SHORT_BUDGET

    files = model(61, weights_bytes=256 << 10)
    hub.add_repo(REPO, files)
    # Not under pytest's tmp (0700 root): the uids must reach it.
    top = Path(tempfile.mkdtemp(prefix="llmkube-fsgroup-"))
    try:
        top.chmod(0o755)
        pvc = top / "pvc"
        dest = job_models_dir(pvc, URI)
        dest.mkdir(parents=True)
        for d in (pvc, pvc / "models", dest):
            os.chown(d, 0, FS_GROUP)
            d.chmod(0o2775)
        job = Pod(
            top / "job",
            budget=SHORT_BUDGET,
            wrapper=["setpriv", f"--reuid={JOB_UID}", f"--regid={JOB_UID}", f"--groups={FS_GROUP}"],
        )
        (top / "job").chmod(0o777)
        (top / "job" / "home").chmod(0o777)

        run = job.run(URI, str(dest), env=env_of(hub))

        run.ok(files=3, fetched=3)
        reader = [
            "setpriv", f"--reuid={SERVER_UID}", f"--regid={SERVER_UID}", f"--groups={FS_GROUP}",
            "sha256sum", *sorted(files),
        ]  # fmt: skip
        read = subprocess.run(reader, cwd=dest, capture_output=True, text=True, check=False)
        assert read.returncode == 0, read.stderr
        for rel in files:
            st = (dest / rel).stat()
            assert st.st_uid == JOB_UID and st.st_gid == FS_GROUP, (rel, st.st_uid, st.st_gid)
        assert visible(dest) == files
    finally:
        shutil.rmtree(top, ignore_errors=True)
