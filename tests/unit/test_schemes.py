"""The table of scheme facts (#32 item 1) holds together: every row's
source class imports, its libraries have floors, its kind is a
`SourceKind`, and no URL scheme routes to two rows. A row with a typo'd
class path or an unknown library fails here, not on a pod's first cold
start."""

from __future__ import annotations

import importlib
from typing import get_args

from llmkube_stager.errors import REMEDIES_BY_KIND, Reason
from llmkube_stager.schemes import SCHEMES, SourceKind, of_source
from llmkube_stager.sources.deps import FLOORS


def test_every_row_names_a_class_that_imports() -> None:
    for row in SCHEMES:
        module_name, _, class_name = row.source.partition(":")
        assert isinstance(getattr(importlib.import_module(module_name), class_name), type), row


def test_every_library_a_row_names_has_a_floor() -> None:
    assert {d for row in SCHEMES for d in row.libraries} <= set(FLOORS)


def test_the_rows_are_the_kinds_and_route_each_url_scheme_once() -> None:
    assert [row.kind for row in SCHEMES] == list(get_args(SourceKind))
    url_schemes = [u for row in SCHEMES for u in row.url_schemes]
    assert len(url_schemes) == len(set(url_schemes))


def test_every_kind_has_its_remedies() -> None:
    for reason in (Reason.CACHE_LOCK_UNSUPPORTED, Reason.SOURCE_RATE_LIMITED):
        assert set(REMEDIES_BY_KIND[reason]) == set(get_args(SourceKind))


def _kind(source: str) -> str | None:
    row = of_source(source)
    return row.kind if row is not None else None


def test_a_source_is_routed_by_its_own_scheme() -> None:
    shown = ("/m/a.gguf", "S3://b/k", "hf://o/r", "https://h/f", "file:///m", "pvc://c/p")
    assert [_kind(s) for s in shown] == ["local", "s3", "hf", "http", "local", "pvc"]
    assert _kind("gs://b/k") == "gcs"  # #33 item 1
    assert _kind("oci://b/k") == "oci"  # #43
    assert _kind("git://b/k") is None and _kind("s3:/b") is None and _kind(" s3://b") is None
