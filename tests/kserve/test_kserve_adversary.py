"""#24 review: the KServe drop-in mode against hostile input. Each test
here either failed against the code before its fix (the commit says how)
or holds a hostile case the code already refused (the review report lists them)."""

from __future__ import annotations

import bz2
import io
import json
import lzma
import tarfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.harness.archives import tar_built, tar_of, zip_of
from tests.harness.canary import assert_no_leak, canary, outputs_of
from tests.harness.hub import FakeHub
from tests.harness.mounts import tmpfs
from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload
from tests.harness.seaweed import SeaweedS3, s3_env

pytestmark = pytest.mark.e2e

WEIGHTS_A = payload(64 << 10, seed=41)
WEIGHTS_B = payload(64 << 10, seed=42)


@pytest.mark.parametrize("inner_first", [True, False], ids=["inner-first", "outer-first"])
def test_nested_dest_dirs_are_refused_before_any_io(
    pod: Pod, origin: Origin, inner_first: bool
) -> None:
    """One pair's DEST_DIR inside another's: the outer model's `sub/w.bin`
    and the inner model's `w.bin` are one name, and the later pair would
    replace the earlier one's file (a wrong file served, exit 0)."""
    origin.put("/a/m.tar.gz", tar_of({"sub/w.bin": WEIGHTS_A}))
    origin.put("/b/w.bin", WEIGHTS_B)
    dest = pod.tmp / "mnt" / "models"
    outer = (f"{origin.url}/a/m.tar.gz", str(dest))
    inner = (f"{origin.url}/b/w.bin", str(dest / "sub"))
    pairs = (inner, outer) if inner_first else (outer, inner)

    run = pod.run(*pairs[0], *pairs[1])

    assert run.returncode == 2, str(run)
    assert run.compact_term()["reason"] == "InvalidConfiguration"
    assert "inside" in run.compact_term()["message"]
    assert origin.requests() == []
    assert not dest.exists() or not any(dest.rglob("w.bin"))


def test_a_dest_inside_another_pairs_private_dir_is_refused(pod: Pod, origin: Origin) -> None:
    origin.put("/b/w.bin", WEIGHTS_B)
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(
        f"{origin.url}/b/w.bin",
        str(dest),
        f"{origin.url}/b/w.bin",
        str(dest / ".llmkube-stager" / "model"),
    )

    assert run.returncode == 2, str(run)
    assert run.compact_term()["reason"] == "InvalidConfiguration"
    assert origin.requests() == []


def _zip_encrypted() -> bytes:
    """A member flagged encrypted (general purpose bit 0, in the local and
    the central header): zipfile asks for a password (RuntimeError)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped:
        zipped.writestr("model.onnx", WEIGHTS_A)
    raw = bytearray(buffer.getvalue())
    raw[6] |= 0x1  # local file header: flags at offset 6
    central = raw.rfind(b"PK\x01\x02")
    raw[central + 8] |= 0x1  # central directory header: flags at offset 8
    return bytes(raw)


def _zip_bad_stream(method: int) -> bytes:
    """A member whose compressed stream is garbage (CRC and sizes as
    declared): bz2 / lzma raise their own errors, not zlib.error."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as zipped:
        zipped.writestr("model.onnx", WEIGHTS_A)
    raw = bytearray(buffer.getvalue())
    # The local header is 30 bytes + the name; spoil the stream after it.
    start = 30 + len("model.onnx")
    for i in range(start, start + 64):
        raw[i] ^= 0x5A
    return bytes(raw)


def _assert_rejected(pod: Pod, origin: Origin, path: str, archive: bytes, staged: str) -> Path:
    """KServe's form on `archive`, served at `path`: ModelSourceRejected
    (exit 4) and nothing at DEST_DIR/`staged`. Returns DEST_DIR."""
    origin.put(path, archive)
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}{path}", str(dest))

    assert run.returncode == 4, str(run)
    assert run.compact_term()["reason"] == "ModelSourceRejected"
    assert not (dest / staged).exists()
    return dest


@pytest.mark.parametrize(
    "build",
    [
        _zip_encrypted,
        lambda: _zip_bad_stream(zipfile.ZIP_BZIP2),
        lambda: _zip_bad_stream(zipfile.ZIP_LZMA),
    ],
    ids=["encrypted", "bad-bzip2", "bad-lzma"],
)
def test_an_unreadable_zip_is_rejected_not_an_internal_error(
    pod: Pod, origin: Origin, build: object
) -> None:
    assert callable(build)
    dest = _assert_rejected(pod, origin, "/z/m.zip", build(), "model.onnx")
    assert not list((dest / ".llmkube-stager").glob("unpack.*"))


@pytest.mark.parametrize("compress", [bz2.compress, lzma.compress], ids=["bzip2", "xz"])
def test_a_bad_compressed_tar_is_rejected_not_an_internal_error(
    pod: Pod, origin: Origin, compress: Callable[[bytes], bytes]
) -> None:
    raw = bytearray(compress(tar_of({"w.bin": WEIGHTS_A}, "w")))
    for i in range(200, 260):
        raw[i] ^= 0x5A
    # tarfile's r:* reads bzip2 / xz whatever the name
    _assert_rejected(pod, origin, "/t/m.tar", bytes(raw), "w.bin")


def test_s3_endpoint_with_userinfo_never_shows_the_password(pod: Pod, tmp_path: Path) -> None:
    secret = canary("s3epw")
    dest = pod.tmp / "mnt" / "models"
    env = {
        "S3_ENDPOINT": f"someone:{secret}@127.0.0.1:9",
        "S3_USE_HTTPS": "0",
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": canary("s3sk"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }

    run = pod.run("s3://bucket/iris", str(dest), env=env)

    assert run.returncode != 0, str(run)
    assert_no_leak(outputs_of(run, pod.tmp), {"S3_ENDPOINT password": secret})


def _member(
    tar: tarfile.TarFile, name: str, kind: bytes, link: str = "", data: bytes = b""
) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data) if data else None)


HOSTILE: dict[str, Callable[[tarfile.TarFile], None]] = {
    # A hard link to a symlink (the link's target would be followed).
    "hardlink-to-symlink": lambda t: (
        _member(t, "s", tarfile.SYMTYPE, "w.bin"),
        _member(t, "h", tarfile.LNKTYPE, "s"),
    ),
    # A symlinked directory made earlier, then a hard link through it.
    "hardlink-through-link": lambda t: (
        _member(t, "d", tarfile.SYMTYPE, "."),
        _member(t, "h", tarfile.LNKTYPE, "d/w.bin"),
    ),
    # A symlink named like the private directory, then a file through it.
    "private-symlink": lambda t: _member(t, ".llmkube-stager", tarfile.SYMTYPE, "w.bin"),
    "dot-symlink": lambda t: _member(t, ".", tarfile.SYMTYPE, "w.bin"),
    "dot-file": lambda t: _member(t, "./", tarfile.REGTYPE, data=b"x"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_more_hostile_tars_are_refused(pod: Pod, origin: Origin, kind: str) -> None:
    def build(tar: tarfile.TarFile) -> None:
        _member(tar, "w.bin", tarfile.REGTYPE, data=WEIGHTS_A)
        HOSTILE[kind](tar)

    _assert_rejected(pod, origin, "/h/m.tgz", tar_built(build), "w.bin")


def test_a_tar_of_dot_as_tar_c_makes_it_is_unpacked(pod: Pod, origin: Origin) -> None:
    """`tar czf m.tgz -C dir .`: members `./` and `./w.bin`."""
    origin.put(
        "/t/m.tgz",
        tar_built(
            lambda t: (
                _member(t, "./", tarfile.DIRTYPE),
                _member(t, "./w.bin", tarfile.REGTYPE, data=WEIGHTS_A),
            )
        ),
    )
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/t/m.tgz", str(dest))

    assert run.returncode == 0, str(run)
    assert (dest / "w.bin").read_bytes() == WEIGHTS_A


def _zip_symlink() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped:
        info = zipfile.ZipInfo("link")
        info.external_attr = 0o120777 << 16
        zipped.writestr(info, "/etc/passwd")
    return buffer.getvalue()


def _zip_named(name: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped:
        zipped.writestr("ok.txt", b"ok")
        zipped.writestr(name, b"x")
    return buffer.getvalue()


@pytest.mark.parametrize(
    "build",
    [_zip_symlink, lambda: _zip_named("..\\..\\evil.txt"), lambda: _zip_named("\\evil.txt")],
    ids=["symlink", "backslash-dotdot", "backslash-absolute"],
)
def test_more_hostile_zips_are_refused(pod: Pod, origin: Origin, build: object) -> None:
    assert callable(build)
    origin.put("/z/m.zip", build())
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/z/m.zip", str(dest))

    assert run.returncode == 4, str(run)
    assert not (dest / "ok.txt").exists()
    assert not (pod.tmp / "evil.txt").exists()


def test_a_symlink_in_dest_where_a_file_goes_is_replaced_not_followed(
    pod: Pod, origin: Origin
) -> None:
    origin.put("/m/w.bin", WEIGHTS_A)
    outside = pod.tmp / "outside.bin"
    outside.write_bytes(b"keep me")
    dest = pod.tmp / "mnt" / "models"
    dest.mkdir(parents=True)
    (dest / "w.bin").symlink_to(outside)

    run = pod.run(f"{origin.url}/m/w.bin", str(dest))

    assert run.returncode == 0, str(run)
    assert outside.read_bytes() == b"keep me"
    assert not (dest / "w.bin").is_symlink()
    assert (dest / "w.bin").read_bytes() == WEIGHTS_A


def test_a_symlinked_directory_in_dest_is_not_followed_by_an_unpack(
    pod: Pod, origin: Origin
) -> None:
    origin.put("/a/m.tgz", tar_of({"sub/w.bin": WEIGHTS_A}))
    outside = pod.tmp / "outside"
    outside.mkdir()
    dest = pod.tmp / "mnt" / "models"
    dest.mkdir(parents=True)
    (dest / "sub").symlink_to(outside)

    run = pod.run(f"{origin.url}/a/m.tgz", str(dest))

    assert run.returncode != 0, str(run)
    assert list(outside.iterdir()) == []


def test_dest_dir_itself_a_symlink_writes_nothing_through_it(pod: Pod, origin: Origin) -> None:
    origin.put("/m/w.bin", WEIGHTS_A)
    outside = pod.tmp / "outside"
    outside.mkdir()
    (pod.tmp / "mnt").mkdir()
    dest = pod.tmp / "mnt" / "models"
    dest.symlink_to(outside)

    run = pod.run(f"{origin.url}/m/w.bin", str(dest))

    # Refused (the model root must not be a symlink, cache/disk.py), exit 4.
    assert run.returncode == 4, str(run)
    assert run.compact_term()["reason"] == "ModelCacheUnwritable"
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("when", ["unpacking", "publishing"])
def test_a_kill_while_unpacking_then_a_restart_converges(
    pod: Pod, origin: Origin, when: str
) -> None:
    """SIGKILL while members are written into the private work directory,
    or while they are renamed into DEST_DIR: the restart unpacks again from
    the staged archive and ends with every file whole, no work left."""
    files = {f"d{i % 7}/f{i:04d}.bin": payload(16 << 10, seed=1000 + i) for i in range(600)}
    origin.put("/k/m.tar", tar_of(files))
    dest = pod.tmp / "mnt" / "models"
    private = dest / ".llmkube-stager"
    uri = f"{origin.url}/k/m.tar"

    def progressed() -> bool:
        if when == "unpacking":
            return any(sum(1 for _ in w.rglob("*.bin")) > 50 for w in private.glob("unpack.*"))
        return any(dest.glob("d*/f*.bin"))

    proc = pod.popen(uri, str(dest))
    deadline = time.monotonic() + 30
    while not progressed():
        if proc.poll() is not None:
            pytest.fail(f"the stager ended before it was killed: {proc.returncode}")
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(9)
    pod.finish(proc)

    run = pod.run(uri, str(dest))

    assert run.returncode == 0, str(run)
    got = {str(p.relative_to(dest)): p.read_bytes() for p in dest.glob("d*/f*.bin")}
    assert got == files
    assert not list(private.glob("unpack.*"))
    assert not list(private.rglob("m.tar*"))


def test_an_hf_repo_of_one_archive_is_served_as_it_is(pod: Pod, hub: FakeHub, cdn: Origin) -> None:
    """KServe's _download_hf (kserve-storage 0.21.0) never unpacks: a repo
    whose one file is `weights.tar.gz` gives the server that file, whole,
    as KServe's initializer would (the s3:// and http(s) forms unpack)."""
    archive = tar_of({"inner.bin": WEIGHTS_A})
    hub.add_repo("org/packed", {"weights.tar.gz": archive})
    dest = pod.tmp / "mnt" / "models"
    env = {"HF_ENDPOINT": hub.url}

    run = pod.run("hf://org/packed", str(dest), env=env)

    assert run.returncode == 0, str(run)
    assert (dest / "weights.tar.gz").read_bytes() == archive
    assert not (dest / "inner.bin").exists()

    warm = pod.run("hf://org/packed", str(dest), env=env)
    assert warm.returncode == 0, str(warm)
    assert (dest / "weights.tar.gz").read_bytes() == archive


def test_a_zip_bomb_on_a_small_volume_is_out_of_space_and_leaves_no_work(
    pod: Pod, origin: Origin
) -> None:
    """A 48 MiB member compressed to a few KiB on an 8 MiB emptyDir, under
    the default (1 TiB) bound: ENOSPC while unpacking is the volume's
    failure, named, with the half-written work removed and no model file."""
    origin.put("/z/m.zip", zip_of({"bomb.bin": b"\0" * (48 << 20)}))
    volume = pod.tmp / "mnt"
    volume.mkdir()
    with tmpfs(volume, "size=8m"):
        dest = volume / "models"

        run = pod.run(f"{origin.url}/z/m.zip", str(dest))

        assert run.returncode in (1, 4), str(run)
        assert run.compact_term()["reason"] == "ModelTransferOutOfSpace", str(run)
        assert not (dest / "bomb.bin").exists()
        assert not list((dest / ".llmkube-stager").glob("unpack.*"))
        assert {p.name for p in dest.iterdir()} == {".llmkube-stager"}


def test_sibling_dest_dirs_sharing_a_name_prefix_are_not_nested(pod: Pod, origin: Origin) -> None:
    """`/mnt/models` and `/mnt/models-2` are side by side, not nested."""
    origin.put("/a/w.bin", WEIGHTS_A)
    origin.put("/b/w.bin", WEIGHTS_B)
    first, second = pod.tmp / "mnt" / "models", pod.tmp / "mnt" / "models-2"

    run = pod.run(f"{origin.url}/a/w.bin", str(first), f"{origin.url}/b/w.bin", str(second))

    assert run.returncode == 0, str(run)
    assert (first / "w.bin").read_bytes() == WEIGHTS_A
    assert (second / "w.bin").read_bytes() == WEIGHTS_B


def test_onchange_drops_a_file_the_source_no_longer_has_from_dest(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """OnChange lists again and the object b.bin is gone: DEST_DIR must not
    keep showing the old set's b.bin beside the new a.bin (a mixed model for
    the server); what the agent never exposed stays."""
    s3.put(bucket, "m/a.bin", b"a" * 100)
    s3.put(bucket, "m/b.bin", b"b" * 100)
    dest = pod.tmp / "mnt" / "models"
    env = {**s3_env(s3), "LLMKUBE_REFRESH_POLICY": "OnChange"}
    first = pod.run(f"s3://{bucket}/m", str(dest), env=env)
    assert first.returncode == 0, str(first)
    (dest / "mine.txt").write_bytes(b"not the agent's")
    s3.admin().delete_object(Bucket=bucket, Key="m/b.bin")
    s3.put(bucket, "m/a.bin", b"A" * 100)

    run = pod.run(f"s3://{bucket}/m", str(dest), env=env)

    assert run.returncode == 0, str(run)
    assert (dest / "a.bin").read_bytes() == b"A" * 100
    assert not (dest / "b.bin").exists()
    assert (dest / "mine.txt").read_bytes() == b"not the agent's"


def test_onchange_dropping_a_stale_name_never_follows_a_symlink_out(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """The stale `sub/b.bin`'s directory in DEST_DIR was replaced by a
    symlink to a directory outside holding a hard link of the staged copy
    (the same inode): nothing outside is unlinked."""
    s3.put(bucket, "m/a.bin", b"a" * 100)
    s3.put(bucket, "m/sub/b.bin", b"b" * 100)
    dest = pod.tmp / "mnt" / "models"
    env = {**s3_env(s3), "LLMKUBE_REFRESH_POLICY": "OnChange"}
    first = pod.run(f"s3://{bucket}/m", str(dest), env=env)
    assert first.returncode == 0, str(first)
    outside = pod.tmp / "outside"
    outside.mkdir()
    (outside / "b.bin").hardlink_to(dest / ".llmkube-stager" / "model" / "sub" / "b.bin")
    (dest / "sub" / "b.bin").unlink()
    (dest / "sub").rmdir()
    (dest / "sub").symlink_to(outside)
    s3.admin().delete_object(Bucket=bucket, Key="m/sub/b.bin")
    s3.put(bucket, "m/a.bin", b"A" * 100)

    run = pod.run(f"s3://{bucket}/m", str(dest), env=env)

    assert run.returncode == 0, str(run)
    assert (outside / "b.bin").read_bytes() == b"b" * 100


def test_a_listing_that_repeats_a_key_across_pages_names_the_listing_not_model_files() -> None:
    """A listing that changed between pages (or a server that repeats a
    key): refused naming the key and the listing, not MODEL_FILES, which
    the user never set (the page function is the listing's injected
    dependency, as in test_listing_rules.py). Since #41 item 5 the listing
    itself refuses an object named twice (ModelSourceRejected, at the page
    that repeats it), before the set's own check would (InvalidFileSet)."""
    from llmkube_stager.errors import SourceError
    from llmkube_stager.sources.s3.listing import list_objects

    answers = [["m/a.bin", "m/b.bin"], ["m/b.bin", "m/c.bin"]]

    def page(prefix: str, token: str | None) -> dict[str, object]:
        i = int(token or 0)
        return {
            "Contents": [{"Key": k, "Size": 1, "ETag": '"e"'} for k in answers[i]],
            "IsTruncated": i + 1 < len(answers),
            "NextContinuationToken": str(i + 1),
        }

    with pytest.raises(SourceError) as caught:
        list_objects("s3://b/m", "b", "m", page)

    assert caught.value.reason.value == "ModelSourceRejected", caught.value.reason
    assert "MODEL_FILES" not in caught.value.detail, caught.value.detail
    assert "'m/b.bin'" in caught.value.detail and "twice" in caught.value.detail
    assert "'m'" in caught.value.detail, caught.value.detail


def test_a_recorded_listing_with_a_climbing_name_is_no_record(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """A `.llmkube-listing` (corrupted, or written by something else on the
    volume) naming `../../outside.bin` is not a listing of this directory:
    the source is listed again, and nothing outside the model root is
    looked at, written or removed."""
    s3.put(bucket, "m/a.bin", b"a" * 100)
    cache = pod.tmp / "models" / "m"
    env = {**s3_env(s3), "MODEL_SOURCE": f"s3://{bucket}/m", "CACHE_DIR": str(cache)}
    pod.run(env=env).ok(files=1, fetched=1)
    outside = pod.tmp / "outside.bin"
    outside.write_bytes(b"keep")
    (pod.tmp / "outside.bin.llmkube-size").write_text("999")
    record = cache / ".llmkube-listing"
    doc = json.loads(record.read_text())
    doc["files"].append(["../../outside.bin", 100, '"e"'])
    record.write_text(json.dumps(doc))

    run = pod.run(env=env)

    run.ok(files=1, fetched=0, reused=1, nbytes=0)
    assert outside.read_bytes() == b"keep"
    assert (pod.tmp / "outside.bin.llmkube-size").read_text() == "999"


@pytest.mark.parametrize(
    "name",
    [".llmkube.lock", ".llmkube-validators", "w.bin.llmkube-size", "w.bin.llmkube-tmp.abcdef"],
)
def test_a_url_named_like_the_agents_own_records_is_refused_before_any_io(
    pod: Pod, origin: Origin, name: str
) -> None:
    """The file's name comes from the URL: `.llmkube.lock` was staged onto
    the engine's own lock file and DEST_DIR showed it empty (exit 0, a
    truncated file served); other record names the sweep may take for its
    own. They are refused as MODEL_FILES entries are."""
    origin.put(f"/p/{name}", b"z" * 10)
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"{origin.url}/p/{name}", str(dest))

    assert run.returncode == 2, str(run)
    assert run.compact_term()["reason"] == "InvalidConfiguration"
    assert "reserved" in run.compact_term()["message"]
    assert origin.requests() == []
    assert not (dest / name).exists()


def test_an_s3_key_named_like_the_agents_own_records_is_an_invalid_file_set(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """`s3://bucket/dir/.llmkube.lock` is the one object of its URI: its
    name is checked as a prefix's keys are, not staged onto the lock."""
    s3.put(bucket, "dir/.llmkube.lock", b"z" * 10)
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"s3://{bucket}/dir/.llmkube.lock", str(dest), env=s3_env(s3))

    assert run.returncode == 2, str(run)
    assert run.compact_term()["reason"] == "InvalidFileSet"
    assert not (dest / ".llmkube.lock").exists()
