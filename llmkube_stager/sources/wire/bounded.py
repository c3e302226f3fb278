"""Numbers from the wire, read with a bound (#29 item 8).

A header's number is text an origin, a CDN or a proxy chose: Python's
int() refuses a string of more than 4,300 digits (ValueError), float() of
an int of more than 308 digits overflows, and a size of 400 digits is
arithmetic on nothing real. Every decimal the agent reads from an answer
(Content-Length, Content-Range, Retry-After, the RateLimit fields) goes
through `wire_int`: at most MAX_DIGITS significant digits, as curl reads
a curl_off_t; a longer one makes the answer a bad one
(ModelSourceRejected, exit 4: the same hop answers the same way), whose
words name the header and how many digits it had, never the value.
Pure; the callers that know which URL answered put it in front.
"""

from __future__ import annotations

from llmkube_stager.errors import Reason, SourceError

# Below 2**63 (curl's curl_off_t), far beyond any size (an exabyte) or wait
# (31 billion years) an origin means.
MAX_DIGITS = 18


class AbsurdNumber(SourceError):
    """An answer with a number beyond MAX_DIGITS. Constructed as any
    SourceError (callers copy errors by their type); built by `absurd`."""

    def at(self, where: str) -> AbsurdNumber:
        """The same error, saying which URL answered."""
        self.detail = f"{where} {self.detail}"
        self.args = (self.detail,)
        return self


def absurd(header: str, digits: int) -> AbsurdNumber:
    return AbsurdNumber(
        f"answered with a {header} of {digits} digits: no number an origin means (the agent "
        f"reads at most {MAX_DIGITS})",
        reason=Reason.SOURCE_REJECTED,
        answered=True,
    )


def wire_int(text: str | None, header: str) -> int | None:
    """A decimal from header `header` (ASCII digits only, surrounding
    whitespace aside: a latin-1 '²' passes str.isdigit, int() takes '1_0'
    and '+1'); None when it is no such number. Raises AbsurdNumber past
    MAX_DIGITS significant digits."""
    text = (text or "").strip()
    if not (text.isascii() and text.isdigit()):
        return None
    significant = text.lstrip("0")
    if len(significant) > MAX_DIGITS:
        raise absurd(header, len(text))
    return int(significant or "0")
