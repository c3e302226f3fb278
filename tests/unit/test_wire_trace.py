"""sources/wire/trace.traced_url: the URL a debug line shows (#46 item 5):
no userinfo, no fragment, every query value `***` whatever its name."""

from __future__ import annotations

import pytest

from llmkube_stager.sources.wire.trace import auth_scheme, traced_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://h/m.gguf", "https://h/m.gguf"),
        ("https://u:pw@h:8443/m.gguf#frag", "https://h:8443/m.gguf"),
        (
            "https://acct.blob.core.windows.net/c/m?sv=2024&sig=abc%2Fdef&se=2026",
            "https://acct.blob.core.windows.net/c/m?sv=***&sig=***&se=***",
        ),
        (
            "https://h/m?X-Amz-Signature=abc&X-Amz-Credential=AKIA/x",
            "https://h/m?X-Amz-Signature=***&X-Amz-Credential=***",
        ),
        ("https://h/m?code=unknown-secret&flag", "https://h/m?code=***&flag"),
        ("https://h/m?a=1&&b=", "https://h/m?a=***&b=***"),
    ],
)
def test_traced_url(url: str, shown: str) -> None:
    assert traced_url(url) == shown


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, None),
        ("Bearer hf_abcdefghijklmnopqrstuvwxyz", "Bearer"),
        ("AWS4-HMAC-SHA256 Credential=AKIA/x, Signature=abc", "AWS4-HMAC-SHA256"),
        ("bare-token-without-a-scheme", "other"),  # the first word may be the secret
    ],
)
def test_only_the_schemes_word_is_shown(value: str | None, shown: str | None) -> None:
    assert auth_scheme(value) == shown
