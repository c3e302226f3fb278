"""#29 item 11, pure: which Content-Encoding may mean a hop transformed the
body with nothing to prove the bytes, and which hop a refusal names."""

from __future__ import annotations

import pytest

from llmkube_stager.sources.wire.coding import (
    CodingProof,
    encoding_header,
    hop_words,
    transforms,
    unproven,
)

NOTHING = CodingProof()


def headers(**values: str):  # type: ignore[no-untyped-def]
    lowered = {k.replace("_", "-").lower(): v for k, v in values.items()}
    return lowered.get


@pytest.mark.parametrize(
    "value",
    ["aws-chunked", "utf-8", "UTF-8", "binary", "none", "identity", "", " , ", "aws-chunked, utf"],
)
def test_tokens_that_name_no_transformation_are_none(value: str) -> None:
    assert not transforms(value, NOTHING)


@pytest.mark.parametrize(
    "value", ["gzip", "GZIP", "x-gzip", "br", "zstd", "deflate", "aws-chunked, gzip", "utf-8,br"]
)
def test_a_coding_is_a_transformation_unless_something_proves_the_bytes(value: str) -> None:
    assert transforms(value, NOTHING)
    assert not transforms(value, CodingProof(pinned=True))
    assert not transforms(value, CodingProof(stored=value.upper()))


def test_a_stored_coding_proves_only_itself() -> None:
    """A hop that adds `br` over an object stored `gzip`, or gzips one stored
    with `aws-chunked`, is still a transformation."""
    assert transforms("gzip, br", CodingProof(stored="gzip"))
    assert transforms("gzip", CodingProof(stored="aws-chunked"))
    assert not transforms("gzip", CodingProof(stored=" gzip "))


def test_a_stored_coding_vouches_only_for_an_answer_of_the_stored_length() -> None:
    """A hop that gzips the GET and labels the HEAD `gzip` too: the HEAD
    says the stored coding is gzip, but the answer is not the stored length."""
    proof = CodingProof(stored="gzip", stored_bytes=1000)
    whole = headers(content_encoding="gzip", content_length="1000")
    assert encoding_header(unproven(whole, proof)) is None
    shrunk = headers(content_encoding="gzip", content_length="612")
    assert encoding_header(unproven(shrunk, proof)) == ("Content-Encoding", "gzip")
    ranged = headers(
        content_encoding="gzip", content_length="100", content_range="bytes 100-199/1000"
    )
    assert encoding_header(unproven(ranged, proof)) is None
    squeezed = headers(
        content_encoding="gzip", content_length="61", content_range="bytes 100-199/1000"
    )
    assert encoding_header(unproven(squeezed, proof)) == ("Content-Encoding", "gzip")
    unframed = headers(content_encoding="gzip")  # chunked: no length to agree
    assert encoding_header(unproven(unframed, proof)) == ("Content-Encoding", "gzip")
    unknown = CodingProof(stored="gzip")
    assert encoding_header(unproven(whole, unknown)) == ("Content-Encoding", "gzip")


def test_a_transfer_coding_is_judged_whatever_the_proof() -> None:
    """Only Content-Encoding is metadata; a Transfer-Encoding coding is
    applied on the wire (#22 item 1)."""
    get = headers(content_encoding="utf-8", transfer_encoding="gzip, chunked")
    assert encoding_header(unproven(get, CodingProof(pinned=True))) == (
        "Transfer-Encoding",
        "gzip, chunked",
    )
    assert encoding_header(unproven(headers(content_encoding="aws-chunked"), NOTHING)) is None
    assert encoding_header(unproven(headers(content_encoding="gzip"), NOTHING)) == (
        "Content-Encoding",
        "gzip",
    )


def test_an_s3_answer_names_the_endpoint_not_a_redirect_nor_the_bucket() -> None:
    who = hop_words("s3://models/m.gguf", "https://s3.internal:9000/models/m.gguf?X=1", None, None)
    assert who == "the S3 endpoint s3.internal:9000"
