"""The transport of the httpx clients (the HEAD probe, and the Hugging Face
API client, which speaks httpx2: the same API, passed in as `hx`).

httpx's own environment handling is off (`trust_env=False`: config/ is
the only reader of the environment, and httpx's NO_PROXY has no CIDR
blocks), so the transport routes each request by `ProxySettings.for_url`,
the same decision the data path makes (connection.py).

It also holds the two things no caller may undo (#22):
- the timeouts: huggingface_hub passes `timeout=None` to its requests,
  which overrides the client's timeouts and lets a silent hub, mirror or
  proxy tunnel hang the pod (item 4); each request here is bounded by the
  connect and stall timeouts whatever it asked for;
- a 407 from the proxy, on CONNECT or to a plain request, is
  `ProxyUnauthorized` at once (item 6), never a retried "ProxyError".
"""

from __future__ import annotations

import re
from typing import Any

from llmkube_stager.errors import Reason, SourceError, proxy_unauthorized
from llmkube_stager.logs import display_url
from llmkube_stager.proxy import Proxy, ProxySettings
from llmkube_stager.sources.wire.setup import SetupDeadline, SetupTimeout

_DEFAULT_PORTS = {"http": 80, "https": 443}
# httpcore reports a refused CONNECT as ProxyError("<status> <reason>"): the
# status is in no attribute, so this is the one place that reads it.
_CONNECT_STATUS_RE = re.compile(r"\s*(\d{3})\b")


def routing_transport(
    hx: Any,
    proxies: ProxySettings,
    verify: Any,
    *,
    timeouts: tuple[float, float] | None = None,
) -> Any | None:
    """A transport for `hx.Client(transport=...)`; None without proxies and
    without `timeouts` ((connect_s, stall_s): the bound of every request)."""
    if not proxies.any and timeouts is None:
        return None
    direct = hx.HTTPTransport(verify=verify, trust_env=False)
    proxied: dict[Proxy, Any] = {
        proxy: hx.HTTPTransport(verify=verify, trust_env=False, proxy=proxy.url())
        for proxy in {proxies.https, proxies.http}
        if proxy is not None
    }

    class _Routing(hx.BaseTransport):  # type: ignore[misc]
        def handle_request(self, request: Any) -> Any:
            if timeouts is None:
                return self._route(request)
            # TCP, CONNECT and TLS within one connect timeout (#29 item 4):
            # httpcore bounds each read of the CONNECT answer by itself.
            trace = _SetupTrace(timeouts[0], request.extensions.get("trace"))
            request.extensions["trace"] = trace
            try:
                return self._route(request)
            except Exception:
                if not trace.expired:
                    raise
                # Never raised itself: the innermost cause, which the
                # hub's error translation classifies (probe.root_cause).
                cause = SetupTimeout(timeouts[0])
                raise hx.ConnectTimeout(str(cause), request=request) from cause
            finally:
                trace.done()

        def _route(self, request: Any) -> Any:
            url = request.url
            port = url.port or _DEFAULT_PORTS.get(url.scheme, 80)
            proxy = proxies.for_url(url.scheme, url.host, port)
            if timeouts is not None:
                request.extensions["timeout"] = _bounded(request.extensions, timeouts)
            if proxy is None:
                return direct.handle_request(request)
            where = f"{display_url(str(url))} via the proxy {proxy.display}"
            sent = proxy.authorization() is not None
            try:
                response = proxied[proxy].handle_request(request)
            except hx.ProxyError as exc:
                match = _CONNECT_STATUS_RE.match(str(exc))
                if match is None:
                    raise
                if match.group(1) == "407":
                    raise proxy_unauthorized(where, credentials_sent=sent) from None
                # A 502/503 of the proxy: what it said, retried like an
                # unreachable origin (never a bare "ProxyError").
                raise SourceError(
                    f"{where}: the proxy answered {str(exc).strip()[:80]} to CONNECT",
                    reason=Reason.SOURCE_UNREACHABLE,
                    transient=True,
                ) from None
            if response.status_code == 407:  # a plain http request, answered by the proxy
                response.close()
                raise proxy_unauthorized(where, credentials_sent=sent)
            return response

        def close(self) -> None:
            direct.close()
            for transport in proxied.values():
                transport.close()

    return _Routing()


class _SetupTrace:
    """httpcore's documented `trace` extension, driving one request's
    SetupDeadline: begun with the TCP connect, armed on its socket, done
    when TLS is up or, over plain http, when the first request that is not
    a CONNECT goes out. A request on a kept-alive connection sets up
    nothing. Calls the request's own trace too, if it had one."""

    def __init__(self, connect_s: float, chained: Any) -> None:
        self._connect_s = connect_s
        # httpx hands a redirect the first request's extensions: never a
        # deadline of that request's, which nothing would end.
        self._chained: Any = chained._chained if isinstance(chained, _SetupTrace) else chained
        self._deadline: SetupDeadline | None = None

    def __call__(self, event: str, info: dict[str, Any]) -> None:
        if self._chained is not None:
            self._chained(event, info)
        if event.endswith("connect_tcp.started"):
            self._deadline = SetupDeadline(self._connect_s)
        elif self._deadline is None:
            return
        elif event.endswith("connect_tcp.complete"):
            sock = info["return_value"].get_extra_info("socket")
            if sock is not None:
                self._deadline.watch(sock)
        elif event.endswith("start_tls.complete") or (
            event.endswith("send_request_headers.started")
            and getattr(info.get("request"), "method", b"") != b"CONNECT"
        ):
            self._deadline.done()

    @property
    def expired(self) -> bool:
        return self._deadline is not None and self._deadline.expired

    def done(self) -> None:
        if self._deadline is not None:
            self._deadline.done()


def _bounded(extensions: dict[str, Any], timeouts: tuple[float, float]) -> dict[str, float]:
    """The request's own timeouts, none longer than ours and none unset."""
    connect_s, stall_s = timeouts
    ours = {"connect": connect_s, "read": stall_s, "write": stall_s, "pool": connect_s}
    given = extensions.get("timeout") or {}
    return {
        key: limit if given.get(key) is None else min(float(given[key]), limit)
        for key, limit in ours.items()
    }
