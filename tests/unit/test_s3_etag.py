"""#41 item 7: which HEAD answers declare the MD5 of an S3 object's bytes
in their ETag (pure: a HEAD as boto3 returns it)."""

from __future__ import annotations

import base64
import hashlib

import pytest

from llmkube_stager.sources.s3.source import etag_md5

_MD5 = hashlib.md5(b"weights").hexdigest()


@pytest.mark.parametrize(
    ("head", "declared"),
    [
        ({"ETag": f'"{_MD5}"'}, True),
        ({"ETag": f'"{_MD5.upper()}"'}, True),
        ({"ETag": f'"{_MD5}"', "ServerSideEncryption": "AES256"}, True),
        ({"ETag": f'"{_MD5}"', "ServerSideEncryption": "aws:kms"}, False),
        ({"ETag": f'"{_MD5}"', "ServerSideEncryption": "aws:kms:dsse"}, False),
        ({"ETag": f'"{_MD5}"', "SSECustomerAlgorithm": "AES256"}, False),
        ({"ETag": f'"{_MD5}-2"'}, False),
        ({"ETag": '"not-an-md5"'}, False),
        ({"ETag": f'W/"{_MD5}"'}, False),
        ({}, False),
    ],
)
def test_a_single_part_unencrypted_etag_is_the_md5(head: dict[str, str], declared: bool) -> None:
    expected = base64.b64encode(hashlib.md5(b"weights").digest()).decode() if declared else None
    assert etag_md5(head) == expected
