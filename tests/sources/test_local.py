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
from sources.support import (
    Sandbox,
    assert_failure,
    assert_success,
    debris,
    record,
    sha256,
    snapshot,
    tree,
)

KIB = 1024
NOBODY = 65534


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# -- copies -------------------------------------------------------------------------------------


def test_file_url_single_copy_cli(box, payload) -> None:
    data = payload(300 * KIB)
    source = write(box.tmp / "host" / "models" / "llama.gguf", data)

    run = box.cli(box.single(f"file://{source}"))

    assert_success(run, files=1, fetched=1)
    assert box.dest().read_bytes() == data
    assert record(box.dest()) == str(len(data))
    assert "Copying model from local source..." in run.stderr
    assert "Model copied successfully" in run.stderr
    assert debris(box.cache_dir) == []
    assert source.read_bytes() == data  # the source is never touched


def test_plain_absolute_path_copy_and_warm_restart(box, payload) -> None:
    data = payload(64 * KIB)
    source = write(box.tmp / "host" / "m.gguf", data)
    env = box.single(str(source))

    first = box.ok(env)
    second = box.ok(env)

    assert box.dest().read_bytes() == data
    assert first.count(Decision.FETCH) == 1
    assert second.count(Decision.REUSE) == 1
    assert second.has_line("Model already cached, skipping copy")


def test_host_model_mount_is_preferred_when_it_exists(box, payload) -> None:
    mounted = write(box.tmp / "host-model" / "model.gguf", payload(16 * KIB, 1))
    declared = write(box.tmp / "declared" / "m.gguf", payload(16 * KIB, 2))

    box.ok(box.single(f"file://{declared}", LLMKUBE_HOST_MODEL=str(mounted)))

    assert box.dest().read_bytes() == mounted.read_bytes()


def test_declared_path_is_used_when_no_host_model_is_mounted(box, payload) -> None:
    declared = write(box.tmp / "declared" / "m.gguf", payload(16 * KIB, 2))

    box.ok(box.single(f"file://{declared}", LLMKUBE_HOST_MODEL=str(box.tmp / "absent.gguf")))

    assert box.dest().read_bytes() == declared.read_bytes()


def test_multi_file_local_directory(box, payload) -> None:
    root = box.tmp / "host" / "llama"
    files = {
        "model-00001-of-00002.safetensors": payload(48 * KIB, 1),
        "model-00002-of-00002.safetensors": payload(24 * KIB, 2),
        "tokenizer/tokenizer.json": b'{"v": 1}',
        "config.json": b"{}",
    }
    for rel, data in files.items():
        write(root / rel, data)
    write(root / "unlisted.bin", b"no")

    run = box.ok(box.multi(f"file://{root}", files))

    assert run.count(Decision.FETCH) == 4
    published = {k: v for k, v in tree(box.cache_dir).items() if not k.endswith(".llmkube-size")}
    published.pop(".llmkube.lock", None)
    assert published == files
    for rel, data in files.items():
        assert record(box.dest(rel)) == str(len(data))


def test_pinned_local_copy_is_verified_and_stamped(box, payload) -> None:
    data = payload(32 * KIB)
    source = write(box.tmp / "host" / "m.gguf", data)

    box.ok(box.single(str(source), MODEL_SHA256=sha256(data)))

    dest = box.dest()
    assert dest.read_bytes() == data
    st = dest.stat()
    stamp = Path(f"{dest}.sha256").read_text().split()
    assert stamp == [sha256(data), str(st.st_size), str(int(st.st_mtime))]


def test_pinned_local_copy_with_the_wrong_digest_is_discarded(box, payload) -> None:
    data = payload(32 * KIB)
    source = write(box.tmp / "host" / "m.gguf", data)
    wrong = sha256(b"something else")

    run = box.fails(box.single(str(source), MODEL_SHA256=wrong), "ModelTransferChecksumMismatch")

    assert "spec.sha256 mismatch" in run.detail and "discarded" in run.detail
    assert not box.dest().exists()
    assert Path(f"{box.dest()}.{wrong}.sha256-rejected").read_text() == sha256(data)


# -- refusals --------------------------------------------------------------------------------------


def test_missing_source(box) -> None:
    missing = box.tmp / "host" / "nope.gguf"

    run = box.fails(box.single(f"file://{missing}"), "ModelSourceNotFound")

    assert f"{missing} does not exist on the mounted volume" in run.detail
    assert not box.dest().exists()


def test_directory_source(box) -> None:
    directory = box.tmp / "host" / "a-dir.gguf"
    directory.mkdir(parents=True)

    run = box.fails(box.single(str(directory)), "ModelSourceNotFound")

    assert f"{directory} is a directory, not a file" in run.detail


def test_missing_file_of_a_local_directory(box) -> None:
    root = box.tmp / "host" / "llama"
    write(root / "config.json", b"{}")

    run = box.fails(box.multi(str(root), ["config.json", "weights.bin"]), "ModelSourceNotFound")

    assert run.error is not None and run.error.file == "weights.bin"
    assert "does not exist on the mounted volume" in run.detail


@pytest.mark.parametrize(
    "source",
    ["{outside}/m.gguf", "{allowed}-evil/m.gguf", "file://{allowed}/../outside/m.gguf"],
    ids=["outside", "prefix-lookalike", "dot-dot"],
)
def test_source_outside_the_allowed_roots_is_refused(box, payload, source) -> None:
    allowed, outside = box.tmp / "allowed", box.tmp / "outside"
    for root in (allowed, outside, Path(f"{allowed}-evil")):
        write(root / "m.gguf", payload(1 * KIB))
    env = box.single(
        source.format(allowed=allowed, outside=outside),
        LLMKUBE_ALLOWED_HOST_ROOTS=f"/nonexistent-root:{allowed}",
    )

    run = box.cli(env)

    assert_failure(run, "SourceNotAllowed", retryable=False)
    assert not box.cache_dir.exists()


def test_source_inside_the_allowed_roots_is_copied(box, payload) -> None:
    allowed = box.tmp / "allowed"
    data = payload(2 * KIB)
    write(allowed / "sub" / "m.gguf", data)

    box.ok(box.single(f"{allowed}/sub/m.gguf", LLMKUBE_ALLOWED_HOST_ROOTS=f"{allowed}/"))

    assert box.dest().read_bytes() == data


def test_allowed_roots_apply_even_when_the_host_model_is_mounted(box, payload) -> None:
    mounted = write(box.tmp / "host-model" / "model.gguf", payload(1 * KIB))
    env = box.single(
        "/etc/shadow-model.gguf",
        LLMKUBE_HOST_MODEL=str(mounted),
        LLMKUBE_ALLOWED_HOST_ROOTS=str(box.tmp / "allowed"),
    )

    box.fails(env, "SourceNotAllowed")


# -- pvc:// verify ---------------------------------------------------------------------------------


def pvc_env(box: Sandbox, mounted: Path, **extra: str) -> dict[str, str]:
    """pvc://claim/<path> verified where the claim is mounted (MODEL_PATH)."""
    return {
        **box.base_env,
        "MODEL_SOURCE": "pvc://models-claim/llama/model.gguf",
        "MODEL_PATH": str(mounted),
        **extra,
    }


@pytest.fixture
def mount(box) -> Path:
    """The read-only claim mount, as a directory of its own."""
    path = box.tmp / "model-source"
    path.mkdir()
    return path


def test_pvc_match_writes_nothing(box, mount, payload) -> None:
    data = payload(20 * KIB)
    mounted = write(mount / "llama" / "model.gguf", data)
    before_mount, before_tmp = snapshot(mount), sorted(os.listdir(box.tmp))

    run = box.cli(pvc_env(box, mounted, MODEL_SHA256=sha256(data)))

    assert_success(run, files=1, fetched=0, reused=1)
    assert snapshot(mount) == before_mount  # no stamp, no record, no lock
    assert sorted(os.listdir(box.tmp)) == sorted([*before_tmp, "home", "termination-log"])
    assert "Pre-staged model" in run.stderr and "verified" in run.stderr


def test_pvc_without_a_pin_checks_presence(box, mount, payload) -> None:
    mounted = write(mount / "llama" / "model.gguf", payload(1 * KIB))
    before = snapshot(mount)

    box.ok(pvc_env(box, mounted))

    assert snapshot(mount) == before


def test_pvc_mismatch(box, mount, payload) -> None:
    mounted = write(mount / "llama" / "model.gguf", payload(20 * KIB))
    before = snapshot(mount)

    run = box.cli(pvc_env(box, mounted, MODEL_SHA256=sha256(b"other")))

    doc = assert_failure(run, "ModelTransferChecksumMismatch", retryable=False)
    assert "SHA256 mismatch for the pre-staged" in doc["message"]
    assert snapshot(mount) == before


def test_pvc_missing_path(box, mount) -> None:
    mounted = mount / "llama" / "model.gguf"

    run = box.fails(pvc_env(box, mounted, MODEL_SHA256=sha256(b"x")), "ModelSourceNotFound")

    assert "does not exist on the mounted volume" in run.detail
    assert not mounted.parent.exists()


def test_pvc_directory(box, mount) -> None:
    mounted = mount / "llama" / "model.gguf"
    mounted.mkdir(parents=True)

    run = box.fails(pvc_env(box, mounted, MODEL_SHA256=sha256(b"x")), "ModelSourceNotFound")

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


def stage_as_nobody(box: Sandbox, env: Mapping[str, str]) -> dict[str, str]:
    """Run the stage pipeline in a forked child with uid/gid 65534; returns
    {reason, detail} or {crash: traceback}. Modules are imported in the
    parent first: the child cannot read root's Python installation."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to an unprivileged uid")
    scratch = Path(tempfile.mkdtemp())
    try:  # warm-up: import every module a local copy and a pvc verify use
        write(scratch / "src", b"x")
        Sandbox(scratch / "a").stage(Sandbox(scratch / "a").single(str(scratch / "src")))
        Sandbox(scratch / "b").stage(pvc_env(Sandbox(scratch / "b"), scratch / "src"))
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
            run = box.stage(env)
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


def test_unreadable_local_source(shared_tmp, payload) -> None:
    source = root_only_file(shared_tmp, payload(1 * KIB))
    box = Sandbox(shared_tmp / "pod")
    box.tmp.mkdir(mode=0o777)
    box.tmp.chmod(0o777)

    result = stage_as_nobody(box, box.single(str(source)))

    assert result.get("reason") == "ModelSourceUnauthorized", result
    assert f"{source} is not readable by the init container" in result["detail"]


def test_unreadable_pvc_file(shared_tmp, payload) -> None:
    mounted = root_only_file(shared_tmp, payload(1 * KIB))
    box = Sandbox(shared_tmp / "pod")
    box.tmp.mkdir(mode=0o777)
    box.tmp.chmod(0o777)

    result = stage_as_nobody(box, pvc_env(box, mounted, MODEL_SHA256=sha256(b"x")))

    assert result.get("reason") == "ModelSourceUnauthorized", result
    assert "is not readable by the init container" in result["detail"]


def test_unreadable_pvc_file_without_a_pin(shared_tmp, payload) -> None:
    mounted = root_only_file(shared_tmp, payload(1 * KIB))
    box = Sandbox(shared_tmp / "pod")
    box.tmp.mkdir(mode=0o777)
    box.tmp.chmod(0o777)

    result = stage_as_nobody(box, pvc_env(box, mounted))

    assert result.get("reason") == "ModelSourceUnauthorized", result
    assert "is not readable by the init container" in result["detail"]
