"""Network failures -> `SourceError`, by type (never by message text).

Every transport of the package reports a failure here: the http.client
data path and HEAD (connection.py, exchange.py), the httpx probe
(probe.py) and the hub client (hf/api.py). The error carries the host and
port connected to (the origin, or the proxy) as a fact, from which
errors.operator_phrase gives the operator's matcher curl's words.
"""

from __future__ import annotations

import socket

from llmkube_stager.errors import Network, Reason, SourceError, Wire, proxy_unauthorized
from llmkube_stager.sources.wire.setup import SetupTimeout
from llmkube_stager.sources.wire.status import Origin
from llmkube_stager.sources.wire.tls import cert_error


def translate_network_error(
    exc: BaseException, where: str, phase: str, peer: Origin | None = None
) -> SourceError:
    """OSError / http.client errors -> SourceError, by type (never by text).
    `peer` (the host and port connected to: the origin, or the proxy) goes
    into the error's facts, from which errors.operator_phrase gives the
    operator's matcher curl's words."""
    if isinstance(exc, ProxyRefused):
        return proxy_refused(f"{exc.status} {exc.reason}", where, phase)
    if isinstance(exc, SetupTimeout):  # whatever the phase: the set-up's bound (#29 item 4)
        return timeout_error("connect", where, peer)
    if isinstance(exc, TimeoutError):
        return timeout_error(phase, where, peer)
    cert = cert_error(exc)
    if cert is not None:
        wire = _wire(Network.TLS_UNTRUSTED, peer, tls_problem=str(cert.verify_message or ""))
        return SourceError(
            f"TLS certificate verify failed for {where}", reason=Reason.SOURCE_UNTRUSTED, wire=wire
        )
    kind: Network | None = None
    if isinstance(exc, socket.gaierror):
        kind, text = Network.DNS, f"could not resolve host for {where}"
    elif isinstance(exc, ConnectionRefusedError):
        kind, text = Network.REFUSED, f"connection refused by {where}"
    else:
        kind = Network.RESET if isinstance(exc, ConnectionResetError) else None
        text = f"{phase} failed for {where}: {type(exc).__name__}"
    return SourceError(
        text, reason=Reason.SOURCE_UNREACHABLE, transient=True, wire=_wire(kind, peer)
    )


def timeout_error(phase: str, where: str, peer: Origin | None) -> SourceError:
    """No connection within the connect timeout, or no byte within the stall
    timeout on an established one."""
    kind = Network.CONNECT_TIMEOUT if phase == "connect" else Network.READ_TIMEOUT
    return SourceError(
        f"{phase} timed out for {where}",
        reason=Reason.SOURCE_UNREACHABLE,
        transient=True,
        wire=_wire(kind, peer),
    )


def _wire(kind: Network | None, peer: Origin | None, tls_problem: str = "") -> Wire:
    if peer is None:
        return Wire(network=kind, tls_problem=tls_problem)
    return Wire(network=kind, host=peer.host, port=peer.port, tls_problem=tls_problem)


class ProxyRefused(OSError):
    """A forward proxy answered CONNECT with a non-2xx status (its status
    line holds no secret)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"the proxy answered CONNECT with {status} {reason}")
        self.status = status
        self.reason = reason


def proxy_refused(status_line: str, where: str, phase: str) -> SourceError:
    """A proxy answered its own error (CONNECT refused, 407, 502). Wrong
    proxy credentials do not fix themselves: no retries for a 407."""
    status_line = status_line.strip()
    if status_line.startswith("407"):  # #22 item 6: exit 4, the credentials named
        return proxy_unauthorized(f"{phase} failed for {where}", credentials_sent=None)
    return SourceError(
        f"{phase} failed for {where}: the proxy answered {status_line}",
        reason=Reason.SOURCE_UNREACHABLE,
        transient=not status_line.startswith("407"),
    )
