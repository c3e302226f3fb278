"""#24 item 5: the rules of a listing, with ListObjectsV2 pages handed in
(the page function is the listing's injected dependency; SeaweedFS runs
the same code in test_s3_prefix.py), and the configuration it needs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from llmkube_stager.config import load_config
from llmkube_stager.errors import ConfigError, InvalidFileSet, SourceError
from llmkube_stager.listing import ListedFile, Listing, decode_listing, encode_listing
from llmkube_stager.sources.base import check_listed
from llmkube_stager.sources.s3.listing import list_objects


def pages(keys: list[str], per_page: int = 2) -> Any:
    """A bucket holding `keys`, answered `per_page` keys a page."""
    asked: list[tuple[str, str | None]] = []

    def page(prefix: str, token: str | None) -> Mapping[str, Any]:
        asked.append((prefix, token))
        matching = sorted(k for k in keys if k.startswith(prefix))
        start = int(token or 0)
        chunk = matching[start : start + per_page]
        more = start + per_page < len(matching)
        return {
            "Contents": [{"Key": k, "Size": len(k), "ETag": f'"{k}"'} for k in chunk],
            "IsTruncated": more,
            **({"NextContinuationToken": str(start + per_page)} if more else {}),
        }

    page.asked = asked  # type: ignore[attr-defined]
    return page


def test_a_prefix_is_cut_at_a_slash_and_markers_are_left_out() -> None:
    page = pages(["m/a.bin", "m/sub/", "m/sub/b.bin", "m-old/c.bin", "mx", "m/z.json"])
    listing = list_objects("s3://b/m", "b", "m", page)
    assert [f.rel for f in listing.files] == ["a.bin", "sub/b.bin", "z.json"]
    assert listing.base == "m"
    assert len(page.asked) == 3  # 6 keys under "m", 2 a page
    assert page.asked[1][1] == "2"


def test_the_key_itself_is_one_object_named_by_its_last_part() -> None:
    page = pages(["m/model.onnx", "m/model.onnx.bak", "m/model.onnx/inner"])
    listing = list_objects("s3://b/m/model.onnx", "b", "m/model.onnx", page)
    assert listing.files == (ListedFile("model.onnx", 12, '"m/model.onnx"'),)
    assert listing.base == "m"


def test_a_trailing_slash_lists_below_it_only() -> None:
    listing = list_objects("s3://b/m/", "b", "m/", pages(["m", "m/a"]))
    assert [f.rel for f in listing.files] == ["a"]


def test_the_whole_bucket_for_an_empty_key() -> None:
    listing = list_objects("s3://b/", "b", "", pages(["a", "d/b"]))
    assert [f.rel for f in listing.files] == ["a", "d/b"]
    assert listing.base == ""


def test_empty_and_dot_parts_of_a_key_are_dropped_and_its_key_kept() -> None:
    """#31 item 4: KServe stages `m//a` and `m/./b` at `a` and `b`."""
    listing = list_objects("s3://b/m", "b", "m", pages(["m//a", "m/./b", "m/c"]))
    assert sorted((f.rel, f.key) for f in listing.files) == [("a", "/a"), ("b", "./b"), ("c", "")]
    assert decode_listing(encode_listing(listing)) == listing
    # Two keys of one clean path: which one a server reads is not guessed.
    twice = list_objects("s3://b/m", "b", "m", pages(["m//a", "m/a"]))
    with pytest.raises(InvalidFileSet, match="twice"):
        check_listed(twice.source, twice.files)


@pytest.mark.parametrize(
    "hostile",
    [
        "m/../etc/passwd",
        "m/a/../../x",
        "m/.",
        "m/a.llmkube-size",
        "m/.llmkube-listing",
    ],
)
def test_a_hostile_key_is_an_invalid_file_set(hostile: str) -> None:
    """Checked once STORAGE_*_PATTERNS have filtered the listing (#31 item 4:
    staging/listed.py runs check_listed on what is left)."""
    listing = list_objects("s3://b/m", "b", "m", pages(["m/ok.bin", hostile]))
    with pytest.raises(InvalidFileSet):
        check_listed(listing.source, listing.files)


def test_nothing_under_the_prefix_is_not_found() -> None:
    with pytest.raises(SourceError) as caught:
        list_objects("s3://b/m", "b", "m", pages(["other/a"]))
    assert caught.value.reason.value == "ModelSourceNotFound"


def test_the_record_round_trips_and_garbage_is_no_record() -> None:
    listing = Listing("s3://b/m", "m", (ListedFile("a", 3, '"x"'), ListedFile("d/b", 0, "")))
    assert decode_listing(encode_listing(listing)) == listing
    for junk in (b"", b"[]", b'{"v": 2}', b'{"v":1,"files":[["a"]]}', b"\xff"):
        assert decode_listing(junk) is None


def test_a_prefix_without_model_files_is_listed_and_pins_fail_closed() -> None:
    env = {"MODEL_SOURCE": "s3://b/m/", "CACHE_DIR": "/models/k"}
    config = load_config(env, {})
    assert config.listed and config.multi_file and config.model_files == ()
    for pin in ("MODEL_SHA256", "MODEL_FILE_SHA256"):
        with pytest.raises(ConfigError, match=pin):
            load_config({**env, pin: "0" * 64}, {})
    with pytest.raises(ConfigError, match="MODEL_FILES"):
        load_config({"MODEL_SOURCE": "https://h/m/", "CACHE_DIR": "/models/k"}, {})
