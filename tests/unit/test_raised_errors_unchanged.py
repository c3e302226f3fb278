"""An error once raised is never changed in place (#32 item 5): a layer
that adds what it knows (the source's kind, the origin's window) raises a
new error of the same type, and whoever kept the raised one (hf/source.py
keeps a resolution's final error to raise it again) still holds it as it
was. Before, `from_source` set `source_kind` and the retry budget appended
to `detail` on the raised error itself."""

from __future__ import annotations

import io

import pytest

from llmkube_stager.config import Timeouts
from llmkube_stager.errors import (
    REMEDY_RATE_LIMITED_S3,
    Reason,
    SourceError,
    StagerError,
    from_source,
)
from llmkube_stager.logs import Log
from llmkube_stager.transfer.retry import RetryBudget


def test_the_source_kind_is_added_to_a_new_error_the_raised_one_is_kept() -> None:
    cause = OSError("the socket")
    raised = SourceError("HTTP 429", reason=Reason.SOURCE_RATE_LIMITED, transient=True)
    raised.__cause__ = cause
    with pytest.raises(SourceError) as caught, from_source("s3"):
        raise raised
    seen = caught.value
    assert seen is not raised
    assert raised.source_kind is None
    assert seen.source_kind == "s3"
    assert seen.remedy == REMEDY_RATE_LIMITED_S3
    assert (type(seen), seen.detail, seen.reason, seen.transient) == (
        SourceError,
        "HTTP 429",
        Reason.SOURCE_RATE_LIMITED,
        True,
    )
    assert seen.__cause__ is cause


def test_an_error_that_names_its_kind_passes_through_as_it_is() -> None:
    raised = StagerError("x", source_kind="hf")
    with pytest.raises(StagerError) as caught, from_source("s3"):
        raise raised
    assert caught.value is raised
    assert raised.source_kind == "hf"


def test_the_origins_window_is_said_in_a_new_error_the_raised_one_is_kept() -> None:
    budget = RetryBudget(Timeouts(retries=0), lambda _s: None, Log(io.StringIO(), "json"))
    raised = SourceError(
        "HTTP 429", reason=Reason.SOURCE_RATE_LIMITED, transient=True, retry_after_s=30.0
    )
    with pytest.raises(SourceError) as caught:
        budget.spend(raised, "GET model.gguf")
    assert raised.detail == "HTTP 429"
    assert caught.value.detail.startswith(
        "HTTP 429 (rate limited: the origin's window reopens in 30 s"
    )
    assert caught.value.retry_after_s == 30.0
