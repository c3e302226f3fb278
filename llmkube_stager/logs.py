"""Event logs (CONTRACT §6) on structlog, and the redaction layer every output
goes through.

`Log` is structlog's bound logger behind the call API the code uses
(`log.info(event, message, **fields)`, `.warning`, `.error`, `.bind(...)`).
One event is one line, on a processor chain:

    drop None fields -> level -> redact (every event and field) -> render

Two renderers: text (default) and JSON lines (LLMKUBE_LOG_FORMAT=json, every
field). In text, the events of `VERBATIM_EVENTS` print their message alone,
byte for byte: those are the old scripts' lines (spec §13) that users and
alerts grep with anchors (`^ERROR: failed to download <rel>$`), the
failure line the controller reads from the log tail, and the progress
lines, whose message says all their fields do. Other events are
`<message> key=value ...`, warnings prefixed `WARNING: `. Never `\\r`.
LLMKUBE_LOG_LEVEL sets the lowest level written (debug adds each HTTP
request: sources/wire/trace.py).

Import cost: `import structlog` runs its package `__init__`, which imports
every submodule (stdlib integration -> asyncio -> ssl, dev console -> rich
when installed): ~40-80 ms here, more than the warm-start budget has to spare
(docs/design.md). The bound logger needs only `structlog._base`, so that is
all that is loaded (`_load_bound_logger_base`).
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Iterable, MutableMapping
from typing import IO, TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from structlog._base import BoundLoggerBase
    from structlog.typing import Processor

Level = Literal["debug", "info", "warning", "error"]
# LLMKUBE_LOG_LEVEL: events below the level are not written.
LEVEL_RANKS: dict[Level, int] = {"debug": 0, "info": 1, "warning": 2, "error": 3}

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
# What each pattern above cannot match without (`://` for userinfo, `=` for a
# signed parameter, the scheme words, `authorization`, the token prefixes):
# text with none of these skips the five substitutions. Most lines have none
# ("Model artifact <rel> already cached, skipping download"), and a warm start
# of 2,000 files logs 2,000 of them (#16 item 3).
_MAY_HOLD_A_SECRET_RE = re.compile(
    r"://|=|Bearer|bearer|BEARER|Basic|hf_|AKIA|ASIA|(?i:authorization)"
)

_BYTE_UNITS = ("KiB", "MiB", "GiB", "TiB")

# Texts this long are redacted block by block (_redact_blockwise).
_BLOCKWISE_MIN_CHARS = 16 << 10
# Lines with text a match may run on into after its marked line.
_RUN_ON_LINES = 2

# Events of one line per file that come in bursts (a warm start of 2,000
# files writes 2,000 cache hits): a buffered log holds their lines until the
# next other line, the end of the command, or _BURST_MAX_LINES of them, and
# writes them with one write and one flush.
BURST_EVENTS = frozenset({"cache_hit", "pin_accepted", "backfilled", "revalidated_by_size"})
_BURST_MAX_LINES = 256

# Events whose text line is the message alone (see the module docstring):
# the scripts' lines, whose texts are in messages.py, and the agent's lines
# whose message already says what their fields hold (the progress lines).
VERBATIM_EVENTS = frozenset(
    {
        "cache_hit",  # Model already cached, skipping download / ... revalidated ... / kept
        "revalidate",  # Revalidating model against upstream (RefreshPolicy=OnChange)...
        "download_start",  # Downloading model... / Downloading model artifact <rel>...
        "download_done",  # Model downloaded successfully / Model revalidated (downloaded)
        "progress_script",  # Downloaded <N> MiB of <T> MiB (<P>%) (text only: script_line)
        "progress",  # <file>: <done> of <total> (<P>%), <rate>, <time left>; model: ...
        "kept",  # Revalidation unreachable; kept cached copy
        "download_failed",  # ERROR: failed to download <rel>
        "missing_and_failed",  # ERROR: model missing and revalidation failed
        "failed",  # ERROR: <Reason>: <cause>; <remedy> (the controller's line)
        "received",  # <file>: received <size> (<N> bytes) in <s> s, <rate> on average
        "http_request",  # > GET <url> | <validators> < <status> | <validators> (debug)
    }
)
# Keys every event has; the rest are its fields.
_EVENT_KEYS = ("level", "event", "msg")


class Redactor:
    """Removes known secret values and credential-shaped text from any string."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = {s for s in secrets if len(s) >= _MIN_SECRET_LEN}
        self._secrets = sorted(values, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        if _MAY_HOLD_A_SECRET_RE.search(text) is None:
            return text
        if len(text) < _BLOCKWISE_MIN_CHARS:
            return _redact_shapes(text)
        return _redact_blockwise(text)


def _redact_shapes(text: str) -> str:
    text = _USERINFO_RE.sub(rf"\1{REDACTED}@", text)
    text = _SIGNED_PARAM_RE.sub(rf"\1{REDACTED}", text)
    text = _BEARER_RE.sub(rf"\1\2{REDACTED}", text)
    text = _AUTH_HEADER_RE.sub(rf"\1{REDACTED}", text)
    return _TOKEN_SHAPES_RE.sub(REDACTED, text)


def _redact_blockwise(text: str) -> str:
    """A long text (`plan` of 2,000 files: one header line with a URL, then
    lines without any marker) redacted block by block: only the lines that
    may hold a secret go through the five patterns, with what may follow
    them. Every match starts on a line holding its marker (the scheme's
    `://`, `=`, the word, the token prefix); only `Bearer`'s and
    `authorization:`'s whitespace can run on into later lines, over blank
    lines and at most two lines with text (`authorization` / `:` / value),
    so a block runs to the second line with text after its last marked
    line. The result equals _redact_shapes of the whole text
    (tests/unit/test_redaction.py compares them); the whole text took
    ~40 ms of a 2,000-file `plan` (#16)."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if _MAY_HOLD_A_SECRET_RE.search(lines[i]) is None:
            out.append(lines[i])
            i += 1
            continue
        end, texts_after = i + 1, 0
        while end < len(lines) and texts_after < _RUN_ON_LINES:
            if _MAY_HOLD_A_SECRET_RE.search(lines[end]) is not None:
                texts_after = 0
            elif lines[end].strip():
                texts_after += 1
            end += 1
        out.append(_redact_shapes("\n".join(lines[i:end])))
        i = end
    return "\n".join(out)


def human_bytes(nbytes: float) -> str:
    """`512 B`, `1.2 MiB`, `40.0 GiB`: one decimal, binary units (the
    scripts' lines count MiB)."""
    if nbytes < 1024:
        return f"{nbytes:.0f} B"
    value = nbytes / 1024
    for unit in _BYTE_UNITS[:-1]:
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_BYTE_UNITS[-1]}"


def display_url(url: str) -> str:
    """A URL fit for humans: no userinfo, no query string, no fragment."""
    base = url.split("#", 1)[0].split("?", 1)[0]
    return _USERINFO_RE.sub(r"\1", base)


# -- processors (structlog's signature: logger, method name, event dict) -----------------

EventDict = MutableMapping[str, Any]


def drop_none(_logger: object, _method: str, event: EventDict) -> EventDict:
    for key in [k for k, v in event.items() if v is None]:
        del event[key]
    return event


def add_level(_logger: object, method: str, event: EventDict) -> EventDict:
    event["level"] = method
    return event


class RedactAll:
    """Every event name, message and field value through the Redactor;
    numbers and booleans stay numbers, anything else becomes its redacted text."""

    def __init__(self, redact: Redactor) -> None:
        self.redact = redact

    def __call__(self, _logger: object, _method: str, event: EventDict) -> EventDict:
        for key, value in event.items():
            if key != "level" and not isinstance(value, bool | int | float):
                event[key] = self.redact(str(value))
        return event


def render_text(_logger: object, _method: str, event: EventDict) -> str:
    message = str(event["msg"])
    if event["event"] in VERBATIM_EVENTS:
        return _one_line(message)
    prefix = "WARNING: " if event["level"] == "warning" else ""
    fields = (f"{k}={_quote(v)}" for k, v in event.items() if k not in _EVENT_KEYS)
    return " ".join([_one_line(prefix + message), *fields])


def render_json(_logger: object, _method: str, event: EventDict) -> str:
    record: dict[str, Any] = {"ts": _timestamp(time.time())}
    record.update((k, event[k]) for k in _EVENT_KEYS)
    record.update((k, v) for k, v in event.items() if k not in _EVENT_KEYS)
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _timestamp(now_s: float) -> str:
    """UTC with milliseconds: lines a progress interval apart must sort and
    subtract (`2026-12-07T23:10:04.250Z`)."""
    whole_s = int(now_s)
    millis = int((now_s - whole_s) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole_s)) + f".{millis:03d}Z"


def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def _quote(value: object) -> str:
    text = _one_line(str(value))
    if text and not any(c in text for c in ' "='):
        return text
    return json.dumps(text, ensure_ascii=False)


# -- the logger ----------------------------------------------------------------------------


class _Framed:
    """The last processor: the renderer's line, and whether its event is one
    of a burst (structlog passes `(args, kwargs)` on to the sink)."""

    def __init__(self, renderer: Processor) -> None:
        self.renderer = renderer

    def __call__(self, logger: Any, method: str, event: EventDict) -> Any:
        burst = event["event"] in BURST_EVENTS
        return (self.renderer(logger, method, event),), {"burst": burst}


class _Sink:
    """What structlog's bound logger hands the rendered line to, under a lock
    (progress comes from a ticker thread). Unbuffered, one write and flush per
    line; buffered, the lines of a burst wait (see BURST_EVENTS) and any other
    line writes them first, so a line is never later than the next other one
    or the end of the command (`flush`)."""

    def __init__(self, stream: IO[str], buffered: bool) -> None:
        self._stream = stream
        self._buffered = buffered
        self._lock = threading.Lock()
        self._pending: list[str] = []

    def write_line(self, line: str, burst: bool = False) -> None:
        with self._lock:
            self._pending.append(line + "\n")
            if not (self._buffered and burst and len(self._pending) < _BURST_MAX_LINES):
                self._write_pending()

    info = warning = error = debug = write_line

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                self._write_pending()

    def _write_pending(self) -> None:
        text = "".join(self._pending)
        self._pending.clear()
        self._stream.write(text)
        self._stream.flush()


class Log:
    """The event log; see the module docstring. Cheap to copy with `bind`."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        fmt: str = "text",
        redact: Redactor | None = None,
        *,
        buffered: bool = False,
        level: Level = "info",
        _bound: tuple[BoundLoggerBase, _Sink] | None = None,
    ) -> None:
        """`buffered` (the boundary's log) lets the lines of a burst wait for one
        write (see BURST_EVENTS); whoever makes such a log calls `flush` at
        the end of the command. `level`: the lowest level written."""
        self._redact = redact or Redactor()
        self.level = level
        self._min_rank = LEVEL_RANKS[level]
        # A text line of a VERBATIM event is its redacted message alone, so
        # the processor chain (which redacts every field too) is skipped for
        # it: 2,000 cache hits were a tenth of a 2,000-file warm start (#16).
        self._verbatim_text = fmt == "text"
        if _bound is None:
            renderer: Processor = render_json if fmt == "json" else render_text
            processors: list[Processor] = [
                drop_none,
                add_level,
                RedactAll(self._redact),
                _Framed(renderer),
            ]
            sink = _Sink(stream if stream is not None else sys.stderr, buffered)
            _bound = (_load_bound_logger_base()(sink, processors=processors, context={}), sink)
        self._bound, self._sink = _bound

    @property
    def redact(self) -> Redactor:
        return self._redact

    def bind(self, **fields: object) -> Log:
        """A log whose every event carries these fields too (e.g. file=,
        attempt=): in JSON always, in text on the agent's own lines."""
        fmt = "text" if self._verbatim_text else "json"
        bound = (self._bound.bind(**fields), self._sink)
        return Log(fmt=fmt, redact=self._redact, level=self.level, _bound=bound)

    def flush(self) -> None:
        """Write the lines a buffered log holds (the end of a command)."""
        self._sink.flush()

    @property
    def debugging(self) -> bool:
        """Whether debug events are written (callers skip building them)."""
        return self._min_rank == 0

    def debug(self, event: str, message: str, **fields: object) -> None:
        self.emit("debug", event, message, fields)

    def info(self, event: str, message: str, **fields: object) -> None:
        self.emit("info", event, message, fields)

    def warning(self, event: str, message: str, **fields: object) -> None:
        self.emit("warning", event, message, fields)

    def error(self, event: str, message: str, **fields: object) -> None:
        self.emit("error", event, message, fields)

    def script_line(self, event: str, message: str) -> None:
        """A line of the old scripts that text logs keep whole (spec §13)
        where the agent now says more in an event beside it: JSON logs carry
        that event's fields instead, and no second record of the same fact."""
        if self._verbatim_text and self._min_rank <= LEVEL_RANKS["info"]:
            self.emit("info", event, message, {})

    def emit(self, level: Level, event: str, message: str, fields: dict[str, object]) -> None:
        if LEVEL_RANKS[level] < self._min_rank:
            return
        if self._verbatim_text and event in VERBATIM_EVENTS:
            line = _one_line(self._redact(message))
            self._sink.write_line(line, burst=event in BURST_EVENTS)
            return
        self._bound._proxy_to_logger(level, event, msg=message, **fields)


def _load_bound_logger_base() -> type[BoundLoggerBase]:
    """structlog's `BoundLoggerBase` (public as structlog.BoundLoggerBase),
    loaded without running the package's `__init__`, which would import all
    of structlog (asyncio, ssl, logging, and rich when installed) for a
    class that needs `sys` and `collections.abc`.

    While the submodule loads, the package is a module made from its spec
    but not executed; afterwards every `structlog` module is taken out of
    `sys.modules` again, so that a later `import structlog` (a test, a
    library) is a normal, complete import. If structlog ever moves the class,
    the plain import below still works."""
    if "structlog" not in sys.modules:
        import importlib.util

        spec = importlib.util.find_spec("structlog")
        if spec is not None and spec.submodule_search_locations is not None:
            sys.modules["structlog"] = importlib.util.module_from_spec(spec)
            try:
                from structlog._base import BoundLoggerBase as Base

                return Base
            except ImportError:
                pass
            finally:
                for name in [n for n in sys.modules if n.partition(".")[0] == "structlog"]:
                    del sys.modules[name]
    import structlog

    return structlog.BoundLoggerBase
