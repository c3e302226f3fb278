"""Forward proxies from the environment, as curl (the old scripts) used them.

`HTTPS_PROXY`/`https_proxy` for https origins, `HTTP_PROXY`/`http_proxy` for
http ones (lowercase wins when both are set), `NO_PROXY`/`no_proxy` for the
hosts that go direct. Clusters behind an egress proxy set these on every
pod; the scripts' curl honoured them, so the agent must too, on every path:
the HEAD probe (httpx), the data path (http.client: CONNECT tunnel for
https, absolute-form requests for http), the Hugging Face API client and
botocore's S3 and STS clients. Each takes this module's decision for its
URL (`ProxySettings.for_url`) and is kept from reading the variables itself
(httpx `trust_env=False`; botocore an explicit `proxies`, empty when the
answer is "direct"): their own NO_PROXY matching has no CIDR blocks, so a
host the user excluded would go through the proxy (#22 item 2).

Only `http://` proxies (the usual kind; curl's default scheme when none is
given). Credentials in the proxy URL are secrets: the redactor knows them,
and a proxy is only ever displayed as `host:port`.

NO_PROXY entries: `*` (everything), a host name (that host and its
subdomains; a leading `.` or `*.` is the same), `host:port`, an IP address
(IPv6 bare or bracketed, `[::1]:8080` with a port) or CIDR block
(`10.0.0.0/8`, as Kubernetes clusters list their pod and service ranges).
Pure: the environment is read by config/.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class ProxyConfigError(ValueError):
    """A proxy variable that cannot be used; the message never holds its value."""


@dataclass(frozen=True)
class Proxy:
    """One forward proxy; its credentials are secrets (`secrets`)."""

    host: str
    port: int
    username: str = field(default="", repr=False)
    password: str = field(default="", repr=False)

    @property
    def display(self) -> str:
        return f"{self.host}:{self.port}"

    def authorization(self) -> str | None:
        """The Proxy-Authorization value (Basic), when credentials are set."""
        if not self.username and not self.password:
            return None
        import base64

        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode("ascii")
        return f"Basic {token}"

    def url(self) -> str:
        """For httpx's `proxy=`: credentials as given."""
        from urllib.parse import quote

        host = f"[{self.host}]" if ":" in self.host else self.host
        if not self.username and not self.password:
            return f"http://{host}:{self.port}"
        userinfo = f"{quote(self.username, safe='')}:{quote(self.password, safe='')}"
        return f"http://{userinfo}@{host}:{self.port}"

    def secrets(self) -> tuple[str, ...]:
        auth = self.authorization()
        values = (self.password, auth.split(" ", 1)[1] if auth else "")
        return tuple(v for v in values if v)


@dataclass(frozen=True)
class ProxySettings:
    """The proxy for each scheme of origin, and the hosts that go direct."""

    https: Proxy | None = None
    http: Proxy | None = None
    no_proxy: tuple[str, ...] = ()

    def for_url(self, scheme: str, host: str, port: int) -> Proxy | None:
        proxy = self.https if scheme.lower() == "https" else self.http
        if proxy is None or bypassed(host, port, self.no_proxy):
            return None
        return proxy

    @property
    def any(self) -> bool:
        return self.https is not None or self.http is not None

    def for_full_url(self, url: str) -> Proxy | None:
        """The decision for a whole URL (botocore's endpoints)."""
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError:
            port = 443 if scheme == "https" else 80
        return self.for_url(scheme, parts.hostname or "", port)


def parse_proxy(text: str, name: str) -> Proxy | None:
    """A proxy variable's value; None when empty. Raises ProxyConfigError."""
    text = text.strip()
    if not text:
        return None
    # Imported here: most pods have no proxy, and config/ is on the warm path.
    from urllib.parse import unquote, urlsplit

    if "://" not in text:
        text = "http://" + text  # curl's default
    try:
        parts = urlsplit(text)
        port = parts.port or 80
    except ValueError:
        raise ProxyConfigError(f"{name} is not a valid proxy URL") from None
    if parts.scheme.lower() != "http":
        raise ProxyConfigError(f"{name}: only http:// proxies are supported")
    if not parts.hostname:
        raise ProxyConfigError(f"{name} has no proxy host")
    return Proxy(
        host=parts.hostname,
        port=port,
        username=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
    )


def parse_no_proxy(text: str) -> tuple[str, ...]:
    """NO_PROXY entries; a CIDR that is not one (`10.0.0.0/99`) would
    silently match nothing, so it is a configuration error."""
    entries = tuple(e.strip().lower() for e in text.replace(" ", ",").split(",") if e.strip())
    for entry in entries:
        if "/" in entry:
            _check_cidr(entry)
    return entries


def _check_cidr(entry: str) -> None:
    import ipaddress

    try:
        ipaddress.ip_network(entry.replace("[", "").replace("]", ""), strict=False)
    except ValueError:
        raise ProxyConfigError(f"NO_PROXY entry {entry[:100]!r} is not a valid CIDR") from None


def bypassed(host: str, port: int, entries: tuple[str, ...]) -> bool:
    host = host.strip("[]").lower().rstrip(".")
    return any(_matches(host, port, entry) for entry in entries)


def _matches(host: str, port: int, entry: str) -> bool:
    if entry == "*":
        return True
    if entry.startswith("["):
        # `[::1]`, `[::1]:8080` (#22 item 2: the port never matched before).
        address, _, rest = entry[1:].partition("]")
        if rest.startswith("/"):  # `[fd00::]/8`
            return _ip_in(host, address + rest)
        if rest and not (rest.startswith(":") and rest[1:] == str(port)):
            return False
        return _ip_in(host, address)
    if "/" in entry or _is_ip(entry.strip("[]")):
        return _ip_in(host, entry.strip("[]"))
    name, _, entry_port = entry.rpartition(":") if _has_port(entry) else (entry, "", "")
    if entry_port and entry_port != str(port):
        return False
    name = name.removeprefix("*").lstrip(".").rstrip(".")
    return bool(name) and (host == name or host.endswith("." + name))


def _has_port(entry: str) -> bool:
    head, sep, tail = entry.rpartition(":")
    return bool(sep) and tail.isdigit() and ":" not in head


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _ip_in(host: str, entry: str) -> bool:
    import ipaddress

    try:
        address = ipaddress.ip_address(host)
        network = ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False
    return address.version == network.version and address in network
