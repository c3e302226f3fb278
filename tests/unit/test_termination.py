"""termination: the bounded JSON termination message (CONTRACT §5, spec §11)."""

from __future__ import annotations

import importlib.metadata
import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest

from llmkube_stager.errors import (
    REMEDY_LOCK_UNSUPPORTED_PREFETCH,
    REMEDY_LOCK_UNSUPPORTED_S3,
    CacheError,
    Cancelled,
    ConfigError,
    InvalidFileSet,
    Network,
    Reason,
    SourceError,
    StagerError,
    TransferError,
    Wire,
    operator_phrase,
    remedy_for,
)
from llmkube_stager.logs import Redactor
from llmkube_stager.model import Decision, FileResult, Outcome
from llmkube_stager.termination import (
    MAX_BYTES,
    encode,
    failure_doc,
    failure_message,
    success_doc,
    write_termination,
)
from tests.harness.schema import validate_termination

REQUIRED = ("v", "outcome", "reason", "retryable")
HTTP_LOCK_REMEDY = (
    "set spec.modelCache.prefetch: true on every InferenceService using this claim, or use "
    "storage with cross-node flock support"
)
FUSE_DETAIL = "FUSE cache cannot guarantee cross-node file locking for staging model.safetensors"


def no_redaction(text: str) -> str:
    return text


def outcome() -> Outcome:
    return Outcome(
        results=(
            FileResult("config.json", Decision.REUSE),
            FileResult("tokenizer.json", Decision.REUSE),
            FileResult("model-1.safetensors", Decision.FETCH, 400),
            FileResult("model-2.safetensors", Decision.REPAIR, 100),
            FileResult("old.bin", Decision.KEEP),
        ),
        seconds=12.34567,
    )


def decode(data: bytes) -> dict[str, Any]:
    doc = validate_termination(data)
    assert isinstance(doc, dict)
    return doc


# --- success -------------------------------------------------------------------------------------


def test_success_doc_has_contract_fields_and_stats() -> None:
    doc = decode(encode(success_doc(outcome(), "https://huggingface.co/org/repo")))
    assert doc["v"] == 1
    assert doc["outcome"] == "succeeded"
    assert doc["reason"] == "ModelTransferSucceeded"
    assert doc["retryable"] is False
    assert doc["stats"] == {
        "files": 5,
        "fetched": 2,
        "reused": 2,
        "kept": 1,
        "bytes": 500,
        "seconds": 12.346,
        "version": importlib.metadata.version("llmkube-stager"),
    }
    assert doc["source"] == "https://huggingface.co/org/repo"


def test_success_stats_count_every_staged_file_once() -> None:
    staged = [d for d in Decision if d.value != "fail"]
    results = tuple(FileResult(f"f{i}", d, 10) for i, d in enumerate(staged))
    stats = success_doc(Outcome(results, 1.0), "s3://b/k")["stats"]
    assert stats["files"] == len(staged)
    assert stats["fetched"] + stats["reused"] + stats["kept"] == stats["files"]


def test_success_encoding_is_compact_single_line_json() -> None:
    data = encode(success_doc(outcome(), "https://h/x"))
    assert b"\n" not in data
    assert data == json.dumps(decode(data), separators=(",", ":")).encode()


def test_success_with_a_huge_source_still_fits() -> None:
    data = encode(success_doc(outcome(), "https://h/" + "ü" * 50_000))
    assert len(data) <= MAX_BYTES
    doc = decode(data)
    assert doc["outcome"] == "succeeded"
    assert all(k in doc for k in REQUIRED)


# --- failure message shape -----------------------------------------------------------------------


def test_failure_message_starts_with_reason_and_ends_with_the_remedy() -> None:
    err = SourceError("GET https://h/x returned HTTP 404", reason=Reason.SOURCE_NOT_FOUND)
    message = failure_message(err, no_redaction)
    assert message.startswith("ERROR: ModelSourceNotFound: ")
    assert message.endswith("; " + err.remedy)
    doc = decode(encode(failure_doc(err, "https://h/x", no_redaction)))
    assert doc["message"] == message
    assert doc["remedy"] == err.remedy
    assert doc["message"].endswith(doc["remedy"])
    assert doc["outcome"] == "failed"
    assert doc["reason"] == "ModelSourceNotFound"
    assert doc["retryable"] is False
    assert "detail" not in doc


def _fuse_refusal(source_kind: str) -> CacheError:
    """A serving pod's refusal on FUSE, for a source of this kind."""
    return CacheError(
        FUSE_DETAIL,
        reason=Reason.CACHE_LOCK_UNSUPPORTED,
        file="model.safetensors",
        source_kind=source_kind,
    )


def test_fuse_refusal_message_shape_http() -> None:
    err = _fuse_refusal("http")
    expected = (
        "ERROR: ModelCacheLockUnsupported: FUSE cache cannot guarantee cross-node file locking "
        f"for staging model.safetensors; {HTTP_LOCK_REMEDY}"
    )
    assert failure_message(err, no_redaction) == expected
    doc = decode(encode(failure_doc(err, "https://host/path", no_redaction)))
    assert doc["message"] == expected
    assert doc["remedy"] == HTTP_LOCK_REMEDY
    assert doc["file"] == "model.safetensors"
    assert doc["source"] == "https://host/path"
    assert doc["retryable"] is False


def test_lock_remedy_is_the_same_constant_for_http_and_hf_and_differs_for_s3() -> None:
    assert remedy_for(Reason.CACHE_LOCK_UNSUPPORTED, "http") == HTTP_LOCK_REMEDY
    assert remedy_for(Reason.CACHE_LOCK_UNSUPPORTED, "hf") == HTTP_LOCK_REMEDY
    assert REMEDY_LOCK_UNSUPPORTED_PREFETCH == HTTP_LOCK_REMEDY
    s3 = remedy_for(Reason.CACHE_LOCK_UNSUPPORTED, "s3")
    assert s3 == REMEDY_LOCK_UNSUPPORTED_S3
    assert s3 != HTTP_LOCK_REMEDY
    assert "prefetch: true" not in s3  # scenario 11: s3 is not prefetchable
    assert remedy_for(Reason.CACHE_LOCK_UNSUPPORTED, "local") not in (HTTP_LOCK_REMEDY, s3)


def test_fuse_refusal_message_shape_s3_uses_the_s3_remedy() -> None:
    err = _fuse_refusal("s3")
    message = failure_message(err, no_redaction)
    assert (
        message == f"ERROR: ModelCacheLockUnsupported: {FUSE_DETAIL}; {REMEDY_LOCK_UNSUPPORTED_S3}"
    )
    doc = decode(encode(failure_doc(err, "s3://bucket/key", no_redaction)))
    assert doc["remedy"] == REMEDY_LOCK_UNSUPPORTED_S3


def test_operator_remedy_constants_are_byte_identical() -> None:
    # spec §11.2: the controller looks these up by substring.
    assert remedy_for(Reason.SOURCE_UNAUTHORIZED) == (
        "check spec.sourceSecretRef and the credentials it names"
    )
    assert remedy_for(Reason.SOURCE_NOT_FOUND) == (
        "check spec.source: the bucket, key or file name does not exist at the endpoint"
    )
    assert remedy_for(Reason.SOURCE_UNREACHABLE) == (
        "check the endpoint address, cluster DNS, and any NetworkPolicy or egress restriction"
    )
    assert remedy_for(Reason.OUT_OF_SPACE) == (
        "raise spec.resources.ephemeralStorage (which also sizes the emptyDir) or give the model "
        "cache a larger volume"
    )
    assert remedy_for(Reason.SOURCE_UNTRUSTED) == (
        "the endpoint's CA is not trusted by the downloader; publish it via the operator's "
        "--ca-cert-configmap (the ConfigMap must exist in the workload's namespace, not the "
        "operator's)"
    )


@pytest.mark.parametrize("reason", [r for r in Reason if r is not Reason.SUCCEEDED])
def test_every_failure_reason_has_a_remedy(reason: Reason) -> None:
    assert remedy_for(reason)
    assert reason.value.isalnum() and reason.value[0].isupper()


def test_failure_doc_redacts_detail_file_and_source() -> None:
    redact = Redactor(["s3cr3t-value"])
    err = SourceError(
        "GET https://u:s3cr3t-value@h/x?X-Amz-Signature=abc returned HTTP 403",
        reason=Reason.SOURCE_UNAUTHORIZED,
        file="s3cr3t-value.bin",
    )
    data = encode(failure_doc(err, "https://h/x?sig=s3cr3t-value", redact))
    assert b"s3cr3t-value" not in data
    assert b"X-Amz-Signature=abc" not in data
    assert decode(data)["message"].startswith("ERROR: ModelSourceUnauthorized: ")


def test_failure_doc_omits_empty_file_and_source() -> None:
    doc = decode(encode(failure_doc(ConfigError("MODEL_SOURCE is required"), "", no_redaction)))
    assert "file" not in doc
    assert "source" not in doc
    assert doc["reason"] == "InvalidConfiguration"


# --- retryable and exit codes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "retryable"),
    [
        (Reason.SOURCE_UNREACHABLE, True),
        (Reason.SOURCE_RATE_LIMITED, True),
        (Reason.SOURCE_CHANGED, True),
        (Reason.CANCELLED, True),
        (Reason.INVALID_CONFIGURATION, False),
        (Reason.INVALID_FILE_SET, False),
        (Reason.CACHE_LOCK_UNSUPPORTED, False),
        (Reason.CHECKSUM_MISMATCH, False),
        (Reason.SOURCE_NOT_FOUND, False),
        (Reason.SOURCE_UNAUTHORIZED, False),
        (Reason.SOURCE_UNTRUSTED, False),
        (Reason.SOURCE_NOT_ALLOWED, False),
        (Reason.CACHE_UNWRITABLE, False),
        (Reason.INTERNAL, False),
    ],
)
def test_retryable(reason: Reason, retryable: bool) -> None:
    err = StagerError("x", reason=reason)
    assert err.retryable is retryable
    assert decode(encode(failure_doc(err, "", no_redaction)))["retryable"] is retryable


@pytest.mark.parametrize(
    ("err", "reason", "retryable"),
    [
        (Cancelled("SIGTERM"), Reason.CANCELLED, True),
        (SourceError("down"), Reason.SOURCE_UNREACHABLE, True),
        (TransferError("short"), Reason.SIZE_MISMATCH, False),
        (CacheError("ro"), Reason.CACHE_UNWRITABLE, False),
        (ConfigError("bad"), Reason.INVALID_CONFIGURATION, False),
        (InvalidFileSet("bad"), Reason.INVALID_FILE_SET, False),
    ],
)
def test_error_classes_default_reasons(err: StagerError, reason: Reason, retryable: bool) -> None:
    assert err.reason is reason
    assert err.retryable is retryable


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        (Reason.INVALID_CONFIGURATION, 2),
        (Reason.INVALID_FILE_SET, 2),
        (Reason.SOURCE_NOT_FOUND, 4),
        (Reason.CACHE_LOCK_UNSUPPORTED, 4),
        (Reason.CANCELLED, 1),
        (Reason.INTERNAL, 3),
    ],
)
def test_exit_codes(reason: Reason, code: int) -> None:
    assert StagerError("x", reason=reason).exit_code == code


# --- bounded encoding ----------------------------------------------------------------------------


def check_bounded(data: bytes, reason: Reason) -> dict[str, Any]:
    assert len(data) <= MAX_BYTES
    doc = decode(data)  # always valid JSON
    for key in REQUIRED:
        assert key in doc
    assert doc["v"] == 1
    assert doc["outcome"] == "failed"
    assert doc["reason"] == reason.value
    assert isinstance(doc["message"], str)
    assert doc["message"].startswith(f"ERROR: {reason.value}:")
    return doc


def test_huge_details_fit_and_stay_valid_json() -> None:
    detail = ('unexpected bytes "quoted" \x00\x1b\r\n ünïcödé 😀 ' * 3000)[:100_000]
    err = TransferError(detail, file="f" * 10_000, reason=Reason.SIZE_MISMATCH)
    data = encode(failure_doc(err, "https://h/" + "s" * 50_000, no_redaction))
    doc = check_bounded(data, Reason.SIZE_MISMATCH)
    assert doc["remedy"] == err.remedy
    assert doc["message"].endswith(err.remedy)
    assert "file" in doc and "source" in doc


CHUNKS = ["a", "é", "😀", "\x00", "\x1f", '"', "\\", "\u2028", "日本"]
SIZES = [0, 9, 300, 100_000]
FILE_SIZES = [0, 1000, 10_000]
REASONS = [Reason.SOURCE_UNTRUSTED, Reason.CACHE_LOCK_UNSUPPORTED]


@pytest.mark.parametrize("chunk", CHUNKS, ids=[repr(c) for c in CHUNKS])
def test_property_every_size_and_alphabet_is_valid_bounded_json(chunk: str) -> None:
    checked = 0
    for reason in REASONS:
        for detail_n, file_n, source_n in itertools.product(SIZES, FILE_SIZES, SIZES):
            err = StagerError(
                chunk * detail_n or "x",
                file=chunk * file_n or None,
                reason=reason,
                source_kind="s3",
            )
            data = encode(failure_doc(err, chunk * source_n, no_redaction))
            check_bounded(data, reason)
            checked += 1
    assert checked == len(REASONS) * len(SIZES) * len(FILE_SIZES) * len(SIZES)


@pytest.mark.parametrize("max_bytes", [300, 512, 1024, 2048, 4096])
def test_property_smaller_limits_are_honoured(max_bytes: int) -> None:
    err = StagerError("d" * 5000, file="f" * 5000, reason=Reason.SOURCE_UNREACHABLE)
    data = encode(failure_doc(err, "s" * 5000, no_redaction), max_bytes=max_bytes)
    assert len(data) <= max_bytes
    # Not `decode`: below the real budget the last resort is the four-key
    # object, which the schema (message and remedy on failure) rejects.
    doc = json.loads(data)
    assert all(k in doc for k in REQUIRED)


def test_property_remedy_is_never_shrunk() -> None:
    bad = []
    for chunk in ("😀", "é", "\x01"):
        for reason in REASONS:
            for detail_n, file_n, source_n in itertools.product([9, 100], [300, 10_000], [300]):
                err = StagerError(
                    chunk * detail_n, file=chunk * file_n, reason=reason, source_kind="http"
                )
                doc = decode(encode(failure_doc(err, chunk * source_n, no_redaction)))
                if doc.get("remedy") != err.remedy or not doc["message"].endswith(err.remedy):
                    bad.append((repr(chunk), reason.value, detail_n, file_n, source_n))
    assert bad == []


# --- write_termination ---------------------------------------------------------------------------


def test_write_termination_writes_in_place(tmp_path: Path) -> None:
    path = tmp_path / "termination-log"
    path.write_bytes(b"x" * 10_000)  # longer than what follows: must be truncated
    before = os.stat(path).st_ino
    data = encode(success_doc(outcome(), "https://h/x"))
    assert write_termination(str(path), data) is True
    assert os.stat(path).st_ino == before
    assert path.read_bytes() == data


def test_write_termination_creates_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "term"
    assert write_termination(str(path), b'{"v":1}') is True
    assert path.read_bytes() == b'{"v":1}'


def test_write_termination_through_a_symlink_keeps_the_target(tmp_path: Path) -> None:
    target = tmp_path / "real"
    target.write_bytes(b"old")
    link = tmp_path / "link"
    link.symlink_to(target)
    ino = os.stat(target).st_ino
    assert write_termination(str(link), b"new") is True
    assert link.is_symlink()
    assert target.read_bytes() == b"new"
    assert os.stat(target).st_ino == ino


def test_write_termination_unwritable_path_returns_false_quietly(tmp_path: Path) -> None:
    path = tmp_path / "no-such-dir" / "termination-log"
    assert write_termination(str(path), b"{}") is False
    assert not path.parent.exists()


def test_write_termination_empty_path_is_skipped() -> None:
    assert write_termination("", b"{}") is False


def test_write_termination_to_a_directory_returns_false(tmp_path: Path) -> None:
    assert write_termination(str(tmp_path), b"{}") is False


# --- the controller's 200-byte cut (#14 item 2) -----------------------------------------


@pytest.mark.parametrize("reason", [r for r in Reason if r is not Reason.SUCCEEDED])
def test_first_200_bytes_are_the_reason_and_the_cause(reason: Reason) -> None:
    """Today's controller reads the file as text and shows the matched line
    (the whole one-line document) cut at 200 bytes. ModelCacheLockUnsupported
    (FUSE), ModelTransferSizeMismatch and ModelStagerInternalError are built
    here; every other reason is produced for real in
    tests/e2e/test_dropin_diagnosis.py."""
    detail = "the cause in words a person can act on"
    err = StagerError(detail, reason=reason, file="model.gguf", source_kind="http")
    data = encode(failure_doc(err, "https://h.example/" + "p" * 3000, no_redaction))
    cut = data[:200].decode()
    assert cut.startswith(f'{{"message":"ERROR: {reason.value}: {detail}'), cut
    assert next(iter(decode(data))) == "message"


def test_the_fuse_refusal_cut_shows_the_cause() -> None:
    err = StagerError(FUSE_DETAIL, reason=Reason.CACHE_LOCK_UNSUPPORTED, source_kind="http")
    cut = encode(failure_doc(err, "https://h/m", no_redaction))[:200].decode()
    assert (
        cut
        == f'{{"message":"ERROR: ModelCacheLockUnsupported: {FUSE_DETAIL}; {HTTP_LOCK_REMEDY}'[:200]
    )


def test_the_minimal_document_still_starts_with_the_reason() -> None:
    """Shrunk past every free-text field, the message is still the reason
    and the remedy, and the document still meets the schema."""
    err = StagerError("d" * 5000, file="f" * 5000, reason=Reason.SOURCE_UNREACHABLE)
    data = encode(failure_doc(err, "s" * 5000, no_redaction), max_bytes=350)
    assert len(data) <= 350
    assert data.startswith(b'{"message":"ERROR: ModelSourceUnreachable: '), data
    doc = decode(data)
    assert all(k in doc for k in REQUIRED)
    assert doc["remedy"] == err.remedy and doc["message"].endswith(err.remedy)


@pytest.mark.parametrize("reason", [r for r in Reason if r is not Reason.SUCCEEDED])
def test_every_reasons_minimal_document_fits_the_budget(reason: Reason) -> None:
    err = StagerError("d" * 50_000, file="f" * 50_000, reason=reason)
    data = encode(failure_doc(err, "s" * 50_000, no_redaction))
    assert len(data) <= MAX_BYTES
    assert decode(data)["remedy"] == err.remedy


# --- the operator's words (#14 item 1) ---------------------------------------------------


@pytest.mark.parametrize(
    ("wire", "phrase"),
    [
        (Wire(http_status=404), "The requested URL returned error: 404"),
        (Wire(http_status=403), "The requested URL returned error: 403"),
        (
            Wire(http_status=404, s3_code="NoSuchKey"),
            "NoSuchKey; The requested URL returned error: 404",
        ),
        (Wire(s3_code="SignatureDoesNotMatch"), "SignatureDoesNotMatch"),
        (Wire(network=Network.DNS, host="nope.invalid"), "Could not resolve host: nope.invalid"),
        (
            Wire(network=Network.REFUSED, host="10.0.0.5", port=9000),
            "Failed to connect to 10.0.0.5 port 9000: Connection refused",
        ),
        (
            Wire(network=Network.CONNECT_TIMEOUT, host="h", port=443),
            "Failed to connect to h port 443: Connection timed out",
        ),
        (
            Wire(network=Network.READ_TIMEOUT, host="h", port=80),
            "Operation timed out: Connection timed out receiving from h port 80",
        ),
        (Wire(network=Network.RESET), "Recv failure: Connection reset by peer"),
        (
            Wire(network=Network.TLS_UNTRUSTED, tls_problem="self-signed certificate"),
            "SSL certificate problem: self-signed certificate",
        ),
        (Wire(network=Network.TLS_UNTRUSTED), "SSL certificate problem: certificate verify failed"),
        (Wire(http_status=304), ""),
        (Wire(), ""),
    ],
)
def test_operator_phrase_is_built_from_facts(wire: Wire, phrase: str) -> None:
    err = SourceError("whatever the text says: returned error: 401", wire=wire)
    assert operator_phrase(err) == phrase


def test_no_facts_no_phrase_whatever_the_text() -> None:
    """Never classified by message text: an error without facts adds nothing."""
    err = SourceError("Could not resolve host: x (The requested URL returned error: 404)")
    assert operator_phrase(err) == ""
    assert failure_message(err, no_redaction).count("returned error: 404") == 1


def test_the_phrase_sits_between_the_cause_and_the_remedy() -> None:
    err = SourceError(
        "GET https://h/m returned HTTP 404",
        reason=Reason.SOURCE_NOT_FOUND,
        wire=Wire(http_status=404),
    )
    expected = (
        "ERROR: ModelSourceNotFound: GET https://h/m returned HTTP 404 "
        f"(The requested URL returned error: 404); {err.remedy}"
    )
    assert failure_message(err, no_redaction) == expected
    assert decode(encode(failure_doc(err, "", no_redaction)))["message"] == expected


def test_the_phrase_is_redacted_too() -> None:
    err = SourceError("x", wire=Wire(network=Network.DNS, host="s3cr3t-host-canary"))
    redact = Redactor(["s3cr3t-host-canary"])
    assert "s3cr3t-host-canary" not in failure_message(err, redact)
    assert b"s3cr3t-host-canary" not in encode(failure_doc(err, "", redact))
