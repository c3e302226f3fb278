"""#41 item 4: every credential file of every source, named by its
variable, is read (or, for a file a library reads itself, checked) as a
bounded regular file before anything else happens: a directory (the
Secret's mount folder, a common slip), a FIFO (blocks for ever), a device
(/dev/zero reads for ever) or a file larger than the bound is
InvalidConfiguration, exit 2, naming the variable, with no request sent
and nothing written; a file's contents are never shown (a canary in the
too-large one). The runs are real ones against the suite's emulators on
loopback (SeaweedFS, the GCS emulator's front, Azurite), under an address
space limit: a run that reads /dev/zero into memory fails at the limit
instead of taking the machine's memory."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from llmkube_stager.sources.credfile import MAX_CREDENTIAL_FILE_BYTES
from tests.harness.azurite import LOOPBACK_ONLY, Azurite
from tests.harness.canary import canary, leaks
from tests.harness.gcs import GceMetadata, GcsFront, gcs_env
from tests.harness.pod import Pod
from tests.harness.seaweed import SeaweedS3, s3_env, without_keys

# Bounds every run: a file read for ever fails here, not in the kernel's
# OOM killer (#41 item 4's /dev/zero).
ADDRESS_SPACE = ["prlimit", "--as=2147483648", "--"]
# A run that blocks on a FIFO is a hang past this.
HANG_S = 30

KINDS = ["directory", "fifo", "dev-zero", "too-large"]


def _not_a_file(kind: str, tmp: Path, secret: str) -> str:
    """A path of `kind` where a credentials file is expected."""
    if kind == "directory":
        folder = tmp / "secret-mount"
        folder.mkdir()
        (folder / "key.json").write_text('{"type": "service_account"}')
        return str(folder)
    if kind == "fifo":
        fifo = tmp / "credentials.fifo"
        os.mkfifo(fifo)
        return str(fifo)
    if kind == "dev-zero":
        return "/dev/zero"
    big = tmp / "huge-credentials"
    big.write_text(secret + "x" * MAX_CREDENTIAL_FILE_BYTES)
    return str(big)


def _refused(pod: Pod, env: dict[str, str], variable: str, secret: str) -> None:
    run = pod.run(env=env, timeout=HANG_S, wrapper=ADDRESS_SPACE)
    run.failed("InvalidConfiguration", exit_code=2)
    assert variable in run.term["message"], run.term
    assert leaks(secret, run.outputs) == []
    assert not pod.dest().exists()


# -- gs:// ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_google_application_credentials_that_is_no_bounded_file_is_refused(
    pod: Pod, gcs: GcsFront, gcs_bucket: str, no_metadata: GceMetadata, kind: str
) -> None:
    secret = canary("gcpkey")
    path = _not_a_file(kind, pod.tmp, secret)
    gcs.emulator.put(gcs_bucket, "model.gguf", b"weights")
    env = pod.single_env(
        f"gs://{gcs_bucket}/model.gguf",
        **gcs_env(gcs, no_metadata, GOOGLE_APPLICATION_CREDENTIALS=path),
    )

    _refused(pod, env, "GOOGLE_APPLICATION_CREDENTIALS", secret)

    assert gcs.requests() == [] and no_metadata.state.paths == []


# -- s3:// ------------------------------------------------------------------------------------

_S3_FILES: dict[str, Callable[[], dict[str, str]]] = {
    "AWS_SHARED_CREDENTIALS_FILE": dict,
    "AWS_CONFIG_FILE": dict,
    "AWS_WEB_IDENTITY_TOKEN_FILE": lambda: {
        "AWS_ROLE_ARN": "arn:aws:iam::000000000000:role/model-reader"
    },
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": lambda: {
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://127.0.0.1:9/credentials"
    },
}


@pytest.mark.parametrize("variable", list(_S3_FILES))
@pytest.mark.parametrize("kind", KINDS)
def test_an_aws_credential_file_that_is_no_bounded_file_is_refused(
    pod: Pod, s3: SeaweedS3, bucket: str, variable: str, kind: str
) -> None:
    secret = canary("awskey")
    path = _not_a_file(kind, pod.tmp, secret)
    s3.put(bucket, "model.gguf", b"weights")
    extra = {variable: path, **_S3_FILES[variable]()}
    env = pod.single_env(f"s3://{bucket}/model.gguf", **without_keys(s3_env(s3)), **extra)

    _refused(pod, env, variable, secret)

    assert s3.requests() == []


# -- Azure Blob -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_federated_token_file_that_is_no_bounded_file_is_refused(
    pod: Pod, az: Azurite, container: str, kind: str
) -> None:
    secret = canary("aztoken")
    path = _not_a_file(kind, pod.tmp, secret)
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        AZURE_STORAGE_CONNECTION_STRING=az.connection_string(key=False),
        AZURE_CLIENT_ID="00000000-0000-0000-0000-000000000001",
        AZURE_TENANT_ID="00000000-0000-0000-0000-000000000002",
        AZURE_FEDERATED_TOKEN_FILE=path,
        AZURE_AUTHORITY_HOST="https://127.0.0.1:9",
        **LOOPBACK_ONLY,
    )

    _refused(pod, env, "AZURE_FEDERATED_TOKEN_FILE", secret)

    assert az.requests() == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_certificate_file_that_is_no_bounded_file_is_refused(
    pod: Pod, az: Azurite, container: str, kind: str
) -> None:
    """AZURE_CLIENT_CERTIFICATE_PATH (#41 item 3) is a credential file like
    the others (#41 item 4)."""
    secret = canary("azcert")
    path = _not_a_file(kind, pod.tmp, secret)
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        AZURE_STORAGE_CONNECTION_STRING=az.connection_string(key=False),
        AZURE_CLIENT_ID="00000000-0000-0000-0000-000000000001",
        AZURE_TENANT_ID="00000000-0000-0000-0000-000000000002",
        AZURE_CLIENT_CERTIFICATE_PATH=path,
        AZURE_AUTHORITY_HOST="https://127.0.0.1:9",
        **LOOPBACK_ONLY,
    )

    _refused(pod, env, "AZURE_CLIENT_CERTIFICATE_PATH", secret)

    assert az.requests() == []
