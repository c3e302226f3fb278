"""The reader's rules: a variable is its flag, else the environment (with
KServe's variables mapped on: kserve_env.py), else its default; the kinds
of value (a number of seconds, a count, a choice, a tolerated interval);
and `shown`, the one way a value is quoted in a message."""

from __future__ import annotations

import math
from collections.abc import Mapping

from llmkube_stager.config.kserve_env import with_kserve
from llmkube_stager.config.variables import DEFAULTS
from llmkube_stager.errors import ConfigError


def shown(value: str) -> str:
    """A value for a message: quoted, or only its length when long. Never a
    prefix: a cut secret would escape the redactor, which knows whole values
    (and a Secret's keys reach the pod through envFrom). The one helper for
    every value config quotes (#32 item 2: paths were cut at 200 characters)."""
    text = repr(value)
    return text if len(text) <= 80 else f"<{len(value)} characters>"


class Reader:
    """Looks a variable up: flag first, then environment, then default."""

    def __init__(
        self, environ: Mapping[str, str], flags: Mapping[str, str | None], *, kserve: bool = True
    ) -> None:
        self._environ = with_kserve(environ) if kserve else environ
        self._flags = flags
        self.warnings: list[str] = []

    def tolerated(self, name: str, value: str, meaning: str) -> None:
        """A value the scripts accepted: keep their meaning, say so."""
        self.warnings.append(f"{name}={shown(value)} is not valid; {meaning}, as the scripts did")

    def optional(self, name: str) -> str | None:
        """The value, or None when neither flag nor variable is set at all
        (a pin variable set to "" must fail closed, not read as absent)."""
        flagged = self._flags.get(name)
        return flagged if flagged is not None else self._environ.get(name)

    def curl_style(self, name: str) -> str:
        """A flag, else the lowercase variable, else the uppercase one (curl)."""
        flagged = self._flags.get(name)
        if flagged is not None:
            return flagged
        lower = self._environ.get(name.lower())
        return lower if lower is not None else self._environ.get(name, "")

    def raw(self, name: str) -> str:
        """As given, else the default when neither flag nor variable is set
        (a variable set to "" stays "")."""
        flagged = self._flags.get(name)
        if flagged is not None:
            return flagged
        return self._environ.get(name, DEFAULTS.get(name, ""))

    def text(self, name: str) -> str:
        """Stripped; the default when unset or blank."""
        return self.raw(name).strip() or DEFAULTS.get(name, "")

    def number(self, name: str, *, minimum: float = 0.0) -> float:
        text = self.text(name)
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{name} must be a number of seconds, got {shown(text)}") from None
        if not math.isfinite(value) or value <= minimum:
            raise ConfigError(
                f"{name} must be a finite number above {minimum:g}, got {shown(text)}"
            )
        return value

    def count(self, name: str) -> int:
        text = self.text(name)
        if not (text.isascii() and text.isdigit()):
            raise ConfigError(f"{name} must be a whole number >= 0, got {shown(text)}")
        return int(text)

    def choice(self, name: str, choices: tuple[str, ...]) -> str:
        text = self.text(name)
        for choice in choices:
            if text.lower() == choice.lower():
                return choice
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {shown(text)}")

    def interval(self, name: str) -> float:
        """Seconds where the scripts fell back to their default on anything
        that is not a positive number (`${PROGRESS_INTERVAL:-10}`)."""
        try:
            return self.number(name)
        except ConfigError:
            default = float(DEFAULTS[name])
            self.tolerated(name, self.raw(name), f"using the default {default:g} s")
            return default
