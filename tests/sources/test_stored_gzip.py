"""Objects stored gzip-encoded (#41 item 6): `gsutil cp -z` on GCS,
`Content-Encoding: gzip` on an Azure blob.

The stored bytes are what the store's digest covers (GCS's md5Hash,
Azure's Content-MD5). The agent asks for exactly those bytes (on GCS by
accepting gzip, else GCS decompresses on the fly, ignores Range and
serves another length than the object's size) and checks them against
the digest before anything is published. Then, per mode (docs/sources.md
"Objects stored with a Content-Encoding"):

- stage mode publishes the stored bytes, as it does for S3 and Azure
  since #29 item 11: the file is what the store holds and its digest
  proves;
- KServe mode refuses, naming the object and its stored encoding:
  KServe's google-cloud-storage and azure-storage-blob would leave the
  decompressed file, and the agent leaves no other file under the
  initializer's name than KServe would.

On the suite's GCS emulator front (which plays GCS's transcoding) and on
Azurite.
"""

from __future__ import annotations

import base64
import gzip
import hashlib

import pytest

from tests.harness.azurite import LOOPBACK_ONLY, Azurite
from tests.harness.gcs import GceMetadata, GcsFault, GcsFront, gcs_env
from tests.harness.pod import Pod
from tests.harness.sample import KIB, payload
from tests.harness.seaweed import SeaweedS3, s3_env


def _gz(size: int, seed: int = 6) -> bytes:
    return gzip.compress(payload(size, seed), mtime=0)


def test_a_gzip_stored_gs_object_is_fetched_as_stored_and_checked_against_its_md5(
    pod: Pod, gcs: GcsFront, gcs_bucket: str, no_metadata: GceMetadata
) -> None:
    """Failed before: every media GET said Accept-Encoding: identity, GCS
    transcoded (the whole decompressed object, 200 to a Range), and the
    run failed instead of keeping the stored, md5-checked bytes."""
    stored = _gz(256 * KIB)
    obj = gcs.emulator.put(gcs_bucket, "m/model.bin", stored)
    assert obj["md5Hash"] == base64.b64encode(hashlib.md5(stored).digest()).decode()
    gcs.gzip_stored("m/model.bin")
    env = pod.single_env(f"gs://{gcs_bucket}/m/model.bin", **gcs_env(gcs, no_metadata))

    pod.run(env=env).ok(files=1, fetched=1)

    assert pod.dest().read_bytes() == stored
    media = gcs.requests("media")
    assert media and all("gzip" in m.headers.get("accept-encoding", "") for m in media)
    assert [m.status for m in media if "range" not in m.headers] in ([200], [])


def test_a_listed_gzip_stored_gs_object_is_checked_and_a_flipped_byte_never_published(
    pod: Pod, gcs: GcsFront, gcs_bucket: str, no_metadata: GceMetadata
) -> None:
    """A listed prefix (no metadata request per object: the listing's
    contentEncoding is recorded with its generation and digests). A byte
    flipped on the way misses the md5Hash of the stored bytes. Failed
    before: the listed object's media GET was transcoded."""
    stored = _gz(96 * KIB, 7)
    gcs.emulator.put(gcs_bucket, "p/a.bin", stored)
    gcs.emulator.put(gcs_bucket, "p/b.json", b"{}")
    gcs.gzip_stored("p/a.bin")
    gcs.fault(GcsFault("media", name="p/a.bin", times=1, corrupt=True))
    env = {
        **pod.env,
        "MODEL_SOURCE": f"gs://{gcs_bucket}/p",
        "CACHE_DIR": str(pod.cache_dir),
        "LLMKUBE_RETRIES": "0",
        **gcs_env(gcs, no_metadata),
    }

    pod.run(env=env).failed("ModelTransferChecksumMismatch")
    assert not (pod.cache_dir / "a.bin").exists()

    pod.run(env=env).ok(files=2, fetched=1, reused=1)
    assert (pod.cache_dir / "a.bin").read_bytes() == stored
    assert gcs.requests("meta") == []


def test_kserve_mode_refuses_a_gzip_stored_gs_object_naming_its_encoding(
    pod: Pod, gcs: GcsFront, gcs_bucket: str, no_metadata: GceMetadata
) -> None:
    """KServe's google-cloud-storage leaves the decompressed file; the
    agent does not decompress, so it refuses rather than leave other
    bytes under that name. Failed before: exit 0 with nothing said, or a
    refusal blaming a proxy."""
    gcs.emulator.put(gcs_bucket, "k/model.pt", _gz(32 * KIB))
    gcs.gzip_stored("k/model.pt")
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"gs://{gcs_bucket}/k/model.pt", str(dest), env=gcs_env(gcs, no_metadata))

    assert run.returncode == 4, str(run)
    assert "stored with Content-Encoding: gzip" in run.stderr, run.stderr
    assert f"gs://{gcs_bucket}/k/model.pt" in run.stderr, run.stderr
    assert "proxy" not in run.stderr, run.stderr
    assert not (dest / "model.pt").exists()
    assert gcs.requests("media") == []


def test_kserve_mode_refuses_a_gzip_stored_blob_naming_its_encoding(
    pod: Pod, az: Azurite, container: str
) -> None:
    """azure-storage-blob (KServe's) decompresses a gzip-encoded blob; the
    agent refuses it in KServe mode, before its bytes are fetched. Failed
    before: exit 0, the stored gzip bytes left as model.bin."""
    from azure.storage.blob import ContentSettings

    pod.env.update(LOOPBACK_ONLY)
    blob = az.service().get_blob_client(container, "g/model.bin")
    blob.upload_blob(_gz(24 * KIB), content_settings=ContentSettings(content_encoding="gzip"))
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(
        Azurite.source(container, "g/model.bin"),
        str(dest),
        env={"AZURE_STORAGE_CONNECTION_STRING": az.connection_string()},
    )

    assert run.returncode == 4, str(run)
    assert "stored with Content-Encoding: gzip" in run.stderr, run.stderr
    assert not (dest / "model.bin").exists()


@pytest.mark.parametrize("encoding", ["utf-8", "aws-chunked"])
def test_kserve_mode_keeps_a_blob_whose_encoding_names_no_coding(
    pod: Pod, az: Azurite, container: str, encoding: str
) -> None:
    """Only a coding that transforms (gzip, br, ...) is refused (#29 item
    11's list): a blob labelled utf-8 is its bytes in KServe mode too."""
    from azure.storage.blob import ContentSettings

    pod.env.update(LOOPBACK_ONLY)
    data = payload(8 * KIB, 9)
    blob = az.service().get_blob_client(container, "u/model.bin")
    blob.upload_blob(data, content_settings=ContentSettings(content_encoding=encoding))
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(
        Azurite.source(container, "u/model.bin"),
        str(dest),
        env={"AZURE_STORAGE_CONNECTION_STRING": az.connection_string()},
    )

    assert run.returncode == 0, str(run)
    assert (dest / "model.bin").read_bytes() == data


def test_kserve_mode_keeps_a_gzip_stored_s3_object_as_stored(
    pod: Pod, s3: SeaweedS3, bucket: str
) -> None:
    """boto3, KServe's S3 client, leaves an object's stored bytes whatever
    its Content-Encoding: so does the agent in KServe mode (docs/sources.md
    "Objects stored with a Content-Encoding")."""
    stored = _gz(16 * KIB, 10)
    s3.admin().put_object(Bucket=bucket, Key="z/model.bin", Body=stored, ContentEncoding="gzip")
    dest = pod.tmp / "mnt" / "models"

    run = pod.run(f"s3://{bucket}/z/model.bin", str(dest), env=s3_env(s3))

    assert run.returncode == 0, str(run)
    assert (dest / "model.bin").read_bytes() == stored
