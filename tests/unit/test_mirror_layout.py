"""mirror/layout.py (docs/mirror.md "Layout"): the keys and the manifest's
form, pure. A manifest or ref from the mirror is input: anything not of
the form this agent writes is refused, never guessed at."""

from __future__ import annotations

import json

import pytest

from llmkube_stager.mirror.layout import (
    MAX_DOC_BYTES,
    BadDocument,
    Entry,
    MirrorManifest,
    Place,
    decode_manifest,
    decode_ref,
    encode_manifest,
    encode_ref,
    hf_identity,
    origin_key,
    ref_name,
    url_identity,
    version_key,
)

SHA = "ab" * 32


def test_a_manifest_reads_back_as_written() -> None:
    manifest = MirrorManifest(
        "hf:org/repo", "c" * 40, {"a/b.bin": Entry(5, SHA, '"e"', None), "c": Entry(0, SHA)}
    )
    assert decode_manifest(encode_manifest(manifest)) == manifest


@pytest.mark.parametrize(
    "doc",
    [
        b"not json",
        b"[]",
        json.dumps({"v": 2, "origin": "o", "version": "v", "files": {}}).encode(),
        json.dumps({"v": 1, "origin": 1, "version": "v", "files": {}}).encode(),
        json.dumps({"v": 1, "origin": "o", "version": "v", "files": []}).encode(),
        json.dumps(
            {"v": 1, "origin": "o", "version": "v", "files": {"a": {"size": -1, "sha256": SHA}}}
        ).encode(),
        json.dumps(
            {"v": 1, "origin": "o", "version": "v", "files": {"a": {"size": True, "sha256": SHA}}}
        ).encode(),
        json.dumps(
            {
                "v": 1,
                "origin": "o",
                "version": "v",
                "files": {"a": {"size": 1, "sha256": "AB" * 32}},
            }
        ).encode(),
        json.dumps(
            {
                "v": 1,
                "origin": "o",
                "version": "v",
                "files": {"a": {"size": 1, "sha256": SHA, "etag": 3}},
            }
        ).encode(),
        b" " * (MAX_DOC_BYTES + 1),
    ],
)
def test_a_manifest_not_of_our_form_is_refused(doc: bytes) -> None:
    with pytest.raises(BadDocument):
        decode_manifest(doc)


def test_a_ref_names_a_version_key_only() -> None:
    assert decode_ref(encode_ref("c" * 40)) == "c" * 40
    for bad in ("../../x", "", "C" * 40, "abc"):
        with pytest.raises(BadDocument):
            decode_ref(json.dumps({"v": 1, "version": bad}).encode())


def test_the_origin_key_ignores_credentials_query_and_the_hub_endpoint() -> None:
    plain = url_identity("http", "https://host.example/models/")
    assert url_identity("http", "https://user:pw@HOST.example/models/?sig=1#f") == plain
    assert "pw" not in plain and "sig" not in plain
    assert hf_identity("org/repo", "") == hf_identity("org/repo", "/")
    assert origin_key(hf_identity("org/repo", "")).startswith("hf-")
    assert origin_key(hf_identity("org/repo", "")) != origin_key(hf_identity("org/repo", "gguf"))


def test_the_version_key_is_the_set_of_answers_in_any_order() -> None:
    answers = [("a", 1, '"x"'), ("b", 2, None)]
    assert version_key(answers) == version_key(reversed(answers))
    assert version_key(answers) != version_key([("a", 1, '"y"'), ("b", 2, None)])


def test_a_revision_that_is_no_key_is_hashed_not_used_as_a_path() -> None:
    assert ref_name("main") == "main"
    assert ref_name(None) == "latest"
    odd = ref_name("feature/../../x")
    assert "/" not in odd and ".." not in odd


def test_the_places_of_a_version() -> None:
    place = Place("hf-0123")
    assert place.manifest("c") == "hf-0123/c/manifest.json"
    assert place.file("c", "a/b.bin") == "hf-0123/c/files/a/b.bin"
    assert place.ref("main") == "hf-0123/refs/main.json"
