"""Local sources (file:///abs, /abs, the host-path model) and pvc:// verify
(spec §3.4, §3.5, §15.2 scenario 93). Real files, real copies.

The tests run as root, for whom every file is readable; "unreadable" is
produced in a forked child that drops to uid/gid 65534 before staging.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from llmkube_stager.model import Decision
from tests.harness.disk import debris, record_of, sha256, snapshot, tree
from tests.harness.features import missing_feature
from tests.harness.pod import SOURCE_BUDGET, Pod
from tests.harness.sample import payload

KIB = 1024
NOBODY = 65534


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# -- copies -------------------------------------------------------------------------------------


def test_file_url_single_copy_cli(pod) -> None:
    data = payload(300 * KIB)
    source = write(pod.tmp / "host" / "models" / "llama.gguf", data)

    run = pod.run(env=pod.single_env(f"file://{source}"))

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    assert record_of(pod.dest()) == str(len(data))
    assert "Copying model from local source..." in run.stderr
    assert "Model copied successfully" in run.stderr
    assert debris(pod.cache_dir, markers=True) == []
    assert source.read_bytes() == data  # the source is never touched


def test_plain_absolute_path_copy_and_warm_restart(pod) -> None:
    data = payload(64 * KIB)
    source = write(pod.tmp / "host" / "m.gguf", data)
    env = pod.single_env(str(source))

    first = pod.stage(env).ok()
    second = pod.stage(env).ok()

    assert pod.dest().read_bytes() == data
    assert first.count(Decision.FETCH) == 1
    assert second.count(Decision.REUSE) == 1
    assert second.has_line("Model already cached, skipping copy")


def test_host_model_mount_is_preferred_when_it_exists(pod) -> None:
    mounted = write(pod.tmp / "host-model" / "model.gguf", payload(16 * KIB, 1))
    declared = write(pod.tmp / "declared" / "m.gguf", payload(16 * KIB, 2))

    pod.stage(pod.single_env(f"file://{declared}", LLMKUBE_HOST_MODEL=str(mounted))).ok()

    assert pod.dest().read_bytes() == mounted.read_bytes()


def test_declared_path_is_used_when_no_host_model_is_mounted(pod) -> None:
    declared = write(pod.tmp / "declared" / "m.gguf", payload(16 * KIB, 2))

    pod.stage(
        pod.single_env(f"file://{declared}", LLMKUBE_HOST_MODEL=str(pod.tmp / "absent.gguf"))
    ).ok()

    assert pod.dest().read_bytes() == declared.read_bytes()


def test_multi_file_local_directory(pod) -> None:
    root = pod.tmp / "host" / "llama"
    files = {
        "model-00001-of-00002.safetensors": payload(48 * KIB, 1),
        "model-00002-of-00002.safetensors": payload(24 * KIB, 2),
        "tokenizer/tokenizer.json": b'{"v": 1}',
        "config.json": b"{}",
    }
    for rel, data in files.items():
        write(root / rel, data)
    write(root / "unlisted.bin", b"no")

    run = pod.stage(pod.multi_env(f"file://{root}", files)).ok()

    assert run.count(Decision.FETCH) == 4
    published = {k: v for k, v in tree(pod.cache_dir).items() if not k.endswith(".llmkube-size")}
    published.pop(".llmkube.lock", None)
    published.pop(".llmkube-validators")  # the run record (#46 items 1, 2)
    assert published == files
    for rel, data in files.items():
        assert record_of(pod.dest(rel)) == str(len(data))


def test_pinned_local_copy_is_verified_and_stamped(pod) -> None:
    data = payload(32 * KIB)
    source = write(pod.tmp / "host" / "m.gguf", data)

    pod.stage(pod.single_env(str(source), MODEL_SHA256=sha256(data))).ok()

    dest = pod.dest()
    assert dest.read_bytes() == data
    st = dest.stat()
    stamp = Path(f"{dest}.sha256").read_text().split()
    assert stamp == [sha256(data), str(st.st_size), str(int(st.st_mtime))]


def test_pinned_local_copy_with_the_wrong_digest_is_discarded(pod) -> None:
    data = payload(32 * KIB)
    source = write(pod.tmp / "host" / "m.gguf", data)
    wrong = sha256(b"something else")

    run = pod.stage(pod.single_env(str(source), MODEL_SHA256=wrong)).failed(
        "ModelTransferChecksumMismatch"
    )

    assert "spec.sha256 mismatch" in run.detail and "discarded" in run.detail
    assert not pod.dest().exists()
    assert Path(f"{pod.dest()}.{wrong}.sha256-rejected").read_text() == sha256(data)


# -- refusals --------------------------------------------------------------------------------------


def test_missing_source(pod) -> None:
    missing = pod.tmp / "host" / "nope.gguf"

    run = pod.stage(pod.single_env(f"file://{missing}")).failed("ModelSourceNotFound")

    assert f"{missing} does not exist on the mounted volume" in run.detail
    assert not pod.dest().exists()


def test_directory_source(pod) -> None:
    directory = pod.tmp / "host" / "a-dir.gguf"
    directory.mkdir(parents=True)

    run = pod.stage(pod.single_env(str(directory))).failed("ModelSourceNotFound")

    assert f"{directory} is a directory, not a file" in run.detail


def test_missing_file_of_a_local_directory(pod) -> None:
    root = pod.tmp / "host" / "llama"
    write(root / "config.json", b"{}")

    run = pod.stage(pod.multi_env(str(root), ["config.json", "weights.bin"])).failed(
        "ModelSourceNotFound"
    )

    assert run.error is not None and run.error.file == "weights.bin"
    assert "does not exist on the mounted volume" in run.detail


@pytest.mark.parametrize(
    "source",
    ["{outside}/m.gguf", "{allowed}-evil/m.gguf", "file://{allowed}/../outside/m.gguf"],
    ids=["outside", "prefix-lookalike", "dot-dot"],
)
def test_source_outside_the_allowed_roots_is_refused(pod, source) -> None:
    allowed, outside = pod.tmp / "allowed", pod.tmp / "outside"
    for root in (allowed, outside, Path(f"{allowed}-evil")):
        write(root / "m.gguf", payload(1 * KIB))
    env = pod.single_env(
        source.format(allowed=allowed, outside=outside),
        LLMKUBE_ALLOWED_HOST_ROOTS=f"/nonexistent-root:{allowed}",
    )

    run = pod.run(env=env)

    run.failed("SourceNotAllowed", retryable=False)
    assert not pod.cache_dir.exists()


def test_source_inside_the_allowed_roots_is_copied(pod) -> None:
    allowed = pod.tmp / "allowed"
    data = payload(2 * KIB)
    write(allowed / "sub" / "m.gguf", data)

    pod.stage(
        pod.single_env(f"{allowed}/sub/m.gguf", LLMKUBE_ALLOWED_HOST_ROOTS=f"{allowed}/")
    ).ok()

    assert pod.dest().read_bytes() == data


def test_allowed_roots_apply_even_when_the_host_model_is_mounted(pod) -> None:
    mounted = write(pod.tmp / "host-model" / "model.gguf", payload(1 * KIB))
    env = pod.single_env(
        "/etc/shadow-model.gguf",
        LLMKUBE_HOST_MODEL=str(mounted),
        LLMKUBE_ALLOWED_HOST_ROOTS=str(pod.tmp / "allowed"),
    )

    pod.stage(env).failed("SourceNotAllowed")


# -- pvc:// verify ---------------------------------------------------------------------------------


def pvc_env(pod: Pod, mounted: Path, **extra: str) -> dict[str, str]:
    """pvc://claim/<path> verified where the claim is mounted (MODEL_PATH)."""
    return {
        **pod.env,
        "MODEL_SOURCE": "pvc://models-claim/llama/model.gguf",
        "MODEL_PATH": str(mounted),
        **extra,
    }


@pytest.fixture
def mount(pod) -> Path:
    """The read-only claim mount, as a directory of its own."""
    path = pod.tmp / "model-source"
    path.mkdir()
    return path


def test_pvc_match_writes_nothing(pod, mount) -> None:
    data = payload(20 * KIB)
    mounted = write(mount / "llama" / "model.gguf", data)
    before_mount, before_tmp = snapshot(mount), sorted(os.listdir(pod.tmp))

    run = pod.run(env=pvc_env(pod, mounted, MODEL_SHA256=sha256(data)))

    run.ok(files=1, fetched=0, reused=1)
    assert snapshot(mount) == before_mount  # no stamp, no record, no lock
    assert sorted(os.listdir(pod.tmp)) == sorted([*before_tmp, "termination-log"])
    assert "Pre-staged model" in run.stderr and "verified" in run.stderr


def test_pvc_without_a_pin_checks_presence(pod, mount) -> None:
    mounted = write(mount / "llama" / "model.gguf", payload(1 * KIB))
    before = snapshot(mount)

    pod.stage(pvc_env(pod, mounted)).ok()

    assert snapshot(mount) == before


def test_pvc_mismatch(pod, mount) -> None:
    mounted = write(mount / "llama" / "model.gguf", payload(20 * KIB))
    before = snapshot(mount)

    run = pod.run(env=pvc_env(pod, mounted, MODEL_SHA256=sha256(b"other")))

    doc = run.failed("ModelTransferChecksumMismatch", retryable=False).term
    assert "SHA256 mismatch for the pre-staged" in doc["message"]
    assert snapshot(mount) == before


def test_pvc_missing_path(pod, mount) -> None:
    mounted = mount / "llama" / "model.gguf"

    run = pod.stage(pvc_env(pod, mounted, MODEL_SHA256=sha256(b"x"))).failed("ModelSourceNotFound")

    assert "does not exist on the mounted volume" in run.detail
    assert not mounted.parent.exists()


def test_pvc_directory(pod, mount) -> None:
    mounted = mount / "llama" / "model.gguf"
    mounted.mkdir(parents=True)

    run = pod.stage(pvc_env(pod, mounted, MODEL_SHA256=sha256(b"x"))).failed("ModelSourceNotFound")

    assert "is a directory, not a file" in run.detail


# -- unreadable sources (as a non-root uid) --------------------------------------------------------


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory outside pytest's root-only tmp tree that uid 65534 can traverse."""
    path = Path(tempfile.mkdtemp(prefix="llmkube-src-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def stage_as_nobody(pod: Pod, env: Mapping[str, str]) -> dict[str, str]:
    """Run the stage pipeline in a forked child with uid/gid 65534; returns
    {reason, detail} or {crash: traceback}. Modules are imported in the
    parent first: the child cannot read root's Python installation."""
    if os.geteuid() != 0:
        missing_feature("needs root to switch to an unprivileged uid")
    scratch = Path(tempfile.mkdtemp())
    try:  # warm-up: import every module a local copy and a pvc verify use
        write(scratch / "src", b"x")
        first, second = (
            Pod(scratch / "a", budget=SOURCE_BUDGET),
            Pod(scratch / "b", budget=SOURCE_BUDGET),
        )
        first.stage(first.single_env(str(scratch / "src")))
        second.stage(pvc_env(second, scratch / "src"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        result: dict[str, str]
        try:
            os.close(read_end)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            run = pod.stage(env)
            result = {"reason": run.reason or "", "detail": run.detail}
        except BaseException:
            result = {"crash": traceback.format_exc()}
        with contextlib.suppress(BaseException):
            os.write(write_end, json.dumps(result).encode())
        os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    result = json.loads(b"".join(chunks) or b"{}")
    assert isinstance(result, dict)
    return result


def root_only_file(directory: Path, data: bytes) -> Path:
    path = write(directory / "src" / "model.gguf", data)
    path.parent.chmod(0o755)
    path.chmod(0o600)  # owned by root: unreadable to uid 65534
    return path


def test_unreadable_local_source(shared_tmp) -> None:
    source = root_only_file(shared_tmp, payload(1 * KIB))
    pod = Pod(shared_tmp / "pod", budget=SOURCE_BUDGET)
    pod.tmp.chmod(0o777)

    result = stage_as_nobody(pod, pod.single_env(str(source)))

    assert result.get("reason") == "ModelSourceUnauthorized", result
    assert f"{source} is not readable by the init container" in result["detail"]


def test_unreadable_pvc_file(shared_tmp) -> None:
    mounted = root_only_file(shared_tmp, payload(1 * KIB))
    pod = Pod(shared_tmp / "pod", budget=SOURCE_BUDGET)
    pod.tmp.chmod(0o777)

    result = stage_as_nobody(pod, pvc_env(pod, mounted, MODEL_SHA256=sha256(b"x")))

    assert result.get("reason") == "ModelSourceUnauthorized", result
    assert "is not readable by the init container" in result["detail"]


def test_unreadable_pvc_file_without_a_pin(shared_tmp) -> None:
    mounted = root_only_file(shared_tmp, payload(1 * KIB))
    pod = Pod(shared_tmp / "pod", budget=SOURCE_BUDGET)
    pod.tmp.chmod(0o777)

    result = stage_as_nobody(pod, pvc_env(pod, mounted))

    assert result.get("reason") == "ModelSourceUnauthorized", result
    assert "is not readable by the init container" in result["detail"]
