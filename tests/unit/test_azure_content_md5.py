"""The Content-MD5 an Azure listing declares, and the validator a listing
record keeps with it (#33 item 2). Pure: sources/azure/listing.py."""

from __future__ import annotations

import base64
import hashlib

from llmkube_stager.sources.azure.listing import content_md5, parse_page, split_validator

_MD5 = base64.b64encode(hashlib.md5(b"weights").digest()).decode()


def _page(md5: str) -> bytes:
    return (
        "<?xml version='1.0' encoding='utf-8'?><EnumerationResults><Blobs><Blob>"
        "<Name>m/model.gguf</Name><Properties><Content-Length>7</Content-Length>"
        f'<Etag>"0x8DC1"</Etag><Content-MD5>{md5}</Content-MD5></Properties>'
        "</Blob></Blobs><NextMarker /></EnumerationResults>"
    ).encode()


def test_the_listed_md5_is_kept_with_the_etag() -> None:
    (blob,), marker = parse_page(_page(_MD5))
    assert (blob.etag, blob.md5_b64, marker) == ('"0x8DC1"', _MD5, "")
    assert split_validator(blob.validator) == ('"0x8DC1"', _MD5)


def test_a_blob_without_md5_keeps_the_bare_etag() -> None:
    (blob,), _ = parse_page(_page(""))
    assert blob.validator == '"0x8DC1"'
    assert split_validator(blob.validator) == ('"0x8DC1"', None)


def test_what_is_not_an_md5_is_not_checked_against() -> None:
    """A value that is not base64 of 16 bytes is no digest to refuse bytes by."""
    for value in ("", "  ", "abc", _MD5[:-2], _MD5 + "AA", "0x8DC1;md5=x", "é" * 24):
        assert content_md5(value) is None, value
    assert content_md5(f" {_MD5} ") == _MD5


def test_an_etag_holding_the_separator_is_not_split_on_a_non_digest() -> None:
    assert split_validator('"a;md5=b"') == ('"a;md5=b"', None)
    assert split_validator(f'"a;md5=b";md5={_MD5}') == ('"a;md5=b"', _MD5)
