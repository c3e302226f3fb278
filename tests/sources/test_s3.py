"""s3:// sources against moto's real S3 server on loopback: SigV4, Range,
If-Match and the error codes are moto's, not ours (spec §3.3, CONTRACT §3,
§5). The server's request log shows what went over the wire.
"""

from __future__ import annotations

from urllib.parse import parse_qs, quote

import pytest

from llmkube_stager.config import load_config
from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.model import Decision
from llmkube_stager.sources.s3 import S3Fetcher, S3Source
from tests.harness.canary import canary, leaks
from tests.harness.disk import debris, record_of, seed, shell_partial, tree
from tests.harness.origin import closed_port_url
from tests.harness.s3server import DUMMY_KEY_ID, DUMMY_SECRET, S3Request
from tests.harness.sample import payload

KIB = 1024
KEY_ID = "AKIA" + canary("", 16).upper()
SECRET = canary("s3secret", 32)
SESSION_TOKEN = canary("s3session", 64)


def s3_env(s3, **extra: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": s3.endpoint_url,
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": DUMMY_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET,
        **extra,
    }


def put(s3, bucket: str, key: str, data: bytes) -> str:
    s3.client().put_object(Bucket=bucket, Key=key, Body=data)
    etag: str = s3.client().head_object(Bucket=bucket, Key=key)["ETag"]
    return etag


def object_requests(s3, bucket: str, method: str | None = None) -> list[S3Request]:
    return [r for r in s3.requests(method) if r.path.startswith(f"/{bucket}/")]


# -- happy paths ------------------------------------------------------------------------------


def test_single_file_cli_with_session_token(pod, s3, bucket) -> None:
    data = payload(192 * KIB)
    etag = put(s3, bucket, "models/llama.gguf", data)
    s3.clear_log()
    env = pod.single_env(
        f"s3://{bucket}/models/llama.gguf",
        **s3_env(
            s3,
            AWS_ACCESS_KEY_ID=KEY_ID,
            AWS_SECRET_ACCESS_KEY=SECRET,
            AWS_SESSION_TOKEN=SESSION_TOKEN,
        ),
    )

    run = pod.run(env=env)

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    assert record_of(pod.dest()) == str(len(data))
    assert "Downloading model from S3..." in run.stderr
    head, get = object_requests(s3, bucket)
    # The control path: a SigV4 HEAD carrying the session token.
    assert (head.method, head.path, head.status) == ("HEAD", f"/{bucket}/models/llama.gguf", 200)
    assert f"Credential={KEY_ID}/" in head.headers["authorization"]
    assert head.headers["x-amz-security-token"] == SESSION_TOKEN
    # The data path: a presigned GET (token in the query) pinned with If-Match.
    query = parse_qs(get.query)
    assert (get.method, get.status) == ("GET", 200)
    assert query["X-Amz-Security-Token"] == [SESSION_TOKEN]
    assert query["X-Amz-Credential"][0].startswith(f"{KEY_ID}/")
    assert get.headers["if-match"] == etag
    assert "authorization" not in get.headers
    written = [d.decode("latin-1") for d in tree(pod.cache_dir).values()]
    for secret in (SECRET, SESSION_TOKEN, KEY_ID):
        assert leaks(secret, run.outputs, *written) == [], secret
    assert query["X-Amz-Signature"][0] not in run.outputs


def test_multi_file_prefix_with_spaces_and_unicode(pod, s3, bucket) -> None:
    prefix = "org models/llama v1"
    files = {
        "model 00001.safetensors": payload(96 * KIB, 1),
        "tokenizer/токенизатор.json": '{"ключ": "значение"}'.encode(),
        "config.json": b'{"a": 1}',
    }
    for rel, data in files.items():
        put(s3, bucket, f"{prefix}/{rel}", data)
    put(s3, bucket, f"{prefix}/not-listed.bin", b"x")
    s3.clear_log()
    source = f"s3://{bucket}/{quote(prefix)}"

    run = pod.stage(pod.multi_env(source, files, **s3_env(s3))).ok()

    assert run.count(Decision.FETCH) == 3
    for rel, data in files.items():
        assert pod.dest(rel).read_bytes() == data, rel
        assert record_of(pod.dest(rel)) == str(len(data))
    assert not pod.dest("not-listed.bin").exists()
    gets = {r.path for r in object_requests(s3, bucket, "GET")}
    assert gets == {f"/{bucket}/{prefix}/{rel}" for rel in files}


def test_single_file_key_with_spaces_and_unicode(pod, s3, bucket) -> None:
    key = "dir with space/modèle ü.gguf"
    data = payload(40 * KIB)
    put(s3, bucket, key, data)

    pod.stage(pod.single_env(f"s3://{bucket}/{key}", **s3_env(s3))).ok()

    assert pod.dest().read_bytes() == data


@pytest.mark.parametrize("key", ["a+b/c#d?e.gguf", "100%/x=y&z.gguf"])
def test_operator_set_s3_key_with_url_special_characters(pod, s3, bucket, key) -> None:
    data = payload(8 * KIB)
    put(s3, bucket, key, data)

    # The operator sets S3_BUCKET/S3_KEY from parseS3Source, raw (spec §2.1).
    pod.stage(
        pod.single_env(f"s3://{bucket}/ignored", S3_BUCKET=bucket, S3_KEY=key, **s3_env(s3))
    ).ok()

    assert pod.dest().read_bytes() == data


def test_s3_bucket_and_key_variables_win(pod, s3, bucket) -> None:
    data = payload(8 * KIB)
    put(s3, bucket, "real/key.gguf", data)

    env = pod.single_env(
        "s3://other-bucket/other.gguf", S3_BUCKET=bucket, S3_KEY="real/key.gguf", **s3_env(s3)
    )
    pod.stage(env).ok()

    assert pod.dest().read_bytes() == data


# -- resume and changed objects -------------------------------------------------------------------


def test_resume_of_a_seeded_partial(pod, s3, bucket) -> None:
    data = payload(256 * KIB)
    etag = put(s3, bucket, "m.gguf", data)
    partial = seed(shell_partial(pod.dest(), len(data), etag), data[: 100 * KIB], age_s=3600)
    s3.clear_log()

    run = pod.stage(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3))).ok()

    assert pod.dest().read_bytes() == data
    (get,) = object_requests(s3, bucket, "GET")
    assert get.headers["range"] == f"bytes={100 * KIB}-"
    assert get.headers["if-match"] == etag
    assert get.status == 206
    assert not partial.exists() and debris(pod.cache_dir, markers=True) == []
    assert run.has_line(f"Resuming model.gguf from byte {100 * KIB}")
    assert run.outcome is not None and run.outcome.bytes_fetched == len(data) - 100 * KIB


def test_complete_partial_is_published_without_a_body(pod, s3, bucket) -> None:
    data = payload(64 * KIB)
    etag = put(s3, bucket, "m.gguf", data)
    seed(shell_partial(pod.dest(), len(data), etag), data, age_s=3600)
    s3.clear_log()

    run = pod.stage(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3))).ok()

    assert pod.dest().read_bytes() == data
    (get,) = object_requests(s3, bucket, "GET")
    assert get.status == 416
    assert run.outcome is not None and run.outcome.bytes_fetched == 0


def test_object_changed_since_the_partial_restarts_cleanly(pod, s3, bucket) -> None:
    old = payload(128 * KIB, 1)
    old_etag = put(s3, bucket, "m.gguf", old)
    partial = seed(shell_partial(pod.dest(), len(old), old_etag), old[: 64 * KIB], age_s=3600)
    new = payload(128 * KIB, 2)  # same size, new content: only the ETag tells
    assert put(s3, bucket, "m.gguf", new) != old_etag
    s3.clear_log()

    pod.stage(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3))).ok()

    assert pod.dest().read_bytes() == new  # never old bytes spliced with new ones
    (get,) = object_requests(s3, bucket, "GET")
    assert "range" not in get.headers and get.status == 200
    assert not partial.exists() and debris(pod.cache_dir, markers=True) == []


def _fetcher_for(pod, s3, bucket: str):
    config = load_config(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3)), {})
    source = S3Source(config)
    return S3Fetcher(config, source.ref), source.manifest().files[0]


@pytest.mark.parametrize("offset", [0, 1000], ids=["from-zero", "resume"])
def test_get_is_pinned_with_if_match(pod, s3, bucket, offset) -> None:
    put(s3, bucket, "m.gguf", payload(16 * KIB, 1))
    fetcher, file = _fetcher_for(pod, s3, bucket)
    try:
        meta = fetcher.probe(file)
        put(s3, bucket, "m.gguf", payload(16 * KIB, 2))  # changed after the probe

        with pytest.raises(SourceError) as info:
            fetcher.open(file, meta, offset)
    finally:
        fetcher.close()

    assert info.value.reason is Reason.SOURCE_CHANGED
    assert object_requests(s3, bucket, "GET")[-1].status == 412


def test_object_changed_between_probe_and_get_fails_without_publishing(pod, s3, bucket) -> None:
    old, new = payload(64 * KIB, 1), payload(64 * KIB, 2)
    put(s3, bucket, "m.gguf", old)
    changed: list[bool] = []

    def overwrite_before_first_get(request: S3Request) -> None:
        if request.method == "GET" and request.path == f"/{bucket}/m.gguf" and not changed:
            changed.append(True)
            put(s3, bucket, "m.gguf", new)

    s3.on_request(overwrite_before_first_get)
    try:
        run = pod.stage(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3))).failed(
            "ModelSourceChanged"
        )
    finally:
        s3.on_request(None)

    assert changed
    assert run.error is not None and run.error.retryable
    assert not pod.dest().exists()
    # The next start (pod restart) stages the new object whole.
    pod.stage(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3))).ok()
    assert pod.dest().read_bytes() == new


# -- refusals --------------------------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["key", "bucket"])
def test_missing_key_or_bucket_is_not_found(pod, s3, bucket, missing) -> None:
    target = f"{bucket}/no-such.gguf" if missing == "key" else "no-such-bucket-x1/m.gguf"
    s3.clear_log()

    run = pod.stage(pod.single_env(f"s3://{target}", **s3_env(s3))).failed("ModelSourceNotFound")

    assert run.sleeps == []
    assert [r.method for r in s3.requests()] == ["HEAD"]
    assert not run.error.retryable


def test_invalid_bucket_name_is_a_configuration_error(pod, s3) -> None:
    s3.clear_log()

    env = pod.single_env("s3://Not_A_Bucket!/m.gguf", **s3_env(s3))

    run = pod.stage(env).failed("InvalidConfiguration", exit_code=2)

    assert run.sleeps == []
    assert not run.error.retryable


def test_bad_secret_key_is_unauthorized_cli(pod, s3, bucket) -> None:
    put(s3, bucket, "m.gguf", payload(4 * KIB))
    key_id, _secret = s3.create_user(f"stager-{bucket}")
    wrong = canary("wrongsecret", 32)
    env = pod.single_env(
        f"s3://{bucket}/m.gguf",
        **s3_env(s3, AWS_ACCESS_KEY_ID=key_id, AWS_SECRET_ACCESS_KEY=wrong),
    )

    with s3.enable_auth():
        run = pod.run(env=env)

    run.failed("ModelSourceUnauthorized", retryable=False)
    assert leaks(wrong, run.outputs) == []
    assert not pod.dest().exists()


def test_unknown_access_key_is_unauthorized(pod, s3, bucket) -> None:
    put(s3, bucket, "m.gguf", payload(4 * KIB))
    s3.create_user(f"stager-{bucket}")

    with s3.enable_auth():
        run = pod.stage(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3))).failed(
            "ModelSourceUnauthorized"
        )

    assert run.sleeps == []


def test_right_credentials_pass_moto_signature_checks(pod, s3, bucket) -> None:
    """Control for the two tests above: moto's IAM mode accepts our SigV4 HEAD
    (moto cannot check presigned GETs in that mode, so only the probe runs)."""
    put(s3, bucket, "m.gguf", payload(4 * KIB))
    key_id, secret = s3.create_user(f"stager-ok-{bucket}")
    config = load_config(
        pod.single_env(
            f"s3://{bucket}/m.gguf",
            **s3_env(s3, AWS_ACCESS_KEY_ID=key_id, AWS_SECRET_ACCESS_KEY=secret),
        ),
        {},
    )
    fetcher = S3Fetcher(config, S3Source(config).ref)
    try:
        with s3.enable_auth():
            meta = fetcher.probe(S3Source(config).manifest().files[0])
    finally:
        fetcher.close()
    assert meta.size_bytes == 4 * KIB and meta.if_match == meta.etag


# -- warm starts -----------------------------------------------------------------------------------


def test_s2_warm_start_with_the_s3_endpoint_unreachable_makes_no_request(pod, s3, bucket) -> None:
    files = {"a.safetensors": payload(32 * KIB, 1), "sub/b.json": b"{}"}
    for rel, data in files.items():
        put(s3, bucket, f"p/{rel}", data)
    pod.stage(pod.multi_env(f"s3://{bucket}/p", files, **s3_env(s3))).ok()
    s3.clear_log()

    run = pod.stage(
        pod.multi_env(f"s3://{bucket}/p", files, **s3_env(s3, AWS_ENDPOINT_URL=closed_port_url()))
    ).ok()

    assert run.count(Decision.REUSE) == 2
    assert s3.requests() == []
    assert {rel: pod.dest(rel).read_bytes() for rel in files} == files


def test_s7_s3_on_change_with_the_endpoint_unreachable_keeps_the_cache(pod, s3, bucket) -> None:
    files = {"a.safetensors": payload(32 * KIB, 3), "config.json": b"{}"}
    for rel, data in files.items():
        put(s3, bucket, f"p/{rel}", data)
    pod.stage(pod.multi_env(f"s3://{bucket}/p", files, **s3_env(s3))).ok()

    run = pod.stage(
        pod.multi_env(
            f"s3://{bucket}/p",
            files,
            **s3_env(s3, AWS_ENDPOINT_URL=closed_port_url(), LLMKUBE_REFRESH_POLICY="OnChange"),
        )
    ).ok()

    assert run.count(Decision.KEEP) == 2
    assert run.has_line("Revalidation unreachable for a.safetensors; kept cached copy")
    assert {rel: pod.dest(rel).read_bytes() for rel in files} == files


def test_s7_s3_on_change_unchanged_object_is_skipped_with_a_head_only(pod, s3, bucket) -> None:
    data = payload(32 * KIB, 4)
    put(s3, bucket, "p/a.safetensors", data)
    pod.stage(pod.multi_env(f"s3://{bucket}/p", {"a.safetensors": data}, **s3_env(s3))).ok()
    s3.clear_log()

    run = pod.stage(
        pod.multi_env(
            f"s3://{bucket}/p",
            {"a.safetensors": data},
            **s3_env(s3, LLMKUBE_REFRESH_POLICY="OnChange"),
        )
    ).ok()

    assert run.has_line("Model artifact a.safetensors revalidated (unchanged, skipped download)")
    assert [r.method for r in s3.requests()] == ["HEAD"]


def test_boto3_and_the_data_path_both_go_through_the_proxy(pod, s3, bucket) -> None:
    """HEAD (boto3, told by us) and the presigned GET (our data path) take
    the same route; HTTP_PROXY here because the moto endpoint is http."""
    from tests.harness.proxy import ForwardProxy

    data = payload(128 * KIB)
    put(s3, bucket, "m/model.gguf", data)
    s3.clear_log()
    with ForwardProxy() as proxy:
        env = pod.single_env(f"s3://{bucket}/m/model.gguf", **s3_env(s3, HTTP_PROXY=proxy.url))
        run = pod.stage(env)
        asked = [(r.method, r.target.split("?")[0]) for r in proxy.requests()]

    assert run.error is None, run.stderr
    assert pod.dest().read_bytes() == data
    url = f"{s3.endpoint_url}/{bucket}/m/model.gguf"
    assert asked == [("HEAD", url), ("GET", url)]
    assert [r.method for r in object_requests(s3, bucket)] == ["HEAD", "GET"]


def test_a_dead_proxy_with_credentials_fails_without_showing_them(pod, s3, bucket) -> None:
    """botocore names the proxy URL in its ProxyConnectionError; the agent
    translates by type, so the password never reaches the error (this runner's
    redactor does not know it: a leak would show)."""
    put(s3, bucket, "m/model.gguf", payload(16 * KIB))
    password = canary("proxypw", 24)
    dead = closed_port_url().replace("http://", f"http://agent:{password}@")
    env = pod.single_env(f"s3://{bucket}/m/model.gguf", **s3_env(s3, HTTP_PROXY=dead))

    run = pod.stage(env)

    assert run.reason == "ModelSourceUnreachable", run.stderr
    assert password not in run.stderr and password not in str(run.error)
    assert password not in run.detail
    assert not pod.dest().exists()
