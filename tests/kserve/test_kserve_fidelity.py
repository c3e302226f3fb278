"""#31 items 1-4: where KServe's initializer (kserve-storage 0.21) leaves a
model its server can load and the agent did not: archives as they come,
what unpacking keeps, names as KServe writes them, keys as users upload
them. Each test builds its inputs here and runs the real CLI against the
suite's origin or SeaweedFS; test_kserve_differential.py runs KServe's own
initializer on the same inputs and compares the trees."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from tests.harness.archives import tar_built, tar_of
from tests.harness.hub import FakeHub
from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload
from tests.harness.seaweed import SeaweedS3, s3_env
from tests.kserve.test_archives import visible

pytestmark = pytest.mark.e2e

WEIGHTS = payload(200 << 10, seed=31)
CONFIG = b'{"model_type": "sklearn"}'


MODEL = {"model/weights.bin": WEIGHTS, "config.json": CONFIG}


def model_tar(mode: str) -> bytes:
    return tar_of(MODEL, mode)


# -- item 1: archives as they come ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "mode"),
    [("m.tar.bz2", "w:bz2"), ("m.tbz2", "w:bz2"), ("m.tar.xz", "w:xz"), ("m.txz", "w:xz")],
)
def test_a_bzip2_or_xz_tar_is_unpacked(pod: Pod, origin: Origin, name: str, mode: str) -> None:
    origin.put(f"/a/{name}", model_tar(mode))
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/a/{name}", str(dest))

    assert run.returncode == 0, str(run)
    assert visible(dest) == MODEL
    assert sorted(p.name for p in dest.iterdir()) == [".llmkube-stager", "config.json", "model"]


def test_a_prefix_of_one_archive_and_empty_markers_is_an_archive_set(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """A Spark/Hadoop job's output: the archive and a `_SUCCESS` marker (and
    an empty `.keep`); KServe skips empty objects and unpacks the one left."""
    s3.put(bucket, "job/out/model.tar.gz", model_tar("w:gz"))
    s3.put(bucket, "job/out/_SUCCESS", b"")
    s3.put(bucket, "job/out/logs/.keep", b"")
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"s3://{bucket}/job/out", str(dest), env=s3_env(s3))

    assert run.returncode == 0, str(run)
    assert visible(dest) == MODEL
    assert not (dest / "model.tar.gz").exists()
    assert not (dest / "_SUCCESS").exists()
    warm = pod.run(f"s3://{bucket}/job/out", str(dest), env=s3_env(s3))
    assert warm.returncode == 0, str(warm)
    assert visible(dest) == MODEL


def test_an_http_url_whose_query_names_the_archive_is_unpacked(pod: Pod, origin: Origin) -> None:
    """KServe types the file by its URL's query when the path has no type
    (`mimetypes.guess_type(url.query)`) and names it by the path."""
    origin.put("/api/download", model_tar("w:gz"))
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/api/download?file=model.tar.gz", str(dest))

    assert run.returncode == 0, str(run)
    assert visible(dest) == MODEL
    assert not (dest / "download").exists()


def test_a_query_does_not_make_a_typed_file_an_archive(pod: Pod, origin: Origin) -> None:
    """`model.bin` has a type (application/octet-stream): KServe reads no
    query then, and the file is served as it is."""
    origin.put("/api/model.bin", WEIGHTS)
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/api/model.bin?file=model.tar.gz", str(dest))

    assert run.returncode == 0, str(run)
    assert visible(dest) == {"model.bin": WEIGHTS}


def tree_of(dest: Path) -> dict[str, str]:
    """Every visible path: 'dir', or the file's mode and bytes' length."""
    out: dict[str, str] = {}
    for path in dest.rglob("*"):
        rel = path.relative_to(dest)
        if rel.parts[0].startswith("."):
            continue
        out[str(rel)] = "dir" if path.is_dir() else f"{path.stat().st_mode & 0o7777:o}"
    return out


# -- item 2: what unpacking keeps -------------------------------------------------------


def _kept_tree_tar() -> bytes:
    def build(tar: tarfile.TarFile) -> None:
        for name, mode in (("ensemble", 0o755), ("ensemble/1", 0o700), ("ensemble/2", 0o755)):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = mode
            tar.addfile(info)
        for name, mode, data in (
            ("ensemble/config.pbtxt", 0o600, CONFIG),
            ("ensemble/2/run.sh", 0o4755, b"#!/bin/sh\n"),  # setuid: never kept
            ("ensemble/2/tool", 0o2751, b"\x7fELF"),  # setgid: never kept
        ):
            info = tarfile.TarInfo(name)
            info.mode, info.size, info.uid, info.gid = mode, len(data), 4321, 4321
            tar.addfile(info, io.BytesIO(data))

    return tar_built(build)


def _kept_tree_zip() -> bytes:
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name, mode, data in (
            ("ensemble/1/", 0o40755, b""),
            ("ensemble/config.pbtxt", 0o100600, CONFIG),
            ("ensemble/2/run.sh", 0o104755, b"#!/bin/sh\n"),
            ("ensemble/2/tool", 0o102751, b"\x7fELF"),
        ):
            info = zipfile.ZipInfo(name)
            info.create_system = 3  # Unix: the mode is in the high 16 bits
            info.external_attr = mode << 16 | (0x10 if name.endswith("/") else 0)
            zipped.writestr(info, data)
    return buffer.getvalue()


KEPT = {
    "ensemble": "dir",
    "ensemble/1": "dir",
    "ensemble/2": "dir",
    "ensemble/config.pbtxt": "644",
    "ensemble/2/run.sh": "755",
    "ensemble/2/tool": "755",
}


@pytest.mark.parametrize(("name", "build"), [("m.tgz", _kept_tree_tar), ("m.zip", _kept_tree_zip)])
def test_empty_directories_and_the_owners_exec_bit_are_kept_setuid_and_owner_never(
    pod: Pod, origin: Origin, name: str, build: object
) -> None:
    """A Triton ensemble's empty version directory `1/` and an executable
    script survive; setuid/setgid and the archive's owner never apply."""
    origin.put(f"/k/{name}", build())  # type: ignore[operator]
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/k/{name}", str(dest))

    assert run.returncode == 0, str(run)
    assert tree_of(dest) == KEPT
    for path in dest.rglob("*"):
        assert path.stat().st_uid == pod.tmp.stat().st_uid, path
        assert not path.stat().st_mode & 0o7000, path


# -- item 3: names as KServe writes them ------------------------------------------------


@pytest.mark.parametrize(
    "name", ["model%2Bv2.onnx", "weights%2Fpart1.bin", "my%20model.pt", "caf%C3%A9.bin"]
)
def test_an_http_file_name_is_not_percent_decoded(pod: Pod, origin: Origin, name: str) -> None:
    """KServe names the file os.path.basename(urlparse(uri).path): the
    escapes stay, and `%2F` is part of a name, no error."""
    from urllib.parse import unquote

    origin.put(f"/m/{unquote(name)}", WEIGHTS)  # the origin decodes the request's path
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/m/{name}", str(dest))

    assert run.returncode == 0, str(run)
    assert visible(dest) == {name: WEIGHTS}
    assert [r.path for r in origin.requests()][-1:] == [f"/m/{name}"]


# -- item 4: keys as users upload them --------------------------------------------------


def test_a_refusing_check_runs_after_the_patterns(pod: Pod, s3: SeaweedS3, bucket: str) -> None:
    """A checksum file beside each weight (`model.bin.sha256`, a name the
    agent keeps its stamps under) that STORAGE_IGNORE_PATTERNS leaves out
    is no reason to refuse the listing: KServe filters first."""
    s3.put(bucket, "sums/model.bin", WEIGHTS)
    s3.put(bucket, "sums/model.bin.sha256", b"abc  model.bin\n")
    s3.put(bucket, "sums/config.json", CONFIG)
    dest = pod.tmp / "mnt" / "models"
    env = {**s3_env(s3), "STORAGE_IGNORE_PATTERNS": "*.sha256"}

    run = pod.run(f"s3://{bucket}/sums", str(dest), env=env)

    assert run.returncode == 0, str(run)
    assert visible(dest) == {"model.bin": WEIGHTS, "config.json": CONFIG}


def test_an_exact_key_is_never_filtered_by_the_patterns(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """KServe's _download_s3 skips the filter for the object the URI names."""
    s3.put(bucket, "one/model.onnx", WEIGHTS)
    dest = pod.tmp / "mnt" / "models"
    env = {
        **s3_env(s3),
        "STORAGE_ALLOW_PATTERNS": "*.safetensors",
        "STORAGE_IGNORE_PATTERNS": "*.onnx",
    }

    run = pod.run(f"s3://{bucket}/one/model.onnx", str(dest), env=env)

    assert run.returncode == 0, str(run)
    assert visible(dest) == {"model.onnx": WEIGHTS}


def test_a_listed_key_with_an_empty_part_is_fetched_by_its_own_key(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """`prefix//model.joblib` is staged at `model.joblib` (test_listing_rules.py
    lists it; SeaweedFS stores such a key under its clean path, so its own
    listing cannot show one) and fetched by its own key: here the listing
    recorded by a run that was interrupted, as the next start reads it."""
    import json

    s3.put(bucket, "iris/model.joblib", WEIGHTS)
    etag = s3.admin().head_object(Bucket=bucket, Key="iris/model.joblib")["ETag"]
    dest = pod.tmp / "mnt" / "models"
    root = dest / ".llmkube-stager" / "model"
    root.mkdir(parents=True)
    record = {
        "v": 1,
        "source": f"s3://{bucket}/iris",
        "base": "iris",
        "files": [["model.joblib", len(WEIGHTS), etag, "/model.joblib"]],
    }
    (root / ".llmkube-listing").write_text(json.dumps(record))

    run = pod.run(f"s3://{bucket}/iris", str(dest), env=s3_env(s3))

    assert run.returncode == 0, str(run)
    assert visible(dest) == {"model.joblib": WEIGHTS}
    assert {r.path for r in s3.requests("GET")} == {f"/{bucket}/iris//model.joblib"}


# -- item 4, the rest: a `*.sha256` object is a file like any other ----------------------

CHECKSUMS = {
    "model.bin": WEIGHTS,
    # A checksum beside its weight: the name the agent's stamp of model.bin has.
    "model.bin.sha256": b"3b7a  model.bin\n",
    # One with no file of its name in the set.
    "only.sha256": b"0000  gone.bin\n",
    # A file and a directory named like its stamp.
    "cfg": CONFIG,
    "cfg.sha256/part.json": CONFIG,
}


def test_a_sha256_object_the_patterns_keep_is_staged_byte_for_byte(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """KServe downloads `model.bin.sha256` beside `model.bin`: so does the
    agent, whose own records of `model.bin` never touch it; a warm start
    asks nothing, and a truncated or rewritten file is fetched again (its
    key only)."""
    for rel, data in CHECKSUMS.items():
        s3.put(bucket, f"sums/{rel}", data)
    dest = pod.tmp / "mnt" / "models"
    env = s3_env(s3)

    run = pod.run(f"s3://{bucket}/sums", str(dest), env=env)

    assert run.returncode == 0, str(run)
    assert visible(dest) == CHECKSUMS
    s3.clear()
    warm = pod.run(f"s3://{bucket}/sums", str(dest), env=env)
    assert warm.returncode == 0, str(warm)
    assert warm.compact_term()["stats"]["fetched"] == 0
    assert s3.requests() == []
    assert visible(dest) == CHECKSUMS

    with open(dest / "model.bin", "r+b") as handle:
        handle.truncate(100)
    (dest / "model.bin.sha256").write_bytes(b"not the checksum\n")
    again = pod.run(f"s3://{bucket}/sums", str(dest), env=env)

    assert again.returncode == 0, str(again)
    assert visible(dest) == CHECKSUMS
    gets = {r.path for r in s3.requests("GET") if r.path != f"/{bucket}"}
    assert gets == {f"/{bucket}/sums/model.bin", f"/{bucket}/sums/model.bin.sha256"}


def test_an_exact_sha256_key_is_one_file(pod: Pod, s3: SeaweedS3, bucket: str) -> None:
    s3.put(bucket, "one/model.onnx.sha256", b"abc  model.onnx\n")
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"s3://{bucket}/one/model.onnx.sha256", str(dest), env=s3_env(s3))

    assert run.returncode == 0, str(run)
    assert visible(dest) == {"model.onnx.sha256": b"abc  model.onnx\n"}


def test_an_http_sha256_file_is_one_file(pod: Pod, origin: Origin) -> None:
    """A single file has no sibling whose stamp it could be: KServe names
    it as the URL does, and so does the agent."""
    origin.put("/m/model.onnx.sha256", b"abc  model.onnx\n")
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/m/model.onnx.sha256", str(dest))

    assert run.returncode == 0, str(run)
    assert visible(dest) == {"model.onnx.sha256": b"abc  model.onnx\n"}


def test_a_sha256_file_of_a_hub_repo_is_staged_and_a_warm_start_asks_nothing(
    pod: Pod, hub: FakeHub, cdn: Origin
) -> None:
    files = {
        "model.safetensors": WEIGHTS,
        "model.safetensors.sha256": b"abc  model.safetensors\n",
        "config.json": CONFIG,
    }
    hub.add_repo("org/sums", files, lfs={"model.safetensors"})
    dest = pod.tmp / "mnt" / "models"
    env = {"HF_ENDPOINT": hub.url}

    run = pod.run("hf://org/sums", str(dest), env=env)

    assert run.returncode == 0, str(run)
    assert visible(dest) == files
    hub.clear_log()
    cdn.clear_log()
    warm = pod.run("hf://org/sums", str(dest), env=env)
    assert warm.returncode == 0, str(warm)
    assert hub.requests() == [] and cdn.requests() == []

    with open(dest / "model.safetensors", "r+b") as handle:
        handle.truncate(10)
    again = pod.run("hf://org/sums", str(dest), env=env)

    assert again.returncode == 0, str(again)
    assert visible(dest) == files


def test_onchange_unexposes_a_sha256_object_the_prefix_no_longer_has(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """The staged copy of `model.bin.sha256` has a name of its own in the
    private directory: the name exposed for it is still found and removed
    once the object is gone, and `model.bin` stays."""
    s3.put(bucket, "gone/model.bin", WEIGHTS)
    s3.put(bucket, "gone/model.bin.sha256", b"abc  model.bin\n")
    dest = pod.tmp / "mnt" / "models"
    env = {**s3_env(s3), "LLMKUBE_REFRESH_POLICY": "OnChange"}
    first = pod.run(f"s3://{bucket}/gone", str(dest), env=env)
    assert first.returncode == 0, str(first)
    s3.admin().delete_object(Bucket=bucket, Key="gone/model.bin.sha256")

    run = pod.run(f"s3://{bucket}/gone", str(dest), env=env)

    assert run.returncode == 0, str(run)
    assert visible(dest) == {"model.bin": WEIGHTS}
