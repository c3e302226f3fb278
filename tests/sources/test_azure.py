"""Azure Blob sources (#33 item 2) against Azurite on loopback: the SAS the
account key signs, Range, If-Match, listings and error answers are the
emulator's, not ours; the front's log shows what went over the wire and
injects Azure's throttling."""

from __future__ import annotations

import base64
import signal
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from llmkube_stager.sources.azure.listing import PAGE_BLOBS
from tests.harness.azurite import (
    ACCOUNT,
    ACCOUNT_KEY,
    SIG_ENDING_KEY,
    Azurite,
    S3Fault,
    S3Request,
    container_sas,
    new_container,
    put,
    put_many,
)
from tests.harness.canary import assert_no_leak, canary, leaks, outputs_of
from tests.harness.disk import openat_tracer, partials, read_back_opens, record_of
from tests.harness.pod import import_lines, wait_for
from tests.harness.sample import KIB, MIB, payload

pytestmark = [pytest.mark.floors, pytest.mark.usefixtures("azure_loopback_only")]

# The session's Azurite (`az`, its front cleared) and a `container` of the
# test's own are tests/conftest.py's.


def key_env(az: Azurite) -> dict[str, str]:
    return {"AZURE_STORAGE_CONNECTION_STRING": az.connection_string()}


def blob_gets(az: Azurite, container: str) -> list:
    return [r for r in az.requests("GET") if "comp=list" not in r.query and container in r.path]


# -- happy paths ------------------------------------------------------------------------------


def test_single_blob_with_the_account_key(pod, az, container) -> None:
    data = payload(192 * KIB)
    etag = put(az, container, "models/llama.gguf", data)
    env = pod.single_env(Azurite.source(container, "models/llama.gguf"), **key_env(az))

    run = pod.run(env=env)

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    assert record_of(pod.dest()) == str(len(data))
    head, get = [r for r in az.requests() if container in r.path]
    assert (head.method, head.status) == ("HEAD", 200)
    assert (get.method, get.status) == ("GET", 200)
    # The account key signed a SAS (the emulator checked it); the GET is
    # pinned to the blob it probed.
    assert get.params["sig"] and get.params["sr"] == ["c"]
    assert get.headers["if-match"] == etag
    assert "authorization" not in get.headers
    assert leaks(ACCOUNT_KEY, run.outputs) == []
    assert get.params["sig"][0] not in run.outputs


def test_prefix_is_listed_and_a_warm_start_asks_nothing(pod, az, container) -> None:
    """AZURE_STORAGE_ACCESS_KEY (KServe's variable) with a connection string
    that only names the endpoint; a prefix at a '/' boundary, empty blobs
    left out as KServe does; then IfNotPresent with zero requests and no
    Azure library imported."""
    files = {
        "config.json": b'{"a": 1}',
        "weights/model 00001.safetensors": payload(96 * KIB, 1),
        "tokenizer/токенизатор.json": b'{"k": "v"}',
    }
    for rel, data in files.items():
        put(az, container, f"models/iris/{rel}", data)
    put(az, container, "models/iris-v2/other.bin", b"not this one")
    put(az, container, "models/iris/_SUCCESS", b"")
    env = pod.env | {
        "MODEL_SOURCE": Azurite.source(container, "models/iris"),
        "CACHE_DIR": str(pod.cache_dir),
        "AZURE_STORAGE_CONNECTION_STRING": az.connection_string(key=False),
        "AZURE_STORAGE_ACCESS_KEY": ACCOUNT_KEY,
    }

    pod.run(env=env).ok(files=3, fetched=3)

    for rel, data in files.items():
        assert (pod.cache_dir / rel).read_bytes() == data
    assert not (pod.cache_dir / "_SUCCESS").exists()
    assert not (pod.cache_dir / "other.bin").exists()
    lists = [r for r in az.requests("GET") if "comp=list" in r.query]
    assert len(lists) == 1 and lists[0].params["prefix"] == ["models/iris"]
    # Every GET pinned to the ETag of the listing, none needing a HEAD.
    assert az.requests("HEAD") == []
    assert all(r.headers.get("if-match") for r in blob_gets(az, container))

    az.clear()
    warm = pod.run(env=env, python_flags=("-X", "importtime")).ok(files=3, fetched=0, reused=3)
    assert az.requests() == []
    assert not [m for m in import_lines(warm.stderr) if m.startswith(("azure", "msal"))]


def test_a_listing_of_more_than_one_page_is_followed(pod, az, container) -> None:
    """1,003 blobs (#33 item 4: listings of more than 1,000 objects) from a
    service that answers pages of at most 1,000 (Azure may answer fewer
    than `maxresults`, with a NextMarker: the front lowers it on the way
    to Azurite): NextMarker is followed, the last blob is on the second
    page; the patterns keep the transfer small. A page of Azurite's own
    making (PAGE_BLOBS asked, no cap) is crossed by
    tests/torture/test_cloud_listings.py (`make torture`)."""
    put_many(az, container, [f"m/shard-{i:05d}.bin" for i in range(1003)], b"x")
    keep = payload(8 * KIB, 2)
    put(az, container, "m/zz-keep.bin", keep)
    az.front.cap_query("maxresults", 1000)
    env = pod.env | {
        "MODEL_SOURCE": Azurite.source(container, "m"),
        "CACHE_DIR": str(pod.cache_dir),
        "STORAGE_ALLOW_PATTERNS": '["zz-*", "shard-00000.bin"]',
        **key_env(az),
    }

    pod.run(env=env).ok(files=2, fetched=2)

    assert (pod.cache_dir / "zz-keep.bin").read_bytes() == keep
    assert (pod.cache_dir / "shard-00000.bin").read_bytes() == b"x"
    lists = [r for r in az.requests("GET") if "comp=list" in r.query]
    assert len(lists) == 2
    assert [r.params["maxresults"] for r in lists] == [[str(PAGE_BLOBS)]] * 2
    assert "marker" not in lists[0].params and lists[1].params["marker"][0]


def test_a_sas_in_the_url_is_used_and_never_shown(pod, az, container) -> None:
    data = payload(64 * KIB, 3)
    put(az, container, "model.gguf", data)
    sas = container_sas(container, read=True, list=True)
    source = Azurite.source(container, "model.gguf") + "?" + sas
    env = pod.single_env(source, AZURE_STORAGE_CONNECTION_STRING=az.connection_string(key=False))
    env["LLMKUBE_LOG_LEVEL"] = "debug"  # each request's line too (#46 item 5)

    run = pod.run(env=env).ok(files=1, fetched=1)

    assert pod.dest().read_bytes() == data
    assert any(x.startswith("> GET ") and "sig=***" in x for x in run.lines), run.stderr
    (get,) = blob_gets(az, container)
    signature = parse_qs(sas)["sig"][0]
    assert get.params["sig"] == [signature]
    assert leaks(signature, run.outputs) == []


@pytest.mark.parametrize("where", ["AZURE_STORAGE_ACCESS_KEY", "AccountKey"])
def test_an_account_key_ending_in_sig_is_a_key_not_a_sas(pod, az, container, where) -> None:
    """#41 item 2: a key whose base64 ends in `sig==` (the account's second
    key, which Azurite checks) signs a SAS like any key. Failed before: it
    was taken for a SAS and sent as the query, which Azurite refused (403)."""
    data = payload(48 * KIB, 41)
    put(az, container, "model.gguf", data)
    endpoint_only = az.connection_string(key=False)
    if where == "AccountKey":
        extra = {"AZURE_STORAGE_CONNECTION_STRING": endpoint_only + f"AccountKey={SIG_ENDING_KEY};"}
    else:
        extra = {
            "AZURE_STORAGE_CONNECTION_STRING": endpoint_only,
            "AZURE_STORAGE_ACCESS_KEY": SIG_ENDING_KEY,
        }

    run = pod.run(env=pod.single_env(Azurite.source(container, "model.gguf"), **extra))

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    (get,) = blob_gets(az, container)
    assert get.params["sr"] == ["c"] and get.params["sp"] == ["rl"]
    # The key never went out, in the query or anywhere else.
    assert all(SIG_ENDING_KEY[:40] not in r.query for r in az.requests())
    assert leaks(SIG_ENDING_KEY, run.outputs) == []
    assert get.params["sig"][0] not in run.outputs


def test_a_public_container_is_read_anonymously(pod, az) -> None:
    name = new_container(az, "public", public_access="container")
    data = payload(32 * KIB, 4)
    put(az, name, "dir/model.gguf", data)
    env = pod.single_env(
        Azurite.source(name, "dir/model.gguf"),
        AZURE_STORAGE_CONNECTION_STRING=az.connection_string(key=False),
    )

    run = pod.run(env=env).ok(files=1, fetched=1)

    assert pod.dest().read_bytes() == data
    assert "asking anonymously" in run.stderr
    assert all("sig" not in r.params for r in az.requests())


# -- failures ---------------------------------------------------------------------------------


def test_a_wrong_account_key_names_the_variable(pod, az, container) -> None:
    put(az, container, "model.gguf", b"abc")
    wrong = base64.b64encode(payload(64, 5)).decode()
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        AZURE_STORAGE_CONNECTION_STRING=az.connection_string(key=False),
        AZURE_STORAGE_ACCESS_KEY=wrong,
    )

    run = pod.run(env=env).failed("ModelSourceUnauthorized", exit_code=4, retryable=False)

    assert "AZURE_STORAGE_ACCESS_KEY" in run.term["remedy"]
    assert leaks(wrong, run.outputs) == []
    assert not pod.dest().exists()


def test_an_expired_sas_is_unauthorized(pod, az, container) -> None:
    put(az, container, "model.gguf", b"abc")
    sas = container_sas(container, valid_s=-300, read=True, list=True)
    env = pod.single_env(
        Azurite.source(container, "model.gguf") + "?" + sas,
        AZURE_STORAGE_CONNECTION_STRING=az.connection_string(key=False),
    )

    run = pod.run(env=env).failed("ModelSourceUnauthorized", exit_code=4)

    assert "the SAS in MODEL_SOURCE" in run.term["remedy"]
    assert leaks(parse_qs(sas)["sig"][0], run.outputs) == []


def test_a_missing_container_or_blob_is_not_found(pod, az, container) -> None:
    env = pod.single_env(Azurite.source(container, "absent.gguf"), **key_env(az))
    run = pod.run(env=env).failed("ModelSourceNotFound", exit_code=4)
    assert "absent.gguf" in run.term["message"]

    env = pod.env | {
        "MODEL_SOURCE": Azurite.source(f"{container}-none", "models"),
        "CACHE_DIR": str(pod.cache_dir),
        **key_env(az),
    }
    run = pod.run(env=env).failed("ModelSourceNotFound", exit_code=4)
    assert "container or blob" in run.term["message"]


def test_server_busy_is_rate_limited_with_azure_words(pod, az, container) -> None:
    data = payload(16 * KIB, 6)
    put(az, container, "model.gguf", data)
    az.set_fault(f"/{ACCOUNT}/{container}/model.gguf", S3Fault(status=503, code="ServerBusy"))
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        LLMKUBE_RETRIES="1",
        LLMKUBE_MAX_RETRY_WAIT="0.1",
        **key_env(az),
    )

    run = pod.run(env=env).failed("ModelSourceRateLimited", exit_code=1, retryable=True)

    assert "ServerBusy" in run.term["remedy"]
    # Throttled once, then served.
    az.set_fault(
        f"/{ACCOUNT}/{container}/model.gguf", S3Fault(status=503, code="ServerBusy", times=1)
    )
    pod.run(env=env).ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data


# -- durability -------------------------------------------------------------------------------


def _killed_with_a_partial(pod, env: dict[str, str], dest: Path, what: str) -> None:
    """Start the CLI and SIGKILL it once a partial of `dest` holds 4 MiB."""
    proc = pod.popen(env=env)
    wait_for(
        lambda: dest.parent.is_dir() and any(s >= 4 * MIB for s in partials(dest).values()),
        60,
        what,
        proc,
    )
    proc.send_signal(signal.SIGKILL)
    assert pod.finish(proc).returncode == -signal.SIGKILL


def test_a_killed_transfer_resumes_with_a_range(pod, az, container) -> None:
    # Written in 4 MiB buffers (transfer/pipeline.py): a blob of several,
    # paced, so that the kill finds some on disk and more to come.
    data = payload(16 * MIB, 7)
    put(az, container, "big.gguf", data)
    path = f"/{ACCOUNT}/{container}/big.gguf"
    az.set_fault(path, S3Fault(rate_bytes_per_s=2 * MIB, methods=("GET",)))
    env = pod.single_env(
        Azurite.source(container, "big.gguf"), LLMKUBE_CONNECTIONS="1", **key_env(az)
    )
    _killed_with_a_partial(pod, env, pod.dest(), "a partial of the blob")
    az.clear()

    pod.run(env=env).ok(files=1, fetched=1)

    assert pod.dest().read_bytes() == data
    (get,) = blob_gets(az, container)
    assert get.headers["range"].startswith("bytes=") and get.headers["range"] != "bytes=0-"
    assert get.status == 206 and get.headers["if-match"]


def test_a_blob_replaced_mid_transfer_is_never_spliced(pod, az, container) -> None:
    """The blob is replaced (same size) while a partial of the old one is
    on disk: the resumed GET carries the old ETag in If-Match, Azurite
    answers 412, and the file published is the new one whole, or none."""
    old, new = payload(16 * MIB, 8), payload(16 * MIB, 9)
    put(az, container, "model.gguf", old)
    path = f"/{ACCOUNT}/{container}/model.gguf"
    az.set_fault(path, S3Fault(rate_bytes_per_s=2 * MIB, methods=("GET",)))
    env = pod.single_env(
        Azurite.source(container, "model.gguf"), LLMKUBE_CONNECTIONS="1", **key_env(az)
    )
    _killed_with_a_partial(pod, env, pod.dest(), "a partial of the old blob")
    az.clear()
    put(az, container, "model.gguf", new)

    run = pod.run(env=env)

    if run.returncode == 0:
        assert pod.dest().read_bytes() == new
    else:
        run.failed("ModelSourceChanged", exit_code=1)
        assert not pod.dest().exists()
    gets = blob_gets(az, container)
    # The partial is named by the old ETag: the new blob is fetched whole.
    assert [r.headers.get("range") for r in gets] == [None]


def test_a_listed_blob_replaced_mid_transfer_is_never_spliced(pod, az, container) -> None:
    """The listing of the interrupted run is the run's (one generation): the
    resumed GET is pinned to its ETag, Azurite answers 412 to the replaced
    blob, nothing of the new one is appended to the old bytes."""
    old, new = payload(16 * MIB, 10), payload(16 * MIB, 11)
    put(az, container, "m/model.gguf", old)
    az.set_fault("*", S3Fault(rate_bytes_per_s=2 * MIB, methods=("GET",)))
    env = pod.env | {
        "MODEL_SOURCE": Azurite.source(container, "m"),
        "CACHE_DIR": str(pod.cache_dir),
        "LLMKUBE_CONNECTIONS": "1",
        **key_env(az),
    }
    dest = pod.cache_dir / "model.gguf"
    _killed_with_a_partial(pod, env, dest, "a partial of the old blob")
    az.clear()
    new_etag = put(az, container, "m/model.gguf", new)

    pod.run(env=env).ok(files=1, fetched=1)

    # Listed anew: the old partial (named by the old ETag) is not resumed,
    # the new blob is fetched whole, pinned to its own ETag.
    assert dest.read_bytes() == new
    gets = blob_gets(az, container)
    assert [(r.headers.get("range"), r.headers["if-match"]) for r in gets] == [(None, new_etag)]


def test_a_blob_replaced_between_its_ranges_is_never_spliced(pod, az, container) -> None:
    """A slow stream widens to ranged GETs on two connections; the blob is
    replaced just before the second range is forwarded (the front's hook
    runs before it answers), so that range is asked of the new blob with
    the old ETag in If-Match: Azurite answers 412 and no file of both
    versions is published. (Replaced on a timer instead, every range could
    be asked before the new blob landed: the old blob, whole and matching
    its Content-MD5, was then published, which is right, and no 412 was
    seen: the test, not the agent, failed under load.)"""
    old, new = payload(48 * MIB, 12), payload(48 * MIB, 13)
    put(az, container, "big.gguf", old)
    path = f"/{ACCOUNT}/{container}/big.gguf"
    az.set_fault(path, S3Fault(rate_bytes_per_s=8 * MIB, methods=("GET",)))
    seen: list[S3Request] = []

    def replace_before_the_second_range(request: S3Request) -> None:
        if request.method == "GET" and request.path == path:
            seen.append(request)
            if len(seen) == 3:  # the stream, the first range, then this one
                put(az, container, "big.gguf", new)

    az.front.on_request(replace_before_the_second_range)
    env = pod.single_env(
        Azurite.source(container, "big.gguf"),
        LLMKUBE_CONNECTIONS="2",
        LLMKUBE_RETRIES="2",
        LLMKUBE_MAX_RETRY_WAIT="0.2",
        **key_env(az),
    )

    # Azurite cuts the ranges in flight when the blob is replaced; asked
    # again, they are refused (412): ModelSourceChanged, or the new blob
    # whole on an attempt of its own.
    run = pod.run(env=env)

    if run.returncode == 0:
        assert pod.dest().read_bytes() == new
    else:
        run.failed("ModelSourceChanged", exit_code=1)
        assert not pod.dest().exists()
    gets = blob_gets(az, container)
    assert any(r.status == 412 for r in gets)


def test_kserve_storage_uri_of_a_prefix_is_served(pod, az, container) -> None:
    """KServe's form (`SRC_URI DEST_DIR`): the Azure URI used to be refused
    with exit 2 (kserve/uris.py); now its prefix is listed and staged."""
    files = {"model.onnx": payload(40 * KIB, 30), "sub/config.json": b"{}"}
    for rel, data in files.items():
        put(az, container, f"iris/v1/{rel}", data)
    dest = pod.tmp / "mnt" / "models"

    pod.run(Azurite.source(container, "iris/v1"), str(dest), env=key_env(az)).ok()

    for rel, data in files.items():
        assert (dest / rel).read_bytes() == data


def test_no_azure_secret_reaches_any_output(pod, az, container) -> None:
    """Canaries of every Azure secret, in runs that fail where each is
    judged (refused by Azurite, or refused as configuration) and in one
    that succeeds, whose per-request SAS signatures only the wire shows:
    none in stdout, the log, the termination message or the cache."""
    data = payload(24 * KIB, 31)
    put(az, container, "model.gguf", data)
    source = Azurite.source(container, "model.gguf")
    wrong_key = base64.b64encode(("azkey" + canary("", 59)).encode()).decode()
    sig = canary("azsig", 40)
    endpoint_only = az.connection_string(key=False)
    runs = {
        "a wrong AccountKey": {
            "AZURE_STORAGE_CONNECTION_STRING": endpoint_only + f"AccountKey={wrong_key};"
        },
        "a connection string that is not one": {"AZURE_STORAGE_CONNECTION_STRING": f"{wrong_key}"},
        "an access key that is not base64": {
            "AZURE_STORAGE_CONNECTION_STRING": endpoint_only,
            "AZURE_STORAGE_ACCESS_KEY": "not*base64*" + sig,
        },
        "a SAS with a wrong signature": {
            "AZURE_STORAGE_CONNECTION_STRING": endpoint_only,
            "MODEL_SOURCE": f"{source}?sv=2021-08-06&sr=c&sp=rl&se=2099-01-01&sig={sig}",
        },
        "a SAS in AZURE_STORAGE_ACCESS_KEY": {
            "AZURE_STORAGE_CONNECTION_STRING": endpoint_only,
            "AZURE_STORAGE_ACCESS_KEY": f"sv=2021-08-06&sr=c&sp=rl&se=2099-01-01&sig={sig}",
        },
    }
    canaries = {"account key": wrong_key, "SAS signature": sig}
    for what, extra in runs.items():
        run = pod.run(env=pod.single_env(source, **extra))
        assert run.returncode in (2, 4), (what, str(run))
        assert_no_leak(outputs_of(run, pod.cache_dir), canaries)

    az.clear()
    run = pod.run(env=pod.single_env(source, **key_env(az))).ok(files=1, fetched=1)
    signatures = {f"sig-{i}": v for i, r in enumerate(az.requests()) for v in r.params["sig"]}
    assert signatures
    assert_no_leak(outputs_of(run, pod.cache_dir), {**signatures, "key": ACCOUNT_KEY})


def test_onchange_refetches_a_replaced_blob_by_its_etag(pod, az, container) -> None:
    """OnChange lists anew and compares the blobs' ETags with the recorded
    ones: an unchanged set is reused (one listing, no GET), a replaced blob
    of the same size is fetched again."""
    first, second = payload(32 * KIB, 40), payload(32 * KIB, 41)
    put(az, container, "m/model.gguf", first)
    put(az, container, "m/config.json", b"{}")
    env = pod.env | {
        "MODEL_SOURCE": Azurite.source(container, "m"),
        "CACHE_DIR": str(pod.cache_dir),
        "LLMKUBE_REFRESH_POLICY": "OnChange",
        **key_env(az),
    }
    pod.run(env=env).ok(files=2, fetched=2)

    az.clear()
    pod.run(env=env).ok(files=2, fetched=0, reused=2)
    assert blob_gets(az, container) == []

    put(az, container, "m/model.gguf", second)
    az.clear()
    pod.run(env=env).ok(files=2, fetched=1, reused=1)
    assert (pod.cache_dir / "model.gguf").read_bytes() == second


def test_a_blobs_stored_content_encoding_is_its_metadata(pod, az, container) -> None:
    """A blob stored with Content-Encoding: gzip is answered with it: the
    stored bytes are the file in stage mode, as for S3 (#29 item 11; KServe
    mode refuses it, #41 item 6: tests/sources/test_stored_gzip.py). A
    listed blob's coding is asked by one HEAD."""
    from azure.storage.blob import ContentSettings

    data = payload(16 * KIB, 42)
    blob = az.service().get_blob_client(container, "m/weights.bin")
    blob.upload_blob(data, content_settings=ContentSettings(content_encoding="gzip"))
    env = pod.env | {
        "MODEL_SOURCE": Azurite.source(container, "m"),
        "CACHE_DIR": str(pod.cache_dir),
        **key_env(az),
    }

    pod.run(env=env).ok(files=1, fetched=1)

    assert (pod.cache_dir / "weights.bin").read_bytes() == data
    assert len(az.requests("HEAD")) == 1

    # One blob (MODEL_PATH): the probe's HEAD says the coding.
    single = pod.single_env(Azurite.source(container, "m/weights.bin"), **key_env(az))
    pod.run(env=single).ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data


def test_kserve_sha256_blobs_are_files_like_any_other(pod, az, container) -> None:
    """#31 item 4 for Azure Blob: in KServe mode a `*.sha256` blob, beside
    the file whose stamp name it has or named alone by its exact path, is
    staged byte for byte; the stamp check runs after the patterns, on every
    listing (staging/listed.py), never in the source's own listing."""
    put(az, container, "sums/model.bin", b"weights")
    put(az, container, "sums/model.bin.sha256", b"abc  model.bin\n")
    put(az, container, "one/model.onnx.sha256", b"def  model.onnx\n")
    first, second = pod.tmp / "mnt" / "models", pod.tmp / "mnt" / "one"

    run = pod.run(
        Azurite.source(container, "sums"),
        str(first),
        Azurite.source(container, "one/model.onnx.sha256"),
        str(second),
        env=key_env(az),
    )

    assert run.returncode == 0, str(run)
    assert (first / "model.bin").read_bytes() == b"weights"
    assert (first / "model.bin.sha256").read_bytes() == b"abc  model.bin\n"
    assert (second / "model.onnx.sha256").read_bytes() == b"def  model.onnx\n"


# -- Content-MD5 (#33 item 2: "ETag and Content-MD5 used as for S3") ------------------------


def _md5_b64(data: bytes) -> str:
    import hashlib

    return base64.b64encode(hashlib.md5(data).digest()).decode()


def _stored_md5(az: Azurite, container: str, name: str) -> str | None:
    props = az.service().get_blob_client(container, name).get_blob_properties()
    md5 = props.content_settings.content_md5
    return base64.b64encode(bytes(md5)).decode() if md5 else None


def _drop_md5(az: Azurite, container: str, name: str) -> None:
    """The blob as one uploaded in blocks is: no Content-MD5 at all."""
    from azure.storage.blob import ContentSettings

    blob = az.service().get_blob_client(container, name)
    blob.set_http_headers(ContentSettings(content_type="application/octet-stream"))


def _env_of(pod, az: Azurite, container: str, form: str, name: str, **extra: str) -> dict:
    if form == "blob":
        return pod.single_env(Azurite.source(container, name), name, **key_env(az), **extra)
    return pod.env | {
        "MODEL_SOURCE": Azurite.source(container, "models/"),
        "CACHE_DIR": str(pod.cache_dir),
        **key_env(az),
        **extra,
    }


@pytest.mark.parametrize("form", ["blob", "prefix"])
def test_a_byte_flipped_in_flight_misses_the_content_md5_and_is_never_published(
    pod, az, container, form
) -> None:
    """Azure declares the MD5 of a blob put whole (the HEAD's Content-MD5,
    the listing's Content-MD5 property); the front flips one byte of every
    body it relays: same length, same framing, other bytes."""
    data = payload(256 * KIB, 21)
    put(az, container, "models/model.gguf", data)
    assert _stored_md5(az, container, "models/model.gguf") == _md5_b64(data)
    az.set_fault(f"/{ACCOUNT}/{container}/models/model.gguf", S3Fault(corrupt=True))
    name = "models/model.gguf" if form == "blob" else "model.gguf"
    env = _env_of(pod, az, container, form, name, LLMKUBE_RETRIES="0")

    run = pod.run(env=env)

    run.failed("ModelTransferChecksumMismatch")
    assert "md5" in run.compact_term()["message"]
    dest = pod.dest(name) if form == "blob" else pod.cache_dir / "model.gguf"
    assert not dest.exists()
    assert [r.status for r in blob_gets(az, container)] == [200]


def test_a_byte_flipped_in_each_parallel_range_is_caught_before_publishing(
    pod, az, container
) -> None:
    """48 MiB on two connections, the first stream slow: the engine widens
    to ranged GETs, each with one byte flipped; no body was the whole blob,
    so the partial is read back against the Content-MD5 before anything is
    published."""
    data = payload(48 * MIB, 22)
    put(az, container, "big.gguf", data)
    assert _stored_md5(az, container, "big.gguf") == _md5_b64(data)
    # The first stream slow, so that the engine widens to ranged GETs.
    path = f"/{ACCOUNT}/{container}/big.gguf"
    az.set_fault(path, S3Fault(times=1, rate_bytes_per_s=8 * MIB, corrupt=True, methods=("GET",)))
    az.set_fault("*", S3Fault(corrupt=True, methods=("GET",)))
    env = pod.single_env(
        Azurite.source(container, "big.gguf"),
        "big.gguf",
        LLMKUBE_CONNECTIONS="2",
        LLMKUBE_RETRIES="0",
        **key_env(az),
    )

    run = pod.run(env=env)

    run.failed("ModelTransferChecksumMismatch")
    assert not pod.dest("big.gguf").exists()
    ranges = [r.headers.get("range", "") for r in blob_gets(az, container)]
    assert len(ranges) >= 2 and any(r.startswith("bytes=") for r in ranges), ranges


def test_the_content_md5_of_a_ranged_transfer_follows_the_ranges_and_is_not_read_back(
    pod, az, container, tmp_path
) -> None:
    """48 MiB, the first stream slow: the engine widens to ranged GETs, and
    the md5 follows the contiguous prefix the workers wrote (transfer/
    declared.py DigestFollower), so the partial is never opened again to be
    read back after the last range (#33 item 5: that pass was on the
    critical path of every ranged blob); the file is still checked (a byte
    flipped in each range, above, is refused)."""
    data = payload(48 * MIB, 25)
    put(az, container, "big.gguf", data)
    path = f"/{ACCOUNT}/{container}/big.gguf"
    az.set_fault(path, S3Fault(times=1, rate_bytes_per_s=8 * MIB, methods=("GET",)))
    trace = tmp_path / "opens.log"
    env = pod.single_env(
        Azurite.source(container, "big.gguf"), "big.gguf", LLMKUBE_CONNECTIONS="2", **key_env(az)
    )

    run = pod.run(env=env, wrapper=openat_tracer(trace))

    run.ok(files=1, fetched=1)
    assert pod.dest("big.gguf").read_bytes() == data
    ranges = [r.headers.get("range", "") for r in blob_gets(az, container)]
    assert any(r.startswith("bytes=") for r in ranges), ranges
    read_back = read_back_opens(trace)
    assert read_back == [], read_back


def test_a_resumed_stream_that_widens_is_checked_whole_not_vouched_for_by_the_cut_body(
    pod, az, container
) -> None:
    """The whole-blob GET is cut after 4 MiB (its md5 ran over them); the
    resume from there is slow, so the engine widens, and it has a byte
    flipped: the follower of the ranges must not carry on from the cut
    body's digest (it hashed other bodies' bytes), so the flipped byte is
    caught and the run either fails or fetches the blob again: the file
    published is never other than the blob (#33 item 5)."""
    data = payload(64 * MIB, 27)
    put(az, container, "big.gguf", data)
    path = f"/{ACCOUNT}/{container}/big.gguf"
    gets: list[S3Request] = []

    def faults_in_turn(request: S3Request) -> None:
        if request.method != "GET" or request.path != path:
            return
        gets.append(request)
        if len(gets) == 1:
            az.set_fault(path, S3Fault(times=1, truncate_after=4 * MIB, methods=("GET",)))
        elif len(gets) == 2:
            slow = S3Fault(times=1, rate_bytes_per_s=8 * MIB, corrupt=True, methods=("GET",))
            az.set_fault(path, slow)

    az.front.on_request(faults_in_turn)
    env = pod.single_env(
        Azurite.source(container, "big.gguf"),
        "big.gguf",
        LLMKUBE_CONNECTIONS="2",
        LLMKUBE_MAX_RETRY_WAIT="0.2",
        **key_env(az),
    )

    run = pod.run(env=env)

    assert len(gets) >= 3, [g.headers.get("range") for g in gets]
    assert (gets[1].headers.get("range") or "").startswith("bytes="), "the cut body was not resumed"
    if run.returncode == 0:
        assert pod.dest("big.gguf").read_bytes() == data
    else:
        run.failed("ModelTransferChecksumMismatch")
        assert not pod.dest("big.gguf").exists()


@pytest.mark.parametrize("form", ["blob", "prefix"])
def test_a_blob_without_content_md5_still_stages(pod, az, container, form) -> None:
    data = payload(192 * KIB, 23)
    put(az, container, "models/model.gguf", data)
    _drop_md5(az, container, "models/model.gguf")
    assert _stored_md5(az, container, "models/model.gguf") is None
    name = "models/model.gguf" if form == "blob" else "model.gguf"

    pod.run(env=_env_of(pod, az, container, form, name)).ok(files=1, fetched=1)

    dest = pod.dest(name) if form == "blob" else pod.cache_dir / "model.gguf"
    assert dest.read_bytes() == data


def test_the_content_md5_of_a_whole_body_is_hashed_while_it_streams(
    pod, az, container, tmp_path
) -> None:
    """One GET of the whole blob: its md5 is taken as the bytes arrive, so
    the partial is never opened again to be read back (strace's record of
    the agent's opens); the file is still checked (a flipped byte above)."""
    data = payload(16 * MIB, 24)
    put(az, container, "big.gguf", data)
    trace = tmp_path / "opens.log"
    env = pod.single_env(
        Azurite.source(container, "big.gguf"), "big.gguf", LLMKUBE_CONNECTIONS="1", **key_env(az)
    )

    run = pod.run(env=env, wrapper=openat_tracer(trace))

    run.ok(files=1, fetched=1)
    assert pod.dest("big.gguf").read_bytes() == data
    assert [r.headers.get("range") for r in blob_gets(az, container)] == [None]
    read_back = read_back_opens(trace)
    assert read_back == [], read_back
