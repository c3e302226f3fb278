"""Event logs (CONTRACT §6) and the redaction layer every output goes through.

Text by default (`<message> key=value ...`, one event a line, never `\\r`),
JSON lines with LLMKUBE_LOG_FORMAT=json. Messages keep the old scripts' lines
(spec §13) verbatim so that users' greps keep working.

structlog was the planned library, but importing it costs ~79 ms here (it pulls
in asyncio), half of the 150 ms warm-start budget; this ~100-line logger costs
nothing to import and gives the same two renderers (docs/design.md).
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Iterable
from typing import IO, Literal

Level = Literal["debug", "info", "warning", "error"]

REDACTED = "***"
_MIN_SECRET_LEN = 4
# Query parameters that carry signatures or credentials in presigned/CDN URLs.
_SIGNED_PARAM_RE = re.compile(
    r"(?i)([?&;](?:x-amz-[a-z0-9-]*|x-goog-[a-z0-9-]*|signature|sig|token|access_token"
    r"|api_key|apikey|key|policy|key-pair-id|se|sp|sv|sr|skoid|sktid|credential)=)[^&\s\"'<>]*"
)
_USERINFO_RE = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^/@\s\"'<>]+@")
_BEARER_RE = re.compile(r"\b(Bearer|bearer|BEARER|Basic)(\s+)[A-Za-z0-9._~+/=-]{4,}")
_AUTH_HEADER_RE = re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)[^'\"\r\n,}]+")
_TOKEN_SHAPES_RE = re.compile(r"\b(hf_[A-Za-z0-9]{20,}|(?:AKIA|ASIA)[0-9A-Z]{16})\b")


class Redactor:
    """Removes known secret values and credential-shaped text from any string."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = {s for s in secrets if len(s) >= _MIN_SECRET_LEN}
        self._secrets = sorted(values, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        text = _USERINFO_RE.sub(rf"\1{REDACTED}@", text)
        text = _SIGNED_PARAM_RE.sub(rf"\1{REDACTED}", text)
        text = _BEARER_RE.sub(rf"\1\2{REDACTED}", text)
        text = _AUTH_HEADER_RE.sub(rf"\1{REDACTED}", text)
        return _TOKEN_SHAPES_RE.sub(REDACTED, text)


def display_url(url: str) -> str:
    """A URL fit for humans: no userinfo, no query string, no fragment."""
    base = url.split("#", 1)[0].split("?", 1)[0]
    return _USERINFO_RE.sub(r"\1", base)


class Log:
    """Writes events to a stream. Thread-safe (progress is reported from a
    ticker thread); every field goes through the redactor."""

    def __init__(
        self, stream: IO[str] | None = None, fmt: str = "text", redact: Redactor | None = None
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._json = fmt == "json"
        self._redact = redact or Redactor()
        self._lock = threading.Lock()

    @property
    def redact(self) -> Redactor:
        return self._redact

    def info(self, event: str, message: str, **fields: object) -> None:
        self.emit("info", event, message, fields)

    def warning(self, event: str, message: str, **fields: object) -> None:
        self.emit("warning", event, message, fields)

    def error(self, event: str, message: str, **fields: object) -> None:
        self.emit("error", event, message, fields)

    def emit(self, level: Level, event: str, message: str, fields: dict[str, object]) -> None:
        clean = {k: self._clean(v) for k, v in fields.items() if v is not None}
        line = self._render(level, event, self._redact(message), clean)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()

    def _clean(self, value: object) -> object:
        if isinstance(value, bool | int | float):
            return value
        return self._redact(str(value))

    def _render(self, level: Level, event: str, message: str, fields: dict[str, object]) -> str:
        if self._json:
            record: dict[str, object] = {
                "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "level": level,
                "event": event,
                "msg": message,
            }
            record.update(fields)
            return json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        prefix = "WARNING: " if level == "warning" else ""
        parts = [prefix + message.replace("\r", " ").replace("\n", " ")]
        parts.extend(f"{k}={_quote(v)}" for k, v in fields.items())
        return " ".join(parts)


def _quote(value: object) -> str:
    text = str(value).replace("\r", " ").replace("\n", " ")
    if text and not any(c in text for c in ' "='):
        return text
    return json.dumps(text, ensure_ascii=False)
