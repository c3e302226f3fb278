"""Forward proxies for the httpx clients (the HEAD probe, and the Hugging
Face API client, which speaks httpx2: the same API, passed in as `hx`).

httpx's own environment handling is off (`trust_env=False`: config.py is
the only reader of the environment, and httpx's NO_PROXY has no CIDR
blocks), so a transport routes each request by `ProxySettings.for_url`, the
same decision the data path makes (http_wire.py).
"""

from __future__ import annotations

from typing import Any

from llmkube_stager.proxy import Proxy, ProxySettings

_DEFAULT_PORTS = {"http": 80, "https": 443}


def routing_transport(hx: Any, proxies: ProxySettings, verify: Any) -> Any | None:
    """A transport for `hx.Client(transport=...)`; None without proxies."""
    if proxies.https is None and proxies.http is None:
        return None
    direct = hx.HTTPTransport(verify=verify, trust_env=False)
    proxied: dict[Proxy, Any] = {
        proxy: hx.HTTPTransport(verify=verify, trust_env=False, proxy=proxy.url())
        for proxy in {proxies.https, proxies.http}
        if proxy is not None
    }

    class _Routing(hx.BaseTransport):  # type: ignore[misc]
        def handle_request(self, request: Any) -> Any:
            url = request.url
            port = url.port or _DEFAULT_PORTS.get(url.scheme, 80)
            proxy = proxies.for_url(url.scheme, url.host, port)
            transport = proxied[proxy] if proxy is not None else direct
            return transport.handle_request(request)

        def close(self) -> None:
            direct.close()
            for transport in proxied.values():
                transport.close()

    return _Routing()
