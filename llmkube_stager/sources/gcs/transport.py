"""The control requests of a gs:// source (listing, object metadata, and
google-auth's token requests) on the agent's own connections: our trust
store (LLMKUBE_CA_DIR), proxies (HTTPS_PROXY/NO_PROXY) and timeouts, as
every other client of the agent (#33 item 1). The bytes go by the engine
(source.py); this module moves small JSON answers only.

`AuthTransport` is google-auth's `transport.Request` over these
connections, so a service-account key's token exchange and the metadata
server are asked like everything else, with no `requests` stack.
"""

from __future__ import annotations

from typing import Any

from llmkube_stager.sources.wire.connection import ConnectionPool
from llmkube_stager.sources.wire.control import Answer, ControlError, call


def auth_transport(pool: ConnectionPool) -> Any:
    """google-auth's `Request` over `pool` (google-auth imported here)."""
    import importlib

    from google.auth import transport

    exceptions: Any = importlib.import_module("google.auth.exceptions")

    class _Response(transport.Response):
        def __init__(self, answer: Answer) -> None:
            self._answer = answer

        @property
        def status(self) -> int:
            return self._answer.status

        @property
        def headers(self) -> dict[str, str]:
            return self._answer.headers

        @property
        def data(self) -> bytes:
            return self._answer.data

    class AuthTransport(transport.Request):
        # The status of the last answer: a refusal is told from an outage by it.
        last_status: int | None = None

        def __call__(
            self,
            url: str,
            method: str = "GET",
            body: bytes | str | None = None,
            headers: dict[str, str] | None = None,
            timeout: float | None = None,
            **kwargs: Any,
        ) -> _Response:
            raw = body.encode() if isinstance(body, str) else body
            if kwargs.get("cert") is not None:
                # Mutual TLS is refused when the file is read; never sent without.
                raise exceptions.TransportError("a client certificate is not supported")
            try:
                answer = call(pool, method, url, dict(headers or {}), raw)
            except ControlError as err:
                # google-auth retries a TransportError (the metadata server);
                # its text is ours, without the request's body or headers.
                raise exceptions.TransportError(err.error.detail) from None
            self.last_status = answer.status
            return _Response(answer)

    return AuthTransport()
