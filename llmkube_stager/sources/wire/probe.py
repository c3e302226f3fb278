"""The control path: a HEAD probe through httpx (size, ETag, Accept-Ranges and
the final URL after redirects). httpx is imported here, lazily, so a warm
start never pays for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from llmkube_stager.config import Timeouts
from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.logs import display_url
from llmkube_stager.proxy import ProxySettings
from llmkube_stager.sources.base import RemoteMeta
from llmkube_stager.sources.wire.bounded import AbsurdNumber
from llmkube_stager.sources.wire.errors import (
    proxy_refused,
    timeout_error,
    translate_network_error,
)
from llmkube_stager.sources.wire.status import (
    MAX_REDIRECTS,
    REDIRECT_STATUSES,
    USER_AGENT,
    AuthPolicy,
    Origin,
    content_length,
    next_hop,
    status_error,
)

if TYPE_CHECKING:
    import ssl

    import httpx

# HEAD refused where GET may work: method not allowed / not implemented, or a
# presigned URL signed for GET only (403 on HEAD). The GET then decides.
_HEAD_UNSUPPORTED = frozenset({405, 501})


def make_client(
    timeouts: Timeouts, ssl_context: ssl.SSLContext | None, proxies: ProxySettings | None = None
) -> httpx.Client:
    import httpx

    from llmkube_stager.sources.wire.httpx_proxy import routing_transport

    verify = ssl_context if ssl_context is not None else True
    return httpx.Client(
        verify=verify,
        transport=routing_transport(
            httpx,
            proxies or ProxySettings(),
            verify,
            timeouts=(timeouts.connect_s, timeouts.stall_s),  # the set-up's bound too (#29 item 4)
        ),
        timeout=httpx.Timeout(
            connect=timeouts.connect_s,
            read=timeouts.stall_s,
            write=timeouts.stall_s,
            pool=timeouts.connect_s,
        ),
        follow_redirects=False,
        trust_env=False,
        headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
    )


def unknown_meta(url: str) -> RemoteMeta:
    return RemoteMeta(url=url, size_bytes=None, etag=None, accept_ranges=False)


def strong(etag: str | None) -> str | None:
    """Only a strong validator may go into If-Range (RFC 9110 §13.1.5)."""
    return etag if etag and not etag.startswith("W/") else None


def probe_head(
    client: httpx.Client, url: str, auth: AuthPolicy, proxies: ProxySettings | None = None
) -> RemoteMeta:
    first_url = url
    for _ in range(MAX_REDIRECTS + 1):
        response = _head(client, url, auth.headers_for(url, first_url), proxies)
        if response.status_code in REDIRECT_STATUSES and "location" in response.headers:
            # httpx would send a Location's own userinfo: credentials come
            # from AuthPolicy only (#11 item 13).
            url = next_hop(url, response.headers["location"])
            continue
        return _meta_from(response, url)
    raise SourceError(
        f"too many redirects from {display_url(first_url)}",
        reason=Reason.SOURCE_REJECTED,
        answered=True,
    )


def _head(
    client: httpx.Client, url: str, headers: dict[str, str], proxies: ProxySettings | None
) -> httpx.Response:
    import httpx

    where = display_url(url)
    origin = Origin.of(url)
    proxy = proxies.for_url(origin.scheme, origin.host, origin.port) if proxies else None
    peer = origin
    if proxy is not None:
        where += f" via the proxy {proxy.display}"
        peer = Origin(origin.scheme, proxy.host, proxy.port)
    try:
        return client.head(url, headers=headers)
    except httpx.ProxyError as exc:
        raise proxy_refused(str(exc), where, "probe") from exc
    except httpx.TimeoutException as exc:
        phase = "connect" if isinstance(exc, httpx.ConnectTimeout) else "probe"
        raise timeout_error(phase, where, peer) from exc
    except httpx.TransportError as exc:
        raise translate_network_error(root_cause(exc), where, "probe", peer) from exc


def root_cause(exc: BaseException) -> BaseException:
    """httpx wraps the socket/ssl error; classify by the innermost one."""
    current = exc
    for _ in range(10):
        inner = current.__cause__ or current.__context__
        if inner is None:
            break
        current = inner
    return current


def _meta_from(response: httpx.Response, url: str) -> RemoteMeta:
    return meta_from(response.status_code, response.headers, url)


def meta_from(status: int, headers: Mapping[str, str], url: str) -> RemoteMeta:
    """What a HEAD's answer says (headers: case-insensitive or lowercase)."""
    if 200 <= status < 300:
        etag = headers.get("etag")
        try:
            size = content_length(headers.get)
        except AbsurdNumber as err:
            raise err.at(display_url(url)) from None  # #29 item 8
        return RemoteMeta(
            url=url,
            size_bytes=size,
            etag=etag,
            accept_ranges=headers.get("accept-ranges", "").strip().lower() == "bytes",
            if_range=strong(etag) or headers.get("last-modified"),
        )
    if status in _HEAD_UNSUPPORTED or (status == 403 and urlsplit(url).query):
        return unknown_meta(url)
    raise status_error(status, headers.get, display_url(url))
