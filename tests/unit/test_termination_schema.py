"""schema/termination.v1.json, the controller's side of the termination
message (#13 item 6): what the agent writes passes, and the schema rejects
what a controller could not use."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmkube_stager.errors import ConfigError, Reason, SourceError, StagerError
from llmkube_stager.model import Decision, FileResult, Outcome
from llmkube_stager.termination import encode, failure_doc, success_doc
from tests.harness.schema import validate_termination


def _same(text: str) -> str:
    return text


def _success() -> dict[str, Any]:
    results = (FileResult("a", Decision.FETCH, 10), FileResult("b", Decision.REUSE))
    return json.loads(encode(success_doc(Outcome(results, 1.5), "https://h/m")))  # type: ignore[no-any-return]


def _failure() -> dict[str, Any]:
    err = SourceError("404 from https://h/m", reason=Reason.SOURCE_NOT_FOUND, file="m")
    return json.loads(encode(failure_doc(err, "https://h/m", _same)))  # type: ignore[no-any-return]


def _raw(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


@pytest.mark.parametrize("reason", [r for r in Reason if r is not Reason.SUCCEEDED], ids=str)
def test_every_failure_reason_the_agent_writes_passes(reason: Reason) -> None:
    err = StagerError("detail", reason=reason, file="model.gguf", source_kind="s3")
    doc = validate_termination(encode(failure_doc(err, "s3://bucket/key", _same)))
    assert doc["reason"] == reason.value


def test_success_passes_and_carries_the_version() -> None:
    doc = validate_termination(_raw(_success()))
    assert doc["stats"]["version"]


def test_a_message_first_layout_passes() -> None:
    doc = _failure()
    reordered = {"message": doc.pop("message"), **doc}
    assert validate_termination(_raw(reordered))["message"].startswith("ERROR: ")


def _without(doc: dict[str, Any], *path: str) -> dict[str, Any]:
    copy = json.loads(json.dumps(doc))
    target = copy
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return copy  # type: ignore[no-any-return]


BROKEN = {
    "no v": lambda: _without(_failure(), "v"),
    "no outcome": lambda: _without(_failure(), "outcome"),
    "no reason": lambda: _without(_failure(), "reason"),
    "no retryable": lambda: _without(_failure(), "retryable"),
    "failure without message": lambda: _without(_failure(), "message"),
    "failure without remedy": lambda: _without(_failure(), "remedy"),
    "failure message without ERROR prefix": lambda: {**_failure(), "message": "oops"},
    "success without stats": lambda: _without(_success(), "stats"),
    "success without version": lambda: _without(_success(), "stats", "version"),
    "success without kept": lambda: _without(_success(), "stats", "kept"),
    "success that is retryable": lambda: {**_success(), "retryable": True},
    "success with a failure reason": lambda: {**_success(), "reason": "ModelSourceNotFound"},
    "failure with the success reason": lambda: {**_failure(), "reason": "ModelTransferSucceeded"},
    "v2": lambda: {**_failure(), "v": 2},
    "retryable as a string": lambda: {**_failure(), "retryable": "false"},
    "reason with a space": lambda: {**_failure(), "reason": "Model Source"},
    "negative count": lambda: {**_success(), "stats": {**_success()["stats"], "files": -1}},
    "message not a string": lambda: {**_success(), "message": 7},
    "an unnamed member": lambda: {**_failure(), "detail": "x"},
}


@pytest.mark.parametrize("make", BROKEN.values(), ids=BROKEN.keys())
def test_the_schema_rejects_what_a_controller_could_not_use(make: Any) -> None:
    with pytest.raises(AssertionError):
        validate_termination(_raw(make()))


def test_not_json_and_oversized_fail() -> None:
    with pytest.raises(AssertionError, match="not UTF-8 JSON"):
        validate_termination(b'{"v":1,')
    with pytest.raises(AssertionError, match="cut"):
        validate_termination(b" " * 4097)


def test_a_huge_failure_still_passes_after_shrinking() -> None:
    err = ConfigError("x" * 20_000, file="f" * 5000)
    doc = validate_termination(encode(failure_doc(err, "https://h/" + "p" * 9000, _same)))
    assert doc["remedy"] and doc["message"].endswith(doc["remedy"])


def test_the_budget_survives_a_pod_of_six_containers() -> None:
    """The kubelet cuts each container's message to 12 KiB / containers
    (init containers included): a serving pod with prep, downloader, server
    and three sidecars still gets the whole, parseable message."""
    from llmkube_stager.termination import MAX_BYTES

    assert MAX_BYTES <= (12 * 1024) // 6


@pytest.mark.parametrize("kept", [1024, 512, 200])
def test_a_message_the_kubelet_cut_still_names_its_reason(kept: int) -> None:
    """docs/operations.md: in a pod of many containers the kubelet keeps the
    first 12 KiB / containers of each message; cut JSON is read as text, and
    with `message` first the reason survives."""
    from llmkube_stager.commands.diagnose import condition_for

    err = SourceError("x" * 900, reason=Reason.SOURCE_NOT_FOUND, file="m")
    doc = json.loads(encode(failure_doc(err, "https://h/" + "p" * 600, _same)))
    first = {"message": doc.pop("message"), **doc}
    raw = json.dumps(first, separators=(",", ":")).encode()
    assert len(raw) > kept
    condition = condition_for(raw[:kept].decode("utf-8", "ignore"))
    assert condition is not None and condition["reason"] == "ModelSourceNotFound"
