"""Small control requests on the agent's own connections: one request, its
whole bounded answer, no redirect followed (a JSON API, a token endpoint,
an OCI registry's manifest). The trust store (LLMKUBE_CA_DIR), proxies and
timeouts are the pool's, as for every other client of the agent. Moved here
from the gs:// source when oci:// needed the same (#43).
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any

from llmkube_stager.errors import SourceError, rejected
from llmkube_stager.logs import display_url
from llmkube_stager.sources.wire.connection import ConnectionPool
from llmkube_stager.sources.wire.errors import translate_network_error
from llmkube_stager.sources.wire.status import USER_AGENT, Origin

# A listing page of 1,000 objects with the fields asked is ~200 KiB; a
# token answer is small. More is not a JSON API answer.
MAX_ANSWER_BYTES = 16 << 20


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # lower-case names
    data: bytes

    def get(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class ControlError(Exception):
    """The connection failed (not an HTTP answer); `error` is ours."""

    def __init__(self, error: SourceError) -> None:
        super().__init__(error.detail)
        self.error = error


def call(
    pool: ConnectionPool,
    method: str,
    url: str,
    headers: dict[str, str],
    body: bytes | None = None,
) -> Answer:
    """One request and its whole (bounded) answer; ControlError when no
    answer came. No redirect is followed: the JSON API and token endpoints
    answer in place."""
    origin = Origin.of(url)
    target, proxy_headers = pool.request_form(url)
    sent = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **headers, **proxy_headers}
    try:
        conn, _ = pool.take(origin, fresh=True)
    except SourceError as err:  # the connect failed (refused, DNS, timeout, TLS)
        raise ControlError(err) from None
    try:
        conn.request(method, target, body=body, headers=sent)
        resp = conn.getresponse()
        data = resp.read(MAX_ANSWER_BYTES + 1)
    except (OSError, http.client.HTTPException) as exc:
        conn.close()
        raise ControlError(
            translate_network_error(exc, display_url(url), "request", origin)
        ) from None
    if len(data) > MAX_ANSWER_BYTES or not resp.isclosed():
        conn.close()
    else:
        pool.give_back(origin, conn)
    return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)


def json_of(answer: Answer, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(answer.data)
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict):
        raise rejected(f"{where} answered with something that is not a JSON object")
    return doc
