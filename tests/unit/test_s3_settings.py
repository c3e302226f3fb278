"""The S3 source's pure part: sources read as paths (#11 item 11), settings
checked before any I/O (#11 item 12), and the environment botocore gets."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from llmkube_stager.config import load_config
from llmkube_stager.errors import ConfigError
from llmkube_stager.sources.s3.session import botocore_env
from llmkube_stager.sources.s3.settings import S3Ref, parse_s3_ref, s3_settings

SINGLE = {"MODEL_PATH": "/models/k/m.gguf"}
MULTI = {"CACHE_DIR": "/models/k", "MODEL_FILES": "a.json"}


def ref(source: str, base: Mapping[str, str] = SINGLE, **env: str) -> S3Ref:
    return parse_s3_ref(load_config({"MODEL_SOURCE": source, **base, **env}, {}))


@pytest.mark.parametrize(
    ("source", "bucket", "key"),
    [
        ("s3://b/k/m.gguf", "b", "k/m.gguf"),
        ("S3://b/k/m.gguf", "b", "k/m.gguf"),
        ("s3://b/k/a#b.gguf", "b", "k/a#b.gguf"),
        ("s3://b/k/a?versionId=1", "b", "k/a?versionId=1"),
        ("s3://b/dir with space/modèle.gguf", "b", "dir with space/modèle.gguf"),
        ("s3://b/k/100%", "b", "k/100%"),  # not an escape: taken as it is
        ("s3://b//k", "b", "/k"),
    ],
)
def test_a_single_file_source_is_a_path(source: str, bucket: str, key: str) -> None:
    assert ref(source) == S3Ref(bucket, key)


def test_a_multi_file_prefix_is_a_path_without_edge_slashes() -> None:
    assert ref("s3://b/org models/v1#2/", MULTI) == S3Ref("b", "org models/v1#2")
    assert ref("s3://b", MULTI) == S3Ref("b", "")


@pytest.mark.parametrize("source", ["s3://b/k/a%23b.gguf", "s3://b/a%20b", "s3://b/%2e%2e/x"])
def test_a_percent_escape_is_refused(source: str) -> None:
    with pytest.raises(ConfigError, match="S3_KEY"):
        ref(source)


def test_s3_key_and_bucket_win_and_are_literal() -> None:
    assert ref("s3://b/k/a%23b.gguf", S3_KEY="k/a%23b.gguf") == S3Ref("b", "k/a%23b.gguf")
    assert ref("s3://x/y", S3_BUCKET="b", S3_KEY="a#b?c") == S3Ref("b", "a#b?c")
    assert ref("s3://b/p%2F", MULTI, S3_PREFIX="p%2F/") == S3Ref("b", "p%2F")


@pytest.mark.parametrize("source", ["s3://", "s3:///k", "s3://b?x/k", "s3://b#/k", "s3://b"])
def test_a_source_without_bucket_or_key_is_refused(source: str) -> None:
    with pytest.raises(ConfigError):
        ref(source)


def settings(**env: str):  # type: ignore[no-untyped-def]
    return s3_settings(load_config({"MODEL_SOURCE": "s3://b/k", **SINGLE, **env}, {}))


def test_settings_of_a_plain_pod() -> None:
    got = settings(AWS_ENDPOINT_URL="http://minio:9000", AWS_REGION="eu-west-1")
    assert (got.endpoint_url, got.region, got.addressing, got.sts_endpoint_url) == (
        "http://minio:9000",
        "eu-west-1",
        None,
        None,
    )


def test_the_s3_specific_endpoint_and_the_default_region() -> None:
    got = settings(
        AWS_ENDPOINT_URL="http://a:1",
        AWS_ENDPOINT_URL_S3="https://b:2",
        AWS_DEFAULT_REGION="ap-south-1",
        AWS_S3_ADDRESSING_STYLE="Virtual",
        AWS_ENDPOINT_URL_STS="https://sts.local",
    )
    assert (got.endpoint_url, got.region, got.addressing, got.sts_endpoint_url) == (
        "https://b:2",
        "ap-south-1",
        "virtual",
        "https://sts.local",
    )


@pytest.mark.parametrize(
    "env",
    [
        {"AWS_ENDPOINT_URL": "minio:9000"},
        {"AWS_ENDPOINT_URL": "http://h:99999"},
        {"AWS_ENDPOINT_URL": "http://h:0"},
        {"AWS_ENDPOINT_URL": "http://h:x"},
        {"AWS_ENDPOINT_URL": "ftp://h"},
        {"AWS_ENDPOINT_URL": "http://"},
        {"AWS_ENDPOINT_URL": "http://h/?x=1"},
        {"AWS_ENDPOINT_URL": "http://u:p@h"},
        {"AWS_ENDPOINT_URL_STS": "sts"},
        {"AWS_REGION": "us east 1"},
        {"AWS_REGION": "-us"},
        {"AWS_REGION": "x" * 64},
        {"AWS_S3_ADDRESSING_STYLE": "dns"},
        {"AWS_ACCESS_KEY_ID": "AKIAX"},
        {"AWS_SECRET_ACCESS_KEY": "s"},
        {"AWS_WEB_IDENTITY_TOKEN_FILE": "/t"},
        {"AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://10.0.0.1/creds"},
        {"AWS_CONTAINER_CREDENTIALS_FULL_URI": "file:///creds"},
    ],
    ids=repr,
)
def test_bad_settings_are_configuration_errors(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        settings(**env)
    assert next(iter(env)) in info.value.detail or "WEB_IDENTITY" in info.value.detail


@pytest.mark.parametrize(
    "uri",
    ["http://169.254.170.23/v1/credentials", "http://127.0.0.1:1/x", "https://creds.example/x"],
)
def test_container_endpoints_botocore_accepts(uri: str) -> None:
    settings(AWS_CONTAINER_CREDENTIALS_FULL_URI=uri)


def test_botocore_gets_home_relative_files_never_the_process_home() -> None:
    assert botocore_env({"HOME": "/home/stager", "AWS_PROFILE": "p"}) == {
        "AWS_PROFILE": "p",
        "AWS_SHARED_CREDENTIALS_FILE": "/home/stager/.aws/credentials",
        "AWS_CONFIG_FILE": "/home/stager/.aws/config",
    }
    got = botocore_env({"AWS_CONFIG_FILE": "/etc/aws"})
    assert got["AWS_CONFIG_FILE"] == "/etc/aws"
    assert got["AWS_SHARED_CREDENTIALS_FILE"].startswith("/nonexistent/")


def test_only_aws_variables_and_home_reach_the_s3_source() -> None:
    config = load_config(
        {
            "MODEL_SOURCE": "s3://b/k",
            **SINGLE,
            "AWS_PROFILE": "p",
            "AWS_STS_REGIONAL_ENDPOINTS": "regional",
            "AWS_MAX_ATTEMPTS": "10",  # the agent retries itself: never botocore
            "HOME": "/h",
            "PATH": "/bin",
            "HF_TOKEN": "hf_x",
            "AWS_REGION": "  ",
        },
        {"AWS_PROFILE": "from-flag"},
    )
    assert dict(config.aws_env) == {
        "AWS_PROFILE": "from-flag",
        "AWS_STS_REGIONAL_ENDPOINTS": "regional",
        "HOME": "/h",
    }
    assert "aws_env" not in repr(config)


@pytest.mark.parametrize(
    "source", ["s3://user:CanaryPassw0rd@bucket/m.gguf", "s3://CanaryPassw0rd@bucket/m.gguf"]
)
def test_user_info_in_an_s3_url_is_refused_without_echoing_it(source: str) -> None:
    """`s3://user:password@bucket/key` was refused with the "bucket name"
    echoed, the password in it, into the log and the termination message
    (found in the #24 review's last look; the KServe form too)."""
    with pytest.raises(ConfigError) as caught:
        ref(source)
    assert "CanaryPassw0rd" not in str(caught.value)
    assert "user info" in str(caught.value)
