"""#24 item 3: the environment KServe's credential builder gives the
storage initializer (S3_ENDPOINT without a scheme, S3_USE_HTTPS,
S3_VERIFY_SSL, awsAnonymousCredential, AWS_CA_BUNDLE, the AWS keys,
AWS_DEFAULT_REGION; IRSA's AWS_ROLE_ARN and token file; HF_TOKEN) works as
it is, mapped in config/kserve_env.py onto the agent's settings; an agent variable
that is set wins; no secret is ever shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmkube_stager.config import load_config
from tests.harness.canary import assert_no_leak, canary, outputs_of
from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload
from tests.harness.seaweed import PUBLIC_BUCKET, READER, SeaweedS3, kserve_s3_env
from tests.harness.tlsca import make_ca

pytestmark = pytest.mark.e2e


def test_s3_endpoint_without_a_scheme_and_use_https_0(pod: Pod, s3: SeaweedS3, bucket: str) -> None:
    s3.put(bucket, "iris/model.joblib", b"J" * 2048)
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"s3://{bucket}/iris", str(dest), env=kserve_s3_env(s3, S3_VERIFY_SSL="0"))

    assert run.returncode == 0, str(run)
    assert (dest / "model.joblib").read_bytes() == b"J" * 2048
    (listing,) = [r for r in s3.requests("GET") if "list-type=2" in r.query]
    assert f"Credential={READER[0]}/" in listing.headers["authorization"]
    # TLS is verified whatever S3_VERIFY_SSL says, and the log says so.
    assert run.has_line("S3_VERIFY_SSL")


def test_an_agent_variable_wins_over_kserves(pod: Pod, s3: SeaweedS3, bucket: str) -> None:
    s3.put(bucket, "m/model.bin", b"B" * 100)
    dest = pod.tmp / "mnt" / "models"
    env = kserve_s3_env(s3, S3_ENDPOINT="nowhere.invalid:1", AWS_ENDPOINT_URL=s3.endpoint_url)

    run = pod.run(f"s3://{bucket}/m", str(dest), env=env)

    assert run.returncode == 0, str(run)
    assert (dest / "model.bin").read_bytes() == b"B" * 100


def test_aws_anonymous_credential_sends_unsigned_requests(pod: Pod, s3: SeaweedS3) -> None:
    """Keys in the environment too (a shared Secret): anonymous wins, as in
    KServe (botocore UNSIGNED); the keys here would be refused."""
    s3.create_bucket(PUBLIC_BUCKET)
    s3.put(PUBLIC_BUCKET, "open/model.bin", b"P" * 300)
    dest = pod.tmp / "mnt" / "models"
    env = kserve_s3_env(
        s3,
        awsAnonymousCredential="true",
        AWS_ACCESS_KEY_ID="AKIAWRONGWRONGWRONG1",
        AWS_SECRET_ACCESS_KEY=canary("wrongsecret"),
    )

    run = pod.run(f"s3://{PUBLIC_BUCKET}/open", str(dest), env=env)

    assert run.returncode == 0, str(run)
    assert (dest / "model.bin").read_bytes() == b"P" * 300
    for request in s3.requests():
        assert "authorization" not in request.headers, request
        assert "X-Amz-Signature" not in request.query, request


def test_aws_ca_bundle_is_trusted(pod: Pod, tmp_path: Path) -> None:
    authority = make_ca(tmp_path / "pki")
    data = payload(64 << 10, seed=12)
    with Origin(tls=authority.server_context()) as origin:
        origin.put("/m/model.bin", data)
        url = f"{origin.url}/m/model.bin"
        assert url.startswith("https://")
        dest = pod.tmp / "mnt" / "models"

        untrusted = pod.run(url, str(dest))
        assert untrusted.returncode == 4, str(untrusted)
        assert untrusted.compact_term()["reason"] == "ModelSourceUntrusted"

        # The pod's own LLMKUBE_CA_DIR (an empty directory) would win.
        run = pod.run(url, str(dest), AWS_CA_BUNDLE=str(authority.ca_pem), LLMKUBE_CA_DIR=None)

    assert run.returncode == 0, str(run)
    assert (dest / "model.bin").read_bytes() == data


def test_a_secret_in_kserves_variables_is_never_shown(pod: Pod, s3: SeaweedS3, bucket: str) -> None:
    """A refused signature: the canary secret key appears nowhere."""
    s3.put(bucket, "m/model.bin", b"x" * 10)
    secret = canary("kservesecret")
    dest = pod.tmp / "mnt" / "models"
    env = kserve_s3_env(s3, AWS_SECRET_ACCESS_KEY=secret)

    run = pod.run(f"s3://{bucket}/m", str(dest), env=env)

    assert run.returncode == 4, str(run)
    assert run.compact_term()["reason"] == "ModelSourceUnauthorized"
    assert_no_leak(outputs_of(run, pod.tmp / "mnt"), {"AWS_SECRET_ACCESS_KEY": secret})


@pytest.mark.parametrize(
    ("env", "endpoint"),
    [
        ({"S3_ENDPOINT": "minio.svc:9000"}, "https://minio.svc:9000"),
        ({"S3_ENDPOINT": "minio.svc:9000", "S3_USE_HTTPS": "0"}, "http://minio.svc:9000"),
        ({"S3_ENDPOINT": "http://minio.svc:9000"}, "http://minio.svc:9000"),
        ({"S3_ENDPOINT": "minio.svc", "AWS_ENDPOINT_URL": "https://e"}, "https://e"),
    ],
)
def test_the_endpoint_mapping(env: dict[str, str], endpoint: str) -> None:
    base = {"MODEL_SOURCE": "s3://b/m/", "CACHE_DIR": "/models/k"}
    assert load_config({**base, **env}, {}).aws_endpoint_url == endpoint


def test_virtual_bucket_and_ca_configmap_mapping() -> None:
    base = {"MODEL_SOURCE": "s3://b/m/", "CACHE_DIR": "/models/k"}
    config = load_config(
        {**base, "S3_USER_VIRTUAL_BUCKET": "true", "CA_BUNDLE_CONFIGMAP_NAME": "cabundle"}, {}
    )
    assert config.aws_env["AWS_S3_ADDRESSING_STYLE"] == "virtual"
    assert config.ca_dir == "/etc/ssl/custom-certs"
    mounted = load_config(
        {**base, "CA_BUNDLE_CONFIGMAP_NAME": "c", "CA_BUNDLE_VOLUME_MOUNT_POINT": "/certs"}, {}
    )
    assert mounted.ca_dir == "/certs"
    own = load_config({**base, "AWS_CA_BUNDLE": "/b/ca.crt", "LLMKUBE_CA_DIR": "/mine"}, {})
    assert own.ca_dir == "/mine"


def storage_config(s3: SeaweedS3, secret: str) -> str:
    import json

    return json.dumps(
        {
            "type": "s3",
            "access_key_id": READER[0],
            "secret_access_key": secret,
            "endpoint_url": s3.endpoint_url,
            "region": "us-east-1",
        }
    )


def test_kserves_storage_spec_json(pod: Pod, s3: SeaweedS3, bucket: str) -> None:
    """STORAGE_CONFIG (KServe's storage spec Secret, one JSON per key) gives
    the endpoint and keys, and wins over the variables, as in KServe."""
    s3.put(bucket, "m/model.bin", b"S" * 256)
    dest = pod.tmp / "mnt" / "models"
    env = {
        "STORAGE_CONFIG": storage_config(s3, READER[1]),
        "AWS_ACCESS_KEY_ID": "AKIAOVERRIDDEN000001",
        "AWS_SECRET_ACCESS_KEY": "overridden",
        "AWS_EC2_METADATA_DISABLED": "true",
    }

    run = pod.run(f"s3://{bucket}/m", str(dest), env=env)

    assert run.returncode == 0, str(run)
    assert (dest / "model.bin").read_bytes() == b"S" * 256


def test_a_secret_in_the_storage_spec_is_never_shown(pod: Pod, s3: SeaweedS3, bucket: str) -> None:
    s3.put(bucket, "m/model.bin", b"x" * 10)
    secret = canary("specsecret")
    dest = pod.tmp / "mnt" / "models"
    env = {"STORAGE_CONFIG": storage_config(s3, secret), "AWS_EC2_METADATA_DISABLED": "true"}

    run = pod.run(f"s3://{bucket}/m", str(dest), env=env)

    assert run.returncode == 4, str(run)
    assert run.compact_term()["reason"] == "ModelSourceUnauthorized"
    assert_no_leak(outputs_of(run, pod.tmp / "mnt"), {"secret_access_key": secret})


def test_a_storage_spec_that_is_no_json_object_exits_2(pod: Pod) -> None:
    secret = canary("brokenjson")
    dest = pod.tmp / "mnt" / "models"
    run = pod.run("s3://b/m", str(dest), STORAGE_CONFIG='{"secret_access_key": "' + secret)

    assert run.returncode == 2, str(run)
    doc = run.compact_term()
    assert doc["reason"] == "InvalidConfiguration" and "STORAGE_CONFIG" in doc["message"], doc
    assert_no_leak(outputs_of(run), {"STORAGE_CONFIG": secret})
    assert not dest.exists()


def test_storage_allow_and_ignore_patterns_filter_a_prefix(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """KServe's STORAGE_ALLOW_PATTERNS / STORAGE_IGNORE_PATTERNS (JSON list or
    commas, fnmatch on the path relative to the prefix); a change of the
    patterns lists again instead of reusing the recorded listing."""
    for rel in ("model.safetensors", "config.json", "old.bak", "meta/x.json", "README.md"):
        s3.put(bucket, f"m/{rel}", rel.encode())
    dest = pod.tmp / "mnt" / "models"
    env = kserve_s3_env(
        s3, STORAGE_ALLOW_PATTERNS='["*.safetensors", "*.json"]', STORAGE_IGNORE_PATTERNS="meta/*"
    )

    run = pod.run(f"s3://{bucket}/m", str(dest), env=env)

    assert run.returncode == 0, str(run)
    assert sorted(p.name for p in dest.iterdir()) == [
        ".llmkube-stager",
        "config.json",
        "model.safetensors",
    ]
    wider = pod.run(f"s3://{bucket}/m", str(dest), env={**env, "STORAGE_ALLOW_PATTERNS": "*"})
    assert wider.returncode == 0, str(wider)
    assert (dest / "README.md").read_bytes() == b"README.md"
    assert not (dest / "meta").exists()
    nothing = pod.run(
        f"s3://{bucket}/m",
        str(pod.tmp / "mnt" / "none"),
        env={**env, "STORAGE_ALLOW_PATTERNS": "*.gguf"},
    )
    assert nothing.returncode == 4, str(nothing)
    assert nothing.compact_term()["reason"] == "ModelSourceNotFound"
