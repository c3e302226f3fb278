"""#24 item 5 and the S3 part of item 2: an s3:// prefix without MODEL_FILES
is listed (ListObjectsV2, paginated), keys relative to the prefix, on the
suite's SeaweedFS. The listing is recorded before the first publish: a warm
start asks nothing, an interrupted run finishes from its own listing (the
GETs carry the listed ETag as If-Match, so a changed object fails with
ModelSourceChanged instead of joining the old set), and OnChange lists
again and refreshes the set whose ETags changed."""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path

import pytest

from tests.harness.disk import record_of
from tests.harness.pod import Pod
from tests.harness.sample import payload
from tests.harness.seaweed import S3Fault, SeaweedS3, s3_env

pytestmark = pytest.mark.e2e

LISTING = ".llmkube-listing"


def put_many(s3: SeaweedS3, bucket: str, objects: dict[str, bytes]) -> None:
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda kv: s3.admin().put_object(Bucket=bucket, Key=kv[0], Body=kv[1]),
                objects.items(),
            )
        )


def lists(s3: SeaweedS3, bucket: str) -> list[str]:
    """The ListObjectsV2 requests the agent sent."""
    return [
        r.query
        for r in s3.requests("GET")
        if r.path.rstrip("/") == f"/{bucket}" and "list-type=2" in r.query
    ]


def staged_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and ".llmkube" not in p.name and not p.name.endswith(".sha256")
    }


def test_a_prefix_of_more_than_1000_keys_is_listed_in_pages_and_staged(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """#24 (done means): a listing of more than 1,000 keys (1,004 under the
    prefix: two pages of ListObjectsV2), every one staged."""
    objects = {
        f"models/m1/shard-{i // 100:02d}/part-{i:04d}.bin": f"{i}".encode() * 3 for i in range(1003)
    }
    objects["models/m1/config.json"] = b'{"a": 1}'
    # Beside the prefix, never staged: a sibling whose name starts like it.
    objects["models/m1-old/config.json"] = b"old"
    objects["models/other.bin"] = b"other"
    put_many(s3, bucket, objects)
    cache = pod.tmp / "models" / "m1"
    env = {**s3_env(s3), "MODEL_SOURCE": f"s3://{bucket}/models/m1/", "CACHE_DIR": str(cache)}

    run = pod.run(env=env, LLMKUBE_FILES_IN_FLIGHT="16", timeout=120)

    run.ok(files=1004, fetched=1004)
    wanted = {
        k.removeprefix("models/m1/"): v for k, v in objects.items() if k.startswith("models/m1/")
    }
    assert staged_files(cache) == wanted
    assert record_of(cache / "config.json") == str(len(objects["models/m1/config.json"]))
    pages = lists(s3, bucket)
    assert len(pages) == 2, pages  # 1,000 keys a page
    assert "continuation-token=" in pages[1]
    # The listing gave every size and ETag: no HEAD per object.
    assert [r for r in s3.requests("HEAD") if r.path.startswith(f"/{bucket}/")] == []
    record = json.loads((cache / LISTING).read_text())
    assert len(record["files"]) == 1004

    s3.clear()
    warm = pod.run(env=env, timeout=120)
    warm.ok(files=1004, fetched=0, reused=1004)
    assert s3.requests() == []


def test_a_listing_with_a_reserved_name_is_an_invalid_file_set(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """A key that would land on the agent's own records is refused before any GET."""
    s3.put(bucket, "m/model.bin", b"x" * 10)
    s3.put(bucket, "m/model.bin.llmkube-size", b"99")
    cache = pod.tmp / "models" / "m"
    env = {**s3_env(s3), "MODEL_SOURCE": f"s3://{bucket}/m", "CACHE_DIR": str(cache)}

    run = pod.run(env=env)

    run.failed("InvalidFileSet")
    assert not (cache / "model.bin").exists()
    assert [r for r in s3.requests("GET") if r.path.startswith(f"/{bucket}/m")] == []


def test_an_interrupted_run_never_mixes_two_listings(pod: Pod, s3: SeaweedS3, bucket: str) -> None:
    """A published, B failed; B changes upstream: IfNotPresent finishes from
    the recorded listing, and B's GET (If-Match: the listed ETag) is refused,
    so the new B never joins the old A. OnChange lists anew and stages it."""
    a_old, b_old, b_new = (
        payload(20 << 10, seed=1),
        payload(30 << 10, seed=2),
        payload(30 << 10, seed=3),
    )
    s3.put(bucket, "m/a.bin", a_old)
    s3.put(bucket, "m/b.bin", b_old)
    cache = pod.tmp / "models" / "m"
    env = {
        **s3_env(s3),
        "MODEL_SOURCE": f"s3://{bucket}/m/",
        "CACHE_DIR": str(cache),
        "LLMKUBE_FILES_IN_FLIGHT": "1",
    }
    s3.set_fault(f"/{bucket}/m/b.bin", S3Fault(methods=("GET",), status=403, code="AccessDenied"))
    first = pod.run(env=env)
    first.failed("ModelSourceUnauthorized")
    assert (cache / "a.bin").read_bytes() == a_old
    assert not (cache / "b.bin").exists()
    s3.clear()
    s3.put(bucket, "m/b.bin", b_new)

    second = pod.run(env=env)

    second.failed("ModelSourceChanged")
    assert not (cache / "b.bin").exists()

    onchange = pod.run(env=env, LLMKUBE_REFRESH_POLICY="OnChange")
    onchange.ok(files=2, fetched=1, reused=1)
    assert (cache / "b.bin").read_bytes() == b_new


def test_onchange_refreshes_a_same_size_change_by_its_etag(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    old, new = payload(40 << 10, seed=4), payload(40 << 10, seed=5)
    s3.put(bucket, "m/w.bin", old)
    s3.put(bucket, "m/config.json", b"{}")
    cache = pod.tmp / "models" / "m"
    env = {
        **s3_env(s3),
        "MODEL_SOURCE": f"s3://{bucket}/m",
        "CACHE_DIR": str(cache),
        "LLMKUBE_REFRESH_POLICY": "OnChange",
    }
    pod.run(env=env).ok(files=2, fetched=2)
    s3.put(bucket, "m/w.bin", new)
    s3.put(bucket, "m/added.txt", b"new file")
    s3.clear()

    run = pod.run(env=env)

    run.ok(files=3, fetched=2, reused=1)
    assert (cache / "w.bin").read_bytes() == new
    assert (cache / "added.txt").read_bytes() == b"new file"
    assert len(lists(s3, bucket)) == 1
    # The new listing is the record now: an IfNotPresent start asks nothing.
    record = json.loads((cache / LISTING).read_text())
    assert sorted(f[0] for f in record["files"]) == ["added.txt", "config.json", "w.bin"]
    s3.clear()
    pod.run(env={**env, "LLMKUBE_REFRESH_POLICY": "IfNotPresent"}).ok(files=3, fetched=0, reused=3)
    assert s3.requests() == []


def test_an_empty_prefix_is_not_found(pod: Pod, s3: SeaweedS3, bucket: str) -> None:
    s3.put(bucket, "elsewhere/x.bin", b"x")
    cache = pod.tmp / "models" / "m"
    env = {**s3_env(s3), "MODEL_SOURCE": f"s3://{bucket}/nothing/", "CACHE_DIR": str(cache)}

    run = pod.run(env=env)

    run.failed("ModelSourceNotFound")
    assert "nothing" in run.term["message"]


def test_kserve_form_stages_a_prefix_and_a_single_key(pod: Pod, s3: SeaweedS3, bucket: str) -> None:
    s3.put(bucket, "iris/model.joblib", b"J" * 1000)
    s3.put(bucket, "iris/meta/info.json", b"{}")
    s3.put(bucket, "single/model.onnx", b"O" * 500)
    s3.put(bucket, "single/model.onnx.bak", b"not me")
    prefix_dest, key_dest = pod.tmp / "mnt" / "models", pod.tmp / "mnt" / "one"
    env = s3_env(s3)

    run = pod.run(
        f"s3://{bucket}/iris",
        str(prefix_dest),
        f"s3://{bucket}/single/model.onnx",
        str(key_dest),
        env=env,
    )

    assert run.returncode == 0, str(run)
    assert run.compact_term()["stats"]["files"] == 3
    assert (prefix_dest / "model.joblib").read_bytes() == b"J" * 1000
    assert (prefix_dest / "meta" / "info.json").read_bytes() == b"{}"
    assert (key_dest / "model.onnx").read_bytes() == b"O" * 500
    assert sorted(p.name for p in key_dest.iterdir()) == [".llmkube-stager", "model.onnx"]


def test_kserve_form_unpacks_an_s3_archive_and_a_restart_asks_nothing(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    from tests.harness.archives import tar_of

    data = payload(50 << 10, seed=8)
    s3.put(bucket, "arch/model.tar.gz", tar_of({"model/weights.bin": data}))
    dest = pod.tmp / "mnt" / "models"
    uri = f"s3://{bucket}/arch/model.tar.gz"

    run = pod.run(uri, str(dest), env=s3_env(s3))

    assert run.returncode == 0, str(run)
    assert (dest / "model" / "weights.bin").read_bytes() == data
    s3.clear()
    warm = pod.run(uri, str(dest), env=s3_env(s3))
    assert warm.returncode == 0, str(warm)
    assert s3.requests() == []


def test_an_empty_object_is_staged_and_a_directory_marker_is_not(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """KServe skips zero-size objects; an empty file of a model (an empty
    `__init__.py`, `added_tokens.json`) is part of it here."""
    s3.put(bucket, "m/model.bin", b"M" * 64)
    s3.put(bucket, "m/empty.txt", b"")
    s3.admin().put_object(Bucket=bucket, Key="m/sub/", Body=b"")
    cache = pod.tmp / "models" / "m"
    env = {**s3_env(s3), "MODEL_SOURCE": f"s3://{bucket}/m/", "CACHE_DIR": str(cache)}

    run = pod.run(env=env)

    run.ok(files=2, fetched=2)
    assert (cache / "empty.txt").read_bytes() == b""
    assert record_of(cache / "empty.txt") == "0"
    assert (cache / "model.bin").read_bytes() == b"M" * 64


def test_verify_checks_every_listed_file(pod: Pod, s3: SeaweedS3, bucket: str) -> None:
    """A reader pod's `verify` of a listed prefix: offline, against the
    recorded listing; a missing file is ModelCacheIncomplete, a directory
    that was never staged ModelCacheEmpty."""
    s3.put(bucket, "m/a.bin", b"A" * 50)
    s3.put(bucket, "m/d/b.bin", b"B" * 70)
    cache = pod.tmp / "models" / "m"
    env = {**s3_env(s3), "MODEL_SOURCE": f"s3://{bucket}/m/", "CACHE_DIR": str(cache)}
    pod.run(env=env).ok(files=2, fetched=2)
    s3.clear()

    pod.run("verify", env=env).ok(files=2, fetched=0, reused=2)
    assert s3.requests() == []
    (cache / "d" / "b.bin").unlink()
    pod.run("verify", env=env).failed("ModelCacheIncomplete")
    other = {**env, "CACHE_DIR": str(pod.tmp / "models" / "never")}
    pod.run("verify", env=other).failed("ModelCacheEmpty")


def test_plan_of_a_listed_prefix(pod: Pod, s3: SeaweedS3, bucket: str) -> None:
    """`plan` asks nothing of a prefix it has no record of: its files are
    unknown until `plan --probe` lists it (read only, nothing written);
    once staged, it plans from the record without a request."""
    s3.put(bucket, "m/a.bin", b"A" * 10)
    cache = pod.tmp / "models" / "m"
    env = {**s3_env(s3), "MODEL_SOURCE": f"s3://{bucket}/m/", "CACHE_DIR": str(cache)}

    cold = pod.run("plan", "--json", env=env)
    assert cold.returncode == 0, str(cold)
    assert "a.bin" not in cold.stdout and "--probe" in cold.stdout
    assert s3.requests() == []
    probed = pod.run("plan", "--probe", "--json", env=env)
    assert probed.returncode == 0, str(probed)
    assert "a.bin" in probed.stdout
    assert not cache.exists()
    pod.run(env=env).ok(files=1, fetched=1)
    s3.clear()

    warm = pod.run("plan", "--json", env=env)
    assert warm.returncode == 0, str(warm)
    assert "a.bin" in warm.stdout
    assert s3.requests() == []


def test_a_key_in_the_agents_private_directory_exposes_nothing(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """`prefix/.llmkube-stager/model/x` would replace the staged `x`'s name."""
    s3.put(bucket, "m/x.bin", b"good" * 10)
    s3.put(bucket, "m/.llmkube-stager/model/x.bin", b"evil" * 10)
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"s3://{bucket}/m", str(dest), env=s3_env(s3))

    assert run.returncode == 2, str(run)
    assert run.compact_term()["reason"] == "InvalidFileSet"
    assert not (dest / "x.bin").exists()
    # Refused from the listing, before any GET.
    assert [r for r in s3.requests("GET") if "list-type" not in r.query] == []
