"""Bad S3 configuration is InvalidConfiguration, exit 2, before any I/O:
no model directory, no lock, no request (#11 item 12); a source is a path, and
what would be ambiguous is refused (#11 item 11); the S3 source needs no
temporary directory unless it has extra CA certificates (#13 item 3).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest

from tests.harness.features import missing_feature
from tests.harness.pod import ROOT
from tests.harness.sample import KIB, payload
from tests.harness.seaweed import s3_env, without_keys
from tests.harness.tlsca import make_ca


def assert_refused_before_any_io(pod, run, s3, *texts: str) -> None:
    assert run.returncode == 2, str(run)
    doc = run.term
    assert doc["reason"] == "InvalidConfiguration" and doc["retryable"] is False, doc
    for text in texts:
        assert text in doc["message"], doc
    assert "Traceback" not in run.stderr, run.stderr
    assert not pod.cache_dir.exists()  # no model directory, so no lock either
    assert s3.requests() == []


# The cases through the CLI (exit code, termination message)...
CLI_CASES = {
    "no scheme": {"AWS_ENDPOINT_URL": "minio.minio.svc:9000"},
    "port 99999": {"AWS_ENDPOINT_URL": "http://127.0.0.1:99999"},
    "ftp": {"AWS_ENDPOINT_URL": "ftp://127.0.0.1:9000"},
    "garbage region": {"AWS_REGION": "us east 1"},
}
# ...and the rest in-process (the same code path, faster).
STAGE_CASES = {
    "ip without scheme": {"AWS_ENDPOINT_URL": "127.0.0.1:9000"},
    "credentials in the endpoint": {"AWS_ENDPOINT_URL": "http://user:pw@127.0.0.1:9000"},
    "s3 endpoint": {"AWS_ENDPOINT_URL_S3": "s3.example.com"},
    "sts endpoint": {"AWS_ENDPOINT_URL_STS": "sts.example.com:443"},
    "path as region": {"AWS_REGION": "../../etc"},
    "default region": {"AWS_DEFAULT_REGION": "eu_west_1"},
    "addressing": {"AWS_S3_ADDRESSING_STYLE": "subdomain"},
    "half a key pair": {"AWS_SECRET_ACCESS_KEY": ""},
    "role without token": {"AWS_ROLE_ARN": "arn:aws:iam::1:role/x"},
    "remote http container endpoint": {
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://credentials.example.com/x"
    },
}


@pytest.mark.parametrize("env", CLI_CASES.values(), ids=CLI_CASES.keys())
def test_bad_settings_are_refused_before_any_io_cli(pod, s3, bucket, env) -> None:
    """Before: a schemeless endpoint or port 99999 exited 3 after creating
    the model directory and its lock; ftp://, a garbage region gave a
    retryable ModelSourceUnreachable (a pod restarting forever)."""
    run = pod.run(env=pod.single_env(f"s3://{bucket}/m.gguf", **{**s3_env(s3), **env}))

    assert_refused_before_any_io(pod, run, s3, next(iter(env)))


@pytest.mark.parametrize("env", STAGE_CASES.values(), ids=STAGE_CASES.keys())
def test_more_bad_settings_are_refused_before_any_io(pod, s3, bucket, env) -> None:
    run = pod.stage(pod.single_env(f"s3://{bucket}/m.gguf", **{**s3_env(s3), **env})).failed(
        "InvalidConfiguration"
    )

    named = next(iter(env))
    assert named in run.detail or "AWS_WEB_IDENTITY_TOKEN_FILE" in run.detail, run.detail
    assert not pod.cache_dir.exists()
    assert s3.requests() == []


def test_a_profile_that_does_not_exist_is_refused_before_any_io_cli(
    pod, s3, bucket, tmp_path
) -> None:
    s3.put(bucket, "m.gguf", payload(4 * KIB))
    credentials = tmp_path / "credentials"
    credentials.write_text("[models]\naws_access_key_id = AKIAX\naws_secret_access_key = y\n")
    env = pod.single_env(
        f"s3://{bucket}/m.gguf",
        **without_keys(s3_env(s3)),
        AWS_SHARED_CREDENTIALS_FILE=str(credentials),
        AWS_PROFILE="no-such-profile",
    )

    run = pod.run(env=env)

    assert_refused_before_any_io(pod, run, s3, "AWS_PROFILE")


def test_a_missing_web_identity_token_file_is_refused_before_any_io_cli(
    pod, s3, bucket, tmp_path
) -> None:
    env = pod.single_env(
        f"s3://{bucket}/m.gguf",
        **without_keys(s3_env(s3)),
        AWS_ROLE_ARN="arn:aws:iam::role/llmkube-reader",
        AWS_WEB_IDENTITY_TOKEN_FILE=str(tmp_path / "no-token"),
    )

    run = pod.run(env=env)

    assert_refused_before_any_io(pod, run, s3, "AWS_WEB_IDENTITY_TOKEN_FILE")


# -- sources are paths (#11 item 11) ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["a#b.gguf", "a?b.gguf", "a?versionId=1", "a b#c?d.gguf"])
def test_hash_and_question_mark_are_part_of_the_key(pod, s3, bucket, name) -> None:
    """Before: `#` cut the key (a fragment) and `?` started a query, so the
    agent published the object `k/a` with exit 0."""
    s3.put(bucket, "k/a", b"the wrong object")
    data = payload(4 * KIB)
    s3.put(bucket, f"k/{name}", data)

    pod.stage(pod.single_env(f"s3://{bucket}/k/{name}", **s3_env(s3))).ok()

    assert pod.dest().read_bytes() == data
    assert [r.path for r in s3.object_requests(bucket)] == [f"/{bucket}/k/{name}"] * 2


@pytest.mark.parametrize("multi", [False, True], ids=["S3_KEY", "S3_PREFIX"])
def test_a_percent_escape_in_the_source_is_refused_as_ambiguous_cli(pod, s3, bucket, multi) -> None:
    """Before: `s3://b/k/a%23b.gguf` was decoded and published `k/a#b.gguf`."""
    s3.put(bucket, "k/a#b.gguf", payload(4 * KIB))
    source = f"s3://{bucket}/k/a%23b.gguf" if not multi else f"s3://{bucket}/k%2Fx"
    env = (
        pod.multi_env(source, ["m.gguf"], **s3_env(s3))
        if multi
        else pod.single_env(source, **s3_env(s3))
    )

    run = pod.run(env=env)

    assert_refused_before_any_io(pod, run, s3, "percent-escape", "S3_PREFIX" if multi else "S3_KEY")


def test_the_exact_key_with_a_percent_sign_goes_in_s3_key(pod, s3, bucket) -> None:
    data = payload(4 * KIB)
    s3.put(bucket, "k/a%23b.gguf", data)

    pod.stage(
        pod.single_env(f"s3://{bucket}/k/a%23b.gguf", S3_KEY="k/a%23b.gguf", **s3_env(s3))
    ).ok()

    assert pod.dest().read_bytes() == data


# -- no temporary directory (#13 item 3) -----------------------------------------------------------


def read_only_root(pod) -> list[str]:
    """A pod with readOnlyRootFilesystem and no /tmp volume: a mount
    namespace where /tmp, /var/tmp and the working directory (tempfile's
    fallbacks) are read-only; only the sandbox (the cache volume) is not."""
    if shutil.which("unshare") is None:
        missing_feature("unshare (util-linux) is missing")
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        missing_feature("mount namespaces are not permitted here (needs root)")
    box_dir = shlex.quote(str(pod.tmp))
    read_only = " ".join(shlex.quote(d) for d in ("/tmp", "/var/tmp", str(ROOT)))
    script = (
        "set -e; mount --make-rprivate /; "
        f"mount --bind {box_dir} {box_dir}; "
        f'for d in {read_only}; do mount --rbind "$d" "$d"; mount -o remount,bind,ro "$d"; done; '
        'exec "$@"'
    )
    return ["unshare", "--mount", "sh", "-c", script, "sh"]


def test_an_s3_stage_needs_no_temporary_directory_cli(pod, s3, bucket) -> None:
    """Before: every S3 fetcher made a TemporaryDirectory, so the stage
    failed (exit 3) where no temporary directory is writable."""
    data = payload(16 * KIB)
    s3.put(bucket, "m.gguf", data)

    run = pod.run(
        env=pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3)), wrapper=read_only_root(pod)
    )

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data


def test_extra_ca_certificates_without_a_temporary_directory_name_the_fix_cli(
    pod, s3, bucket, tmp_path
) -> None:
    """Only extra CA certificates need one (botocore takes a bundle file);
    without it the failure is a configuration error that names the fix,
    before the model directory exists."""
    s3.put(bucket, "m.gguf", payload(4 * KIB))
    ca = make_ca(tmp_path / "pki")
    env = pod.single_env(f"s3://{bucket}/m.gguf", **s3_env(s3), LLMKUBE_CA_DIR=str(ca.ca_dir))

    run = pod.run(env=env, wrapper=read_only_root(pod))

    assert_refused_before_any_io(pod, run, s3, "LLMKUBE_CA_DIR", "/tmp")


def test_extra_ca_certificates_use_a_temporary_bundle_and_remove_it_cli(
    pod, s3, bucket, tmp_path
) -> None:
    data = payload(8 * KIB)
    s3.put(bucket, "m.gguf", data)
    ca = make_ca(tmp_path / "pki")
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()

    run = pod.run(
        env=pod.single_env(
            f"s3://{bucket}/m.gguf",
            **s3_env(s3),
            LLMKUBE_CA_DIR=str(ca.ca_dir),
            TMPDIR=str(tmpdir),
        )
    )

    run.ok(files=1, fetched=1)
    assert list(tmpdir.iterdir()) == []  # made for botocore, removed at the end
