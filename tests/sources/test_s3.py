"""s3:// sources against SeaweedFS on loopback: SigV4 (presigned URLs
included), Range, If-Match and the error codes are a real S3 server's, not
ours (spec §3.3, CONTRACT §3, §5). The front's request log shows what went
over the wire.
"""

from __future__ import annotations

import pytest

from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.model import Decision
from tests.harness.canary import canary, leaks
from tests.harness.disk import debris, record_of, seed, shell_partial, tree
from tests.harness.origin import closed_port_url
from tests.harness.pod import import_lines
from tests.harness.s3fetcher import fetcher_for
from tests.harness.sample import KIB, payload
from tests.harness.seaweed import READER, S3Request, s3_env
from tests.harness.sts import ROLE_ARN

pytestmark = pytest.mark.floors

# -- happy paths ------------------------------------------------------------------------------


def test_single_file_cli_with_temporary_credentials(pod, s3, bucket, oidc_issuer) -> None:
    """Temporary credentials (key, secret, session token) that SeaweedFS's
    STS issued: the server checks all three on the HEAD and the presigned GET."""
    data = payload(192 * KIB)
    etag = s3.put(bucket, "models/llama.gguf", data)
    creds = s3.assume_role(oidc_issuer.mint(), ROLE_ARN)
    env = pod.single_env(
        f"s3://{bucket}/models/llama.gguf",
        **s3_env(
            s3,
            AWS_ACCESS_KEY_ID=creds.access_key_id,
            AWS_SECRET_ACCESS_KEY=creds.secret_access_key,
            AWS_SESSION_TOKEN=creds.session_token,
        ),
    )

    run = pod.run(env=env)

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    assert record_of(pod.dest()) == str(len(data))
    assert "Downloading model from S3..." in run.stderr
    head, get = s3.object_requests(bucket)
    # The control path: a SigV4 HEAD carrying the session token.
    assert (head.method, head.path, head.status) == ("HEAD", f"/{bucket}/models/llama.gguf", 200)
    assert f"Credential={creds.access_key_id}/" in head.headers["authorization"]
    assert head.headers["x-amz-security-token"] == creds.session_token
    # The data path: a presigned GET (token in the query) pinned with If-Match.
    query = get.params
    assert (get.method, get.status) == ("GET", 200)
    assert query["X-Amz-Security-Token"] == [creds.session_token]
    assert query["X-Amz-Credential"][0].startswith(f"{creds.access_key_id}/")
    assert get.headers["if-match"] == etag
    assert "authorization" not in get.headers
    written = [d.decode("latin-1") for d in tree(pod.cache_dir).values()]
    for secret in (creds.secret_access_key, creds.session_token):
        assert leaks(secret, run.outputs, *written) == [], "a secret leaked"
    assert query["X-Amz-Signature"][0] not in run.outputs


def test_multi_file_prefix_with_spaces_and_unicode(pod, s3, bucket) -> None:
    prefix = "org models/llama v1"
    files = {
        "model 00001.safetensors": payload(96 * KIB, 1),
        "tokenizer/токенизатор.json": '{"ключ": "значение"}'.encode(),
        "config.json": b'{"a": 1}',
    }
    for rel, data in files.items():
        s3.put(bucket, f"{prefix}/{rel}", data)
    s3.put(bucket, f"{prefix}/not-listed.bin", b"x")

    # The source is a path, taken literally like the AWS CLI does (#11 item 11).
    run = pod.stage(pod.multi_env(f"s3://{bucket}/{prefix}", files, **s3_env(s3))).ok()

    assert run.count(Decision.FETCH) == 3
    for rel, data in files.items():
        assert pod.dest(rel).read_bytes() == data, rel
        assert record_of(pod.dest(rel)) == str(len(data))
    assert not pod.dest("not-listed.bin").exists()
    gets = {r.path for r in s3.object_requests(bucket, "GET")}
    assert gets == {f"/{bucket}/{prefix}/{rel}" for rel in files}


def test_single_file_key_with_spaces_and_unicode(pod, s3, bucket) -> None:
    key = "dir with space/modèle ü.gguf"
    data = payload(40 * KIB)
    s3.put(bucket, key, data)

    pod.stage(pod.single_env(f"s3://{bucket}/{key}", **s3_env(s3))).ok()

    assert pod.dest().read_bytes() == data


@pytest.mark.parametrize("key", ["a+b/c#d?e.gguf", "100%/x=y&z.gguf"])
def test_operator_set_s3_key_with_url_special_characters(pod, s3, bucket, key) -> None:
    data = payload(8 * KIB)
    s3.put(bucket, key, data)

    # The operator sets S3_BUCKET/S3_KEY from parseS3Source, raw (spec §2.1).
    pod.stage(
        pod.single_env(f"s3://{bucket}/ignored", S3_BUCKET=bucket, S3_KEY=key, **s3_env(s3))
    ).ok()

    assert pod.dest().read_bytes() == data
    assert [r.path for r in s3.object_requests(bucket, "GET")] == [f"/{bucket}/{key}"]


def test_s3_bucket_and_key_variables_win(pod, s3, bucket) -> None:
    data = payload(8 * KIB)
    s3.put(bucket, "real/key.gguf", data)

    env = pod.single_env(
        "s3://other-bucket/other.gguf", S3_BUCKET=bucket, S3_KEY="real/key.gguf", **s3_env(s3)
    )
    pod.stage(env).ok()

    assert pod.dest().read_bytes() == data


# -- resume and changed objects -------------------------------------------------------------------


def test_resume_of_a_seeded_partial(pod, s3, bucket) -> None:
    data = payload(256 * KIB)
    etag = s3.put(bucket, "m.gguf", data)
    partial = seed(shell_partial(pod.dest(), len(data), etag), data[: 100 * KIB], age_s=3600)

    run = pod.stage(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3))).ok()

    assert pod.dest().read_bytes() == data
    (get,) = s3.object_requests(bucket, "GET")
    assert get.headers["range"] == f"bytes={100 * KIB}-"
    assert get.headers["if-match"] == etag
    assert get.status == 206
    assert not partial.exists() and debris(pod.cache_dir, markers=True) == []
    assert run.has_line(f"Resuming model.gguf from byte {100 * KIB}")
    assert run.outcome is not None and run.outcome.bytes_fetched == len(data) - 100 * KIB


def test_complete_partial_is_published_without_a_body(pod, s3, bucket) -> None:
    data = payload(64 * KIB)
    etag = s3.put(bucket, "m.gguf", data)
    seed(shell_partial(pod.dest(), len(data), etag), data, age_s=3600)

    run = pod.stage(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3))).ok()

    assert pod.dest().read_bytes() == data
    (get,) = s3.object_requests(bucket, "GET")
    assert get.status == 416
    assert run.outcome is not None and run.outcome.bytes_fetched == 0


def test_object_changed_since_the_partial_restarts_cleanly(pod, s3, bucket) -> None:
    old = payload(128 * KIB, 1)
    old_etag = s3.put(bucket, "m.gguf", old)
    partial = seed(shell_partial(pod.dest(), len(old), old_etag), old[: 64 * KIB], age_s=3600)
    new = payload(128 * KIB, 2)  # same size, new content: only the ETag tells
    assert s3.put(bucket, "m.gguf", new) != old_etag

    pod.stage(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3))).ok()

    assert pod.dest().read_bytes() == new  # never old bytes spliced with new ones
    (get,) = s3.object_requests(bucket, "GET")
    assert "range" not in get.headers and get.status == 200
    assert not partial.exists() and debris(pod.cache_dir, markers=True) == []


@pytest.mark.parametrize("offset", [0, 1000], ids=["from-zero", "resume"])
def test_get_is_pinned_with_if_match(pod, s3, bucket, offset) -> None:
    s3.put(bucket, "m.gguf", payload(16 * KIB, 1))
    fetcher, file = fetcher_for(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3)))
    try:
        meta = fetcher.probe(file)
        s3.put(bucket, "m.gguf", payload(16 * KIB, 2))  # changed after the probe

        with pytest.raises(SourceError) as info:
            fetcher.open(file, meta, offset)
    finally:
        fetcher.close()

    assert info.value.reason is Reason.SOURCE_CHANGED
    assert s3.object_requests(bucket, "GET")[-1].status == 412


def test_object_changed_between_probe_and_get_fails_without_publishing(pod, s3, bucket) -> None:
    old, new = payload(64 * KIB, 1), payload(64 * KIB, 2)
    s3.put(bucket, "m.gguf", old)
    changed: list[bool] = []

    def overwrite_before_first_get(request: S3Request) -> None:
        if request.method == "GET" and request.path == f"/{bucket}/m.gguf" and not changed:
            changed.append(True)
            s3.put(bucket, "m.gguf", new)

    s3.front.on_request(overwrite_before_first_get)
    run = pod.stage(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3))).failed(
        "ModelSourceChanged"
    )
    s3.front.on_request(None)

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

    run = pod.stage(pod.single_env(f"s3://{target}", **s3_env(s3))).failed("ModelSourceNotFound")

    assert run.sleeps == []
    assert [r.method for r in s3.requests()] == ["HEAD"]
    assert not run.error.retryable


def test_invalid_bucket_name_is_a_configuration_error(pod, s3) -> None:
    run = pod.stage(pod.single_env("s3://Not_A_Bucket!/m.gguf", **s3_env(s3))).failed(
        "InvalidConfiguration"
    )

    assert run.sleeps == []
    assert s3.requests() == []
    assert not run.error.retryable


def test_bad_secret_key_is_unauthorized_cli(pod, s3, bucket) -> None:
    s3.put(bucket, "m.gguf", payload(4 * KIB))
    wrong = canary("wrongsecret", 32)
    env = pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3, AWS_SECRET_ACCESS_KEY=wrong))

    run = pod.run(env=env)

    run.failed("ModelSourceUnauthorized", retryable=False)
    assert [(r.method, r.status) for r in s3.requests()] == [("HEAD", 403)]
    assert leaks(wrong, run.outputs) == []
    assert not pod.dest().exists()


def test_unknown_access_key_is_unauthorized(pod, s3, bucket) -> None:
    s3.put(bucket, "m.gguf", payload(4 * KIB))
    env = pod.single_env(
        f"s3://{bucket}/m.gguf", **s3_env(s3, AWS_ACCESS_KEY_ID="AKIANOSUCHKEY0000001")
    )

    run = pod.stage(env).failed("ModelSourceUnauthorized")

    assert run.sleeps == []
    assert [(r.method, r.status) for r in s3.requests()] == [("HEAD", 403)]


def test_a_tampered_presigned_url_is_refused_by_the_server(pod, s3, bucket) -> None:
    """Control: SeaweedFS checks presigned signatures (moto could not), so the
    GET tests above prove our presigning, not a server that accepts anything."""
    import http.client
    from urllib.parse import urlsplit

    s3.put(bucket, "m.gguf", payload(4 * KIB))
    fetcher, _ = fetcher_for(pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3)))
    try:
        url = fetcher._clients.presign("m.gguf", "test", 60)
    finally:
        fetcher.close()
    parts = urlsplit(url)
    statuses = []
    for query in (parts.query, parts.query.replace("X-Amz-Signature=", "X-Amz-Signature=0")):
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        conn.request("GET", f"{parts.path}?{query}")
        statuses.append(conn.getresponse().status)
        conn.close()
    assert statuses == [200, 403]
    assert READER[0] in url  # signed with the reader's key


# -- warm starts -----------------------------------------------------------------------------------


def test_s2_warm_start_with_the_s3_endpoint_unreachable_makes_no_request(pod, s3, bucket) -> None:
    files = {"a.safetensors": payload(32 * KIB, 1), "sub/b.json": b"{}"}
    for rel, data in files.items():
        s3.put(bucket, f"p/{rel}", data)
    pod.stage(pod.multi_env(f"s3://{bucket}/p", files, **s3_env(s3))).ok()
    s3.clear()

    run = pod.stage(
        pod.multi_env(f"s3://{bucket}/p", files, **s3_env(s3, AWS_ENDPOINT_URL=closed_port_url()))
    ).ok()

    assert run.count(Decision.REUSE) == 2
    assert s3.requests() == []
    assert {rel: pod.dest(rel).read_bytes() for rel in files} == files


def test_s7_s3_on_change_with_the_endpoint_unreachable_keeps_the_cache(pod, s3, bucket) -> None:
    files = {"a.safetensors": payload(32 * KIB, 3), "config.json": b"{}"}
    for rel, data in files.items():
        s3.put(bucket, f"p/{rel}", data)
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
    s3.put(bucket, "p/a.safetensors", data)
    pod.stage(pod.multi_env(f"s3://{bucket}/p", {"a.safetensors": data}, **s3_env(s3))).ok()
    s3.clear()

    run = pod.stage(
        pod.multi_env(
            f"s3://{bucket}/p",
            {"a.safetensors": data},
            **s3_env(s3, LLMKUBE_REFRESH_POLICY="OnChange"),
        )
    ).ok()

    assert run.has_line("Model artifact a.safetensors revalidated (unchanged, skipped download)")
    assert [r.method for r in s3.requests()] == ["HEAD"]


# -- proxies ---------------------------------------------------------------------------------------


def test_boto3_and_the_data_path_both_go_through_the_proxy(pod, s3, bucket) -> None:
    """HEAD (boto3, told by us) and the presigned GET (our data path) take
    the same route; HTTP_PROXY here because the endpoint is http."""
    from tests.harness.proxy import ForwardProxy

    data = payload(128 * KIB)
    s3.put(bucket, "m/model.gguf", data)
    with ForwardProxy() as proxy:
        env = pod.single_env(f"s3://{bucket}/m/model.gguf", **s3_env(s3, HTTP_PROXY=proxy.url))
        run = pod.stage(env)
        asked = [(r.method, r.target.split("?")[0]) for r in proxy.requests()]

    assert run.error is None, run.stderr
    assert pod.dest().read_bytes() == data
    url = f"{s3.endpoint_url}/{bucket}/m/model.gguf"
    assert asked == [("HEAD", url), ("GET", url)]
    assert [r.method for r in s3.object_requests(bucket)] == ["HEAD", "GET"]


def test_a_dead_proxy_with_credentials_fails_without_showing_them(pod, s3, bucket) -> None:
    """botocore names the proxy URL in its ProxyConnectionError; the agent
    translates by type, so the password never reaches the error (this runner's
    redactor does not know it: a leak would show)."""
    s3.put(bucket, "m/model.gguf", payload(16 * KIB))
    password = canary("proxypw", 24)
    dead = closed_port_url().replace("http://", f"http://agent:{password}@")
    env = pod.single_env(f"s3://{bucket}/m/model.gguf", **s3_env(s3, HTTP_PROXY=dead))

    run = pod.stage(env)

    assert run.reason == "ModelSourceUnreachable", run.stderr
    assert password not in run.stderr and password not in str(run.error)
    assert password not in run.detail
    assert not pod.dest().exists()


def test_an_s3_run_never_loads_pyopenssl(pod, s3, bucket) -> None:
    """model-signing (#34) brings pyOpenSSL into the install; botocore's
    httpsession then imports urllib3.contrib.pyopenssl (and with it
    OpenSSL and cryptography, ~11 MiB RSS) only to take the standard
    library's SSLContext back out of it. The S3 path must not load them:
    the KServe bench's S3 start went from 50 to 62 MiB, its run over the
    64 MiB budget."""
    s3.put(bucket, "m/model.gguf", payload(8 * KIB, 5))
    run = pod.run(
        env=pod.single_env(f"s3://{bucket}/m/model.gguf", **s3_env(s3)),
        python_flags=("-X", "importtime"),
    )
    assert run.returncode == 0, str(run)
    loaded = import_lines(run.stderr)
    assert "botocore.httpsession" in loaded  # the importtime output was captured
    # (-X importtime also lists the refused import, at a few microseconds.)
    assert not {m for m in loaded if m.split(".")[0] in ("OpenSSL", "cryptography")}
