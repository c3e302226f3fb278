"""logs: the redaction layer and the two log renderers (CONTRACT §5 "no secret", §6)."""

from __future__ import annotations

import io
import json
import re

import pytest

from llmkube_stager.logs import REDACTED, Log, Redactor, display_url

CANARY = "s3cr3t-Canary-Value-4242"


# --- Redactor ------------------------------------------------------------------------------------


def test_known_secret_values_are_removed_everywhere() -> None:
    redact = Redactor([CANARY, "second-secret"])
    text = f"token {CANARY} then {CANARY}{CANARY} and second-secret."
    out = redact(text)
    assert CANARY not in out
    assert "second-secret" not in out
    assert out == f"token {REDACTED} then {REDACTED}{REDACTED} and {REDACTED}."


def test_overlapping_secrets_longest_first() -> None:
    redact = Redactor(["abcd", "abcdefgh"])
    assert redact("x abcdefgh y") == f"x {REDACTED} y"


def test_empty_and_tiny_secret_values_do_not_mangle_text() -> None:
    redact = Redactor(["", "a"])
    assert redact("a cat ate a bat") == "a cat ate a bat"


@pytest.mark.parametrize(
    ("text", "leaked"),
    [
        ("https://user:p4ssw0rd@minio.example:9000/bucket/key", "p4ssw0rd"),
        ("fetch http://AKID:secret@host/x failed", "secret@"),
        ("GET https://b.s3.amazonaws.com/k?X-Amz-Signature=deadbeef00&x=1", "deadbeef00"),
        ("https://b.s3.amazonaws.com/k?X-Amz-Credential=AKID%2F2024%2Fs3&X-Amz-Date=1", "AKID%2F"),
        ("https://b.s3.amazonaws.com/k?x-amz-security-token=FwoGZXIvYXdzEJr", "FwoGZXIvYXdzEJr"),
        ("https://cdn.example/file?sig=abcdef123456", "abcdef123456"),
        ("https://cdn.example/file?a=1&token=tok-zzz-999", "tok-zzz-999"),
        ("https://cdn-lfs.hf.co/x?Signature=SiGnAtUrE~1&Key-Pair-Id=K2ABC", "SiGnAtUrE~1"),
        ("https://cdn-lfs.hf.co/x?Signature=S1&Key-Pair-Id=K2ABCDEF", "K2ABCDEF"),
        ("https://acct.blob.core.windows.net/c/m?se=2030-01-01&sp=r&sv=2022&sig=AbC%3D", "AbC%3D"),
        ("https://acct.blob.core.windows.net/c/m?sv=2022-11-02&se=2030&sr=b", "2022-11-02"),
        ("https://acct.blob.core.windows.net/c/m?sp=racwdl&sig=x", "racwdl"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "eyJhbGciOiJIUzI1NiJ9"),
        ("header bearer abcdefghijkl", "abcdefghijkl"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
        ("{'Authorization': 'token-in-a-dict-repr'}", "token-in-a-dict-repr"),
        ('{"authorization": "Bearer zzzzzzzzzz"}', "zzzzzzzzzz"),
        ("using hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123 for auth", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"),
        ("key id AKIAIOSFODNN7EXAMPLE in use", "AKIAIOSFODNN7EXAMPLE"),
        ("temporary ASIAIOSFODNN7EXAMPLE", "ASIAIOSFODNN7EXAMPLE"),
    ],
)
def test_credential_shaped_text_is_removed(text: str, leaked: str) -> None:
    out = Redactor()(text)
    assert leaked not in out
    assert REDACTED in out


def test_signed_url_keeps_its_shape() -> None:
    url = "https://b.s3.amazonaws.com/k/model.gguf?X-Amz-Signature=abc&partNumber=1"
    assert Redactor()(url) == (
        f"https://b.s3.amazonaws.com/k/model.gguf?X-Amz-Signature={REDACTED}&partNumber=1"
    )


def test_userinfo_keeps_the_host() -> None:
    assert Redactor()("https://u:p@minio:9000/b") == f"https://{REDACTED}@minio:9000/b"


@pytest.mark.parametrize(
    "text",
    [
        "the token stays out of the logs",
        "Bearer of bad news",
        "/models/0123456789abcdef/model-00001-of-00002.safetensors",
        "/models/k/model.safetensors.llmkube-size",
        "Downloaded 2 MiB of 4 MiB (50%)",
        "size=536870912 bytes=1024 seconds=12.5",
        "Model already cached, skipping download",
        "https://huggingface.co/org/repo/resolve/main/config.json",
        "https://host.example/path?revision=main&download=true",
        "monkey=1 keyword=2 signature check failed",
        "hf_short and AKIA-not-a-key",
        "ERROR: ModelSourceNotFound: GET https://h/x returned HTTP 404",
    ],
)
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert Redactor([CANARY])(text) == text


# --- display_url ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://u:p@h.example:8443/a/b?x=1#frag", "https://h.example:8443/a/b"),
        ("https://h/a?X-Amz-Signature=abc&X-Amz-Credential=AKIA", "https://h/a"),
        ("https://h/a#frag?not-a-query", "https://h/a"),
        ("s3://bucket/key", "s3://bucket/key"),
        ("hf://org/repo@main/model.gguf", "hf://org/repo@main/model.gguf"),
        ("https://token@huggingface.co/org/repo", "https://huggingface.co/org/repo"),
        ("/abs/path/model.gguf", "/abs/path/model.gguf"),
    ],
)
def test_display_url(url: str, shown: str) -> None:
    assert display_url(url) == shown


# --- Log: text -----------------------------------------------------------------------------------


def text_log(secrets: tuple[str, ...] = ()) -> tuple[Log, io.StringIO]:
    stream = io.StringIO()
    return Log(stream, "text", Redactor(secrets)), stream


def json_log(secrets: tuple[str, ...] = ()) -> tuple[Log, io.StringIO]:
    stream = io.StringIO()
    return Log(stream, "json", Redactor(secrets)), stream


def test_text_line_is_message_then_key_values() -> None:
    log, out = text_log()
    log.info("hit", "Model already cached, skipping download", file="model.gguf", size=123)
    assert out.getvalue() == "Model already cached, skipping download file=model.gguf size=123\n"


def test_text_values_with_spaces_quotes_or_equals_are_quoted() -> None:
    log, out = text_log()
    log.info("e", "msg", path="/a b/c", q='say "hi"', eq="a=b", empty="")
    assert out.getvalue() == 'msg path="/a b/c" q="say \\"hi\\"" eq="a=b" empty=""\n'


def test_text_none_fields_are_omitted_and_bools_kept() -> None:
    log, out = text_log()
    log.info("e", "msg", skipped=None, ok=True, n=0)
    assert out.getvalue() == "msg ok=True n=0\n"


def test_text_warning_prefix() -> None:
    log, out = text_log()
    log.warning("no_size_record", "no valid size record for a.bin", file="a.bin")
    assert out.getvalue() == "WARNING: no valid size record for a.bin file=a.bin\n"


def test_text_info_and_error_have_no_warning_prefix() -> None:
    log, out = text_log()
    log.info("e", "one")
    log.error("e", "ERROR: ModelSourceNotFound: x")
    assert out.getvalue().splitlines() == ["one", "ERROR: ModelSourceNotFound: x"]


def test_text_never_contains_carriage_return_and_one_event_per_line() -> None:
    log, out = text_log()
    log.info("progress", "Downloaded 1 MiB\rDownloaded 2 MiB\nsecond", file="a\rb\nc")
    text = out.getvalue()
    assert "\r" not in text
    assert text.count("\n") == 1


# --- Log: json -----------------------------------------------------------------------------------


def test_json_lines_one_object_per_line() -> None:
    log, out = json_log()
    log.info("hit", "Model already cached, skipping download", file="model.gguf", size=123)
    log.warning("retry", "retrying", attempt=1)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["level"] == "info"
    assert first["event"] == "hit"
    assert first["msg"] == "Model already cached, skipping download"
    assert first["file"] == "model.gguf"
    assert first["size"] == 123
    # Milliseconds: progress lines an interval apart sort and subtract (#46 item 5).
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["ts"])
    assert second["level"] == "warning"
    assert second["event"] == "retry"
    assert second["attempt"] == 1


def test_json_line_with_newlines_in_values_stays_one_line() -> None:
    log, out = json_log()
    log.info("e", "a\nb\rc", detail="x\ny")
    text = out.getvalue()
    assert text.count("\n") == 1
    assert "\r" not in text
    assert json.loads(text)["msg"] == "a\nb\rc"


# --- the canary never leaves ---------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_canary_secret_never_appears_in_output(fmt: str) -> None:
    stream = io.StringIO()
    log = Log(stream, fmt, Redactor([CANARY]))
    log.info("e", f"token is {CANARY}", token=CANARY, url=f"https://x:{CANARY}@h/p?sig={CANARY}")
    log.warning("w", CANARY, nested=[CANARY, {"k": CANARY}])
    log.error("err", f"ERROR: ModelSourceUnauthorized: Bearer {CANARY}", header=f"Bearer {CANARY}")
    text = stream.getvalue()
    assert CANARY not in text
    assert REDACTED in text
    assert len(text.splitlines()) == 3


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_shaped_tokens_are_removed_without_being_registered(fmt: str) -> None:
    stream = io.StringIO()
    log = Log(stream, fmt)
    token = "hf_" + "Q" * 30
    log.info("e", f"probe with {token}", auth=f"Authorization: Bearer {token}")
    assert token not in stream.getvalue()


def test_log_exposes_its_redactor() -> None:
    redact = Redactor([CANARY])
    assert Log(io.StringIO(), "text", redact).redact is redact


# --- the pre-check that skips the patterns (#16 item 3) --------------------------------------


def _every_pattern(text: str) -> str:
    """What the Redactor did before it learnt to skip: all five patterns on
    every string, whatever it holds."""
    from llmkube_stager import logs

    text = logs._USERINFO_RE.sub(rf"\1{REDACTED}@", text)
    text = logs._SIGNED_PARAM_RE.sub(rf"\1{REDACTED}", text)
    text = logs._BEARER_RE.sub(rf"\1\2{REDACTED}", text)
    text = logs._AUTH_HEADER_RE.sub(rf"\1{REDACTED}", text)
    return logs._TOKEN_SHAPES_RE.sub(REDACTED, text)


SHAPES = [
    "https://user:pw@host/x",
    "s3://AKIAABCDEFGHIJKLMNOP@bucket",
    "?X-Amz-Signature=abc&X-Amz-Credential=d",
    "&sig=abc",
    ";token=abc",
    "Bearer abcdefgh",
    "bearer abcdefgh",
    "BEARER abcdefgh",
    "Basic dXNlcjpwYXNz",
    "Authorization: token",
    "AUTHORIZATION=token",
    "'authorization': 'x'",
    "hf_" + "a" * 30,
    "AKIA" + "B" * 16,
    "ASIA" + "C" * 16,
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "around", ["{}", "Model artifact {} already cached", "x={} y", "({})", "{}\n{}"]
)
def test_the_pre_check_never_skips_a_secret_shape(shape: str, around: str) -> None:
    text = around.format(shape, shape)
    assert Redactor()(text) == _every_pattern(text)
    assert Redactor()(text) != text, "a secret shape went through untouched"


def test_the_pre_check_agrees_with_every_pattern_on_any_text() -> None:
    hypothesis = pytest.importorskip("hypothesis")
    strategies = hypothesis.strategies
    pieces = strategies.sampled_from(
        [*SHAPES, ":", "/", "@", "=", "?", "&", " ", "hf", "_", "AKI", "A", "Bear", "er", "x"]
    )
    texts = strategies.one_of(
        strategies.text(max_size=80),
        strategies.lists(pieces, max_size=12).map("".join),
    )

    @hypothesis.settings(max_examples=400, deadline=None, database=None)
    @hypothesis.given(texts)
    def agree(text: str) -> None:
        assert Redactor()(text) == _every_pattern(text)

    agree()


# --- long texts: block by block (#16) ------------------------------------------------------------

# Lines a `plan` or log tail may hold, and the shapes whose whitespace runs
# on into the next lines (Bearer / token, authorization / : / value).
_PIECES = [
    "part-00042.json  reuse  complete  1234  1234  -  size matches its size record",
    "",
    "   ",
    "source:  https://user:pw@mirror.example/org/repo (http)",
    "GET https://cdn.example/x?X-Amz-Signature=abc123&token=zzz",
    "Authorization: Bearer",
    "Bearer",
    "Basic",
    "authorization",
    ":",
    "= 'value-of-it'",
    "sEcReTtOkEn-1234567890",
    "hf_" + "a" * 24,
    "AKIA" + "B" * 16,
    "x=1",
    "plain words then Bearer",
    "Authorization",
]


def test_a_long_text_is_redacted_exactly_as_the_whole_text() -> None:
    """The block-by-block path must equal the five patterns over the whole
    text, above all where a match runs on over newlines (seeded, 300 texts
    of 40-400 lines, each past the block-wise threshold)."""
    import random

    from llmkube_stager.logs import _BLOCKWISE_MIN_CHARS, _redact_shapes

    rng = random.Random(16)
    redact = Redactor()
    filler = "x" * 80
    compared = 0
    for _ in range(300):
        lines = [rng.choice(_PIECES) for _ in range(rng.randint(40, 400))]
        lines.insert(0, filler * (_BLOCKWISE_MIN_CHARS // 80 + 1))
        text = "\n".join(lines)
        assert redact(text) == _redact_shapes(text)
        compared += text.count("Bearer") + text.count("uthorization")
    assert compared > 1000  # the run-on shapes were there to break it


def test_a_bearer_token_after_blank_lines_in_a_long_text_is_redacted() -> None:
    """Bearer, three blank lines, then the token: one match over newlines."""
    body = "\n".join(["line without markers"] * 2000)
    text = f"{body}\nAuthorization: Bearer\n\n\n   tok3n-Value-123456\n{body}"
    out = Redactor()(text)
    assert "tok3n-Value-123456" not in out
    assert out.count("line without markers") == 4000
