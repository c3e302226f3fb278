"""The shipped artifact, end to end (#13 items 2, 3, 7): the image `make image`
built, run by its entrypoint as its user (100:102) with a read-only root filesystem
and only its volumes writable (tests/harness/image.py). Assert what a pod would see:
exit codes, termination JSON, bytes and records on the volume, requests the
origin got, and nothing written anywhere else."""

from __future__ import annotations

import os
import py_compile
from pathlib import Path

import pytest

from tests.harness.disk import debris, record_of, snapshot
from tests.harness.hub import FakeHub
from tests.harness.image import GID, ROOT, UID, ImageConfig, ImagePod, project_version
from tests.harness.origin import Origin
from tests.harness.sample import gguf_like, write_sample_tree
from tests.harness.seaweed import READER, SeaweedS3
from tests.image.probe import pyc_problem

pytestmark = pytest.mark.image

MODEL = "/m/model.gguf"
DATA = gguf_like(3 << 20, seed=7)


def serve_repo(pod: ImagePod, origin: Origin) -> tuple[str, dict[str, bytes]]:
    """A multi-file repo (with a subdirectory) at <origin>/org/repo/resolve/main/."""
    tree = pod.tmp.parent / "upstream"
    layout = write_sample_tree(str(tree), gguf_size=64 << 10, shard_size=300 << 10)
    origin.serve_directory(str(tree / "multi"), prefix="/org/repo/resolve/main")
    files = {rel: (tree / "multi" / rel).read_bytes() for rel in layout["multi"]}
    return origin.url + "/org/repo/resolve/main/", files


# -- the image's configuration ----------------------------------------------------------


def test_image_config(image: ImageConfig) -> None:
    assert image.entrypoint == ("llmkube-stager",)
    assert image.cmd == ("stage",)
    assert image.user == f"{UID}:{GID}"
    assert image.env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert image.env["PATH"].startswith("/opt/llmkube/bin:")
    assert image.labels["org.opencontainers.image.version"] == project_version()
    assert image.labels["org.opencontainers.image.title"] == "llmkube-stager"


def test_help(pod: ImagePod) -> None:
    run = pod.run("--help")
    assert run.returncode == 0, str(run)
    assert run.stdout.startswith("Usage: llmkube-stager"), run.stdout
    for command in ("stage", "plan", "verify", "inspect", "diagnose"):
        assert f"  {command} " in run.stdout, command
    assert pod.container.writes() == []


def test_version(pod: ImagePod) -> None:
    run = pod.run("--version")
    assert (run.returncode, run.stdout) == (0, f"llmkube-stager {project_version()}\n"), str(run)


# -- staging with a read-only root -------------------------------------------------------


def test_stage_cold_then_warm_as_its_user_on_a_read_only_root(
    pod: ImagePod, origin: Origin
) -> None:
    base, files = serve_repo(pod, origin)
    cache_dir = pod.multi(base, files)
    total = sum(len(data) for data in files.values())

    cold = pod.run()  # the image's CMD: stage
    cold.ok(files=len(files), fetched=len(files), reused=0, nbytes=total)
    for rel, data in files.items():
        dest = cache_dir / rel
        assert dest.read_bytes() == data, rel
        assert record_of(dest) == str(len(data)), rel
        assert (dest.stat().st_uid, dest.stat().st_gid) == (UID, GID), rel
    assert debris(pod.models) == []
    assert sorted(r.path for r in origin.requests(method="GET")) == sorted(
        "/org/repo/resolve/main/" + rel for rel in files
    )
    assert pod.term_path.stat().st_uid == UID

    origin.clear_log()
    warm = pod.run()
    warm.ok(files=len(files), fetched=0, reused=len(files), nbytes=0)
    assert origin.requests() == [], "a warm start must not contact the origin"
    assert pod.container.writes() == [], "the runs wrote into the image's root filesystem"


def test_stage_without_a_writable_tmp(pod: ImagePod, origin: Origin) -> None:
    """#13 item 3: with readOnlyRootFilesystem and no /tmp volume an http
    source must stage all the same (the agent writes only the cache)."""
    origin.put(MODEL, DATA)
    dest = pod.single(origin.url + MODEL)

    run = pod.run("stage", tmp_writable=False)
    run.ok(files=1, fetched=1, reused=0, nbytes=len(DATA))
    assert dest.read_bytes() == DATA
    assert record_of(dest) == str(len(DATA))
    assert debris(pod.models) == []
    assert pod.container.writes() == []


def test_the_root_filesystem_is_read_only(pod: ImagePod, origin: Origin) -> None:
    """The harness itself: /tmp of the image is world-writable (1777), so
    only a read-only root can stop a cache there (and then nothing is written)."""
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    run = pod.run(
        "stage",
        env={"CACHE_DIR": "/tmp/cache/k1", "MODEL_PATH": "/tmp/cache/k1/model.gguf"},
        tmp_writable=False,
    )
    assert run.returncode != 0, str(run)
    doc = run.compact_term()
    assert (doc["outcome"], doc["reason"]) == ("failed", "ModelCacheUnwritable"), doc
    assert pod.container.writes() == []


def test_hf_source_without_a_writable_tmp(pod: ImagePod, origin: Origin) -> None:
    """huggingface_hub in the image (HOME is / and read-only) resolves a repo
    through the fake hub; the bytes come from its CDN."""
    files = {"config.json": b'{"model_type": "llama"}', "model.safetensors": DATA}
    with FakeHub(origin) as hub:
        hub.add_repo("org/repo", files)
        cache_dir = pod.multi("hf://org/repo@main", files, key="hf")
        run = pod.run("stage", env={"HF_ENDPOINT": hub.url}, tmp_writable=False)
        assert hub.requests("api"), "the hub got no API request"
    run.ok(files=2, fetched=2, reused=0, nbytes=sum(map(len, files.values())))
    for rel, data in files.items():
        assert (cache_dir / rel).read_bytes() == data, rel
        assert record_of(cache_dir / rel) == str(len(data)), rel
    assert pod.container.writes() == []


def stage_from_s3(pod: ImagePod, s3: SeaweedS3, bucket: str, *, tmp_writable: bool) -> None:
    s3.put(bucket, "m/model.gguf", DATA)
    dest = pod.single(f"s3://{bucket}/m/model.gguf")
    env = {
        "AWS_ENDPOINT_URL": s3.endpoint_url,
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": READER[0],
        "AWS_SECRET_ACCESS_KEY": READER[1],
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    run = pod.run("stage", env=env, tmp_writable=tmp_writable)
    run.ok(files=1, fetched=1, reused=0, nbytes=len(DATA))
    assert dest.read_bytes() == DATA
    assert record_of(dest) == str(len(DATA))
    assert pod.container.writes() == []


def test_s3_source_with_a_writable_tmp(pod: ImagePod, s3: SeaweedS3, bucket: str) -> None:
    stage_from_s3(pod, s3, bucket, tmp_writable=True)


def test_s3_source_without_a_writable_tmp(pod: ImagePod, s3: SeaweedS3, bucket: str) -> None:
    """#13 item 3: the S3 source makes a temporary file only for extra CA
    certificates (tests/sources/test_s3_config.py has that case)."""
    stage_from_s3(pod, s3, bucket, tmp_writable=False)


# -- verify on a read-only volume ----------------------------------------------------------


def test_verify_on_a_read_only_volume(pod: ImagePod, origin: Origin) -> None:
    base, files = serve_repo(pod, origin)
    cache_dir = pod.multi(base, files)
    assert pod.run("stage").returncode == 0

    before = snapshot(pod.models)
    ok = pod.run("verify", models_read_only=True, tmp_writable=False)
    assert ok.returncode == 0, str(ok)
    doc = ok.compact_term()
    assert (doc["outcome"], doc["stats"]["files"]) == ("succeeded", len(files)), doc
    assert snapshot(pod.models) == before

    # The silent-empty-reader failure: a file gone must fail verify loudly.
    (cache_dir / "config.json").unlink()
    (cache_dir / "config.json.llmkube-size").unlink()
    before = snapshot(pod.models)
    bad = pod.run("verify", models_read_only=True, tmp_writable=False)
    doc = bad.compact_term()
    assert (doc["outcome"], doc["reason"], doc["retryable"]) == (
        "failed",
        "ModelCacheIncomplete",
        False,
    ), doc
    assert bad.returncode == 4, str(bad)  # not retryable (docs/operations.md)
    assert snapshot(pod.models) == before
    assert pod.container.writes() == []


# -- what the image holds ------------------------------------------------------------------


def test_every_module_is_byte_compiled(pod: ImagePod, origin: Origin) -> None:
    """A read-only root cannot take a .pyc written at run time, and a warm
    start must not compile: every .py of the venv and of the standard library
    has a valid .pyc, and a real stage compiles nothing."""
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    report = pod.probe("bytecode", "stage")
    assert report["exit"] == 0, report
    assert report["stale"] == {}, report["stale"]
    assert report["stdlib_stale"] == {}, report["stdlib_stale"]
    assert report["compiled"] == [], report["compiled"]


def test_the_bytecode_probe_sees_missing_and_stale_pycs(tmp_path: Path) -> None:
    """The probe is not vacuous: a module without .pyc, or whose source
    changed after compiling, is reported; a fresh one is not."""
    source = tmp_path / "module.py"
    source.write_text("VALUE = 1\n")
    assert pyc_problem(source) == "no .pyc"
    py_compile.compile(str(source), doraise=True)
    assert pyc_problem(source) is None
    os.utime(source, (1, 1))
    assert pyc_problem(source) == "stale (mtime)"


def test_image_holds_the_locked_runtime_and_nothing_else(pod: ImagePod) -> None:
    report = pod.probe("contents")
    assert report["executable"] == "/opt/llmkube/bin/python3", report
    assert report["version"].startswith("3.11."), report
    assert (report["uid"], report["gid"]) == (UID, GID), report
    assert report["dont_write_bytecode"] is True
    assert {name for name, found in report["modules"].items() if found} == set()
    assert {name: path for name, path in report["tools"].items() if path} == {}
    assert {path for path, exists in report["paths"].items() if exists} == set()
    installed = {normalize(name): version for name, version in report["distributions"]}
    assert installed == {**locked_versions(), "llmkube-stager": project_version()}


def normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def locked_versions() -> dict[str, str]:
    """name -> version pinned in image/requirements.lock."""
    pins = {}
    for line in (ROOT / "image" / "requirements.lock").read_text().splitlines():
        if "==" in line and not line.startswith((" ", "#")):
            name, version = line.split(" ")[0].split("==")
            pins[normalize(name)] = version
    return pins
