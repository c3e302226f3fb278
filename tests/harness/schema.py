"""The controller's side of the termination message (#13 item 6): every
message the suite produces is read the way a controller would, against
`schema/termination.v1.json`.

`validate_termination(raw)` takes the bytes as written (the kubelet reads
bytes), checks the size, the encoding and the schema, and returns the parsed
object, so a test's `json.loads(raw)` becomes `validate_termination(raw)`.
Within the suite it is stricter than the schema in one way: a member the
schema does not name fails, so a new field is added to the schema first.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schema" / "termination.v1.json"
# CONTRACT §5; the kubelet keeps the last 4096 bytes of the file.
MAX_TERMINATION_BYTES = 4096


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator: jsonschema.protocols.Validator = cls(schema)
    return validator


def schema() -> dict[str, Any]:
    return dict(_validator().schema)


def validate_termination(raw: bytes | None) -> dict[str, Any]:
    """The parsed termination message; AssertionError naming what is wrong."""
    assert raw is not None, "no termination message was written"
    assert len(raw) <= MAX_TERMINATION_BYTES, f"{len(raw)} bytes: the kubelet would cut it"
    try:
        doc = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise AssertionError(f"termination message is not UTF-8 JSON ({exc}): {raw!r}") from None
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, (
        "termination message breaks the schema:\n"
        + "\n".join(f"  at /{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)
        + f"\n{raw!r}"
    )
    unknown = set(doc) - set(_validator().schema["properties"])
    assert not unknown, f"members the schema does not name: {sorted(unknown)}\n{raw!r}"
    stats = doc.get("stats", {})
    unknown_stats = set(stats) - set(_validator().schema["$defs"]["stats"]["properties"])
    assert not unknown_stats, f"stats the schema does not name: {sorted(unknown_stats)}"
    return dict(doc)


def checked_termination(raw: bytes | None) -> bytes | None:
    """`raw` unchanged after validating it (None: nothing was written), for
    the runners that read the file, so that no message escapes the check."""
    if raw is not None:
        validate_termination(raw)
    return raw
