"""botocore for the S3 control path, fed only what config/ collected.

boto3's default credential chain is what pods use (#12): static keys,
IRSA (`AWS_ROLE_ARN` + `AWS_WEB_IDENTITY_TOKEN_FILE`), a profile of the shared
credentials/config files (`AWS_PROFILE`), container credentials (EKS Pod
Identity, ECS) and instance metadata, in botocore's order. botocore reads
`os.environ` by default; here every provider and the configuration store get
`Config.aws_env` instead (the project's rule: config/ is the only reader of
the environment), which also keeps in-process tests hermetic.

`AWS_ENDPOINT_URL` is the *S3* endpoint in this contract (the operator sets
it for S3 alone), so it is never handed to botocore as its global endpoint:
STS goes to `AWS_ENDPOINT_URL_STS`, or to AWS's regional STS.

Every request of every client of the session (S3, and the STS clients the
credential providers make for IRSA and assumed roles) is sent by `Sender`,
from botocore's documented `before-send` event (#22 items 2, 3, 6):
- through the proxy the agent decided for that request's URL
  (`ProxySettings.for_url`, CIDR and all), or direct: botocore would read
  HTTP(S)_PROXY/NO_PROXY from the process environment itself, without CIDR
  support, and send the web identity token and signed requests through a
  proxy the user excluded;
- trusting the system roots plus LLMKUBE_CA_DIR (the bundle file), STS
  included, with the connect and stall timeouts;
- a 407 from the proxy is `ProxyUnauthorized` at once, and every failure
  carries which service and endpoint it was (`Hop`), so an STS failure
  names the STS endpoint, not the s3:// object.
"""

from __future__ import annotations

import posixpath
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from llmkube_stager.errors import Reason, SourceError, proxy_unauthorized
from llmkube_stager.proxy import Proxy, ProxySettings

HOP_ATTRIBUTE = "llmkube_hop"


@dataclass(frozen=True)
class Hop:
    """Which request failed: set on a botocore exception by `Sender`."""

    service: str  # "S3", "STS"
    endpoint: str  # scheme://host[:port], no userinfo, path or query
    proxy: str  # "host:port" of the proxy it went through, or ""


class Sender:
    """Sends botocore's requests: one decision per URL, one trust, one set of
    timeouts, for every client (#22 items 2, 3)."""

    def __init__(
        self,
        proxies: ProxySettings,
        ca_bundle: Callable[[], str | None],
        connect_s: float,
        stall_s: float,
    ) -> None:
        self._proxies = proxies
        self._ca_bundle = ca_bundle
        self._timeout = (connect_s, stall_s)
        self._lock = threading.Lock()
        self._sessions: dict[Proxy | None, Any] = {}

    def attach(self, client: Any) -> None:
        service = client.meta.service_model.service_id.hyphenize()
        label = service.upper()

        def send(request: Any, **_: Any) -> Any:
            return self.send(request, label)

        client.meta.events.register(f"before-send.{service}", send)

    def send(self, request: Any, label: str) -> Any:
        parts = urlsplit(request.url)
        endpoint = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
        proxy = self._proxies.for_full_url(request.url)
        hop = Hop(label, endpoint, proxy.display if proxy is not None else "")
        try:
            response = self._session(proxy).send(request)
        except Exception as exc:
            status = _connect_status(exc) if proxy is not None else None
            if proxy is not None and status == 407:
                raise self._refused(hop, proxy) from None
            if proxy is not None and status is not None:
                raise SourceError(
                    f"the {hop.service} endpoint {hop.endpoint} via the proxy {proxy.display}: "
                    f"the proxy answered {status} to CONNECT",
                    reason=Reason.SOURCE_UNREACHABLE,
                    transient=True,
                ) from None
            setattr(exc, HOP_ATTRIBUTE, hop)
            raise
        if proxy is not None and response.status_code == 407:
            raise self._refused(hop, proxy)  # a plain http request, answered by the proxy
        return response

    def metadata_session(self, url: str, timeout_s: float) -> Any:
        """A session of its own (instance metadata keeps its short timeout)
        through the proxy decided for `url`, never the environment's."""
        from botocore.httpsession import URLLib3Session

        proxy = self._proxies.for_full_url(url)
        proxies = {"http": proxy.url(), "https": proxy.url()} if proxy is not None else {}
        return URLLib3Session(timeout=timeout_s, proxies=proxies)

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.close()

    def _refused(self, hop: Hop, proxy: Proxy) -> Exception:
        where = f"the {hop.service} endpoint {hop.endpoint} via the proxy {proxy.display}"
        return proxy_unauthorized(where, credentials_sent=proxy.authorization() is not None)

    def _session(self, proxy: Proxy | None) -> Any:
        from botocore.httpsession import URLLib3Session

        with self._lock:
            session = self._sessions.get(proxy)
            if session is None:
                bundle = self._ca_bundle()
                session = URLLib3Session(
                    verify=bundle if bundle is not None else True,
                    # The agent's decision (botocore's EndpointCreator would
                    # take the environment's when a client has none).
                    proxies={"http": proxy.url(), "https": proxy.url()} if proxy else {},
                    timeout=self._timeout,
                    socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
                )
                # TCP, CONNECT and TLS within one connect timeout (#29 item
                # 4). The dict is botocore's own (1.32 to today), shared by
                # its pool manager and every proxy manager it makes.
                session._pool_classes_by_scheme.update(_bounded_pools(self._timeout[0]))
                self._sessions[proxy] = session
        return session


def _bounded_pools(connect_s: float) -> dict[str, type[Any]]:
    """botocore's connection pools, each connection's whole set-up bounded
    by `connect_s` (#29 item 4): urllib3 applies its connect timeout to each
    read of the CONNECT answer and of the TLS handshake."""
    from botocore.awsrequest import AWSHTTPConnectionPool, AWSHTTPSConnectionPool
    from urllib3.exceptions import ConnectTimeoutError

    from llmkube_stager.sources.wire.setup import SetupDeadline, SetupTimeout, bounded_setup

    def bounded(base: type[Any]) -> type[Any]:
        class Bounded(base):  # type: ignore[misc]
            _setup: SetupDeadline | None = None

            def connect(self) -> None:
                try:
                    with bounded_setup(connect_s) as deadline:
                        self._setup = deadline
                        super().connect()
                except SetupTimeout as exc:
                    # What botocore reports as ConnectTimeoutError.
                    raise ConnectTimeoutError(self, str(exc)) from exc
                finally:
                    self._setup = None

            def _new_conn(self) -> socket.socket:
                sock: socket.socket = super()._new_conn()
                if self._setup is not None:
                    self._setup.watch(sock)
                return sock

        return Bounded

    class HTTPPool(AWSHTTPConnectionPool):  # type: ignore[misc]
        ConnectionCls = bounded(AWSHTTPConnectionPool.ConnectionCls)

    class HTTPSPool(AWSHTTPSConnectionPool):  # type: ignore[misc]
        ConnectionCls = bounded(AWSHTTPSConnectionPool.ConnectionCls)

    return {"http": HTTPPool, "https": HTTPSPool}


def _connect_status(exc: BaseException) -> int | None:
    """The status of a CONNECT the proxy refused. urllib3 (http.client's
    tunnel) says it only in an OSError's text, "Tunnel connection failed:
    <status> <reason>": the one place that reads it."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return None
        text = str(seen)
        marker = "Tunnel connection failed: "
        if isinstance(seen, OSError) and marker in text:
            digits = text.split(marker, 1)[1][:3]
            return int(digits) if digits.isdigit() else None
        nested = getattr(seen, "kwargs", {}).get("error")  # botocore keeps urllib3's here
        if isinstance(nested, BaseException):
            seen = nested
        else:
            seen = getattr(seen, "original_error", None) or seen.__cause__ or seen.__context__
    return None


# The profile name under which the IRSA variables are handed to botocore's
# web identity provider (a synthetic profile: it never reads os.environ).
_ENV_WEB_IDENTITY = "llmkube-environment"


def botocore_env(aws_env: Mapping[str, str]) -> dict[str, str]:
    """The variables botocore may read, with "~/.aws" resolved against the
    HOME that config/ saw (botocore would expand "~" from os.environ)."""
    env = {k: v for k, v in aws_env.items() if k != "HOME"}
    home = aws_env.get("HOME", "")
    for name, default in (
        ("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"),
        ("AWS_CONFIG_FILE", ".aws/config"),
    ):
        if name not in env:
            # No HOME: a path that cannot exist, never the process's "~".
            env[name] = posixpath.join(home, default) if home else f"/nonexistent/{default}"
    return env


def _stdlib_tls_only() -> None:
    """Keep botocore off pyOpenSSL. botocore's httpsession imports
    urllib3.contrib.pyopenssl when it can, only to take the standard
    library's SSLContext back out of it (`orig_util_SSLContext`): the same
    class either way. model-signing (#34) installs pyOpenSSL, and that
    import then loads OpenSSL and cryptography, about 11 MiB of RSS on every
    S3 run (tests/sources/test_s3.py::test_an_s3_run_never_loads_pyopenssl).
    A None entry makes the import fail as it did before, and botocore takes
    the class from urllib3.util.ssl_; nothing else imports that module
    (requests does only on a Python without SNI)."""
    import sys

    if "urllib3.contrib.pyopenssl" not in sys.modules and "botocore.httpsession" not in sys.modules:
        sys.modules["urllib3.contrib.pyopenssl"] = None  # type: ignore[assignment]


def make_session(env: Mapping[str, str], sts_endpoint: str | None, sender: Sender) -> Any:
    """A botocore session whose configuration and credentials come from
    `env`, and whose clients' requests `sender` sends."""
    _stdlib_tls_only()
    import botocore.session
    from botocore import configprovider as cp

    class _Session(botocore.session.Session):  # type: ignore[misc]
        def create_client(self, service_name: str, *args: Any, **kwargs: Any) -> Any:
            # Credential providers create their STS clients through here.
            client = super().create_client(
                service_name, *args, **_client_kwargs(service_name, sts_endpoint, kwargs)
            )
            sender.attach(client)
            return client

    session = _Session()
    chain = cp.ConfigChainFactory(session=session, environ=dict(env))
    mapping = _config_chains(chain, cp.BOTOCORE_DEFAUT_SESSION_VARIABLES)
    mapping["s3"] = cp.SectionConfigProvider(
        "s3", session, _config_chains(chain, cp.DEFAULT_S3_CONFIG_VARS)
    )
    session.register_component("config_store", cp.ConfigValueStore(mapping=mapping))
    # Built on first use: the caller reads the profile first (a missing one
    # is a configuration error, which the resolver would only hit midway).
    session.lazy_register_component(
        "credential_provider", lambda: _credential_resolver(session, env, sender)
    )
    return session


def _config_chains(chain: Any, variables: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: chain.create_config_chain(
            instance_name=name,
            env_var_names=spec[1],
            config_property_names=spec[0],
            default=spec[2],
            conversion_func=spec[3],
        )
        for name, spec in variables.items()
    }


def _client_kwargs(
    service_name: str, sts_endpoint: str | None, kwargs: dict[str, Any]
) -> dict[str, Any]:
    """Never the endpoints botocore would look up in os.environ or the
    config file (`AWS_ENDPOINT_URL` is ours, for S3): an explicit one, or
    AWS's own."""
    from botocore.config import Config as BotoConfig

    merged = dict(kwargs)
    if service_name == "sts" and sts_endpoint and not merged.get("endpoint_url"):
        merged["endpoint_url"] = sts_endpoint
    # proxies={}: the client's own session is never used (Sender sends),
    # and never reads the environment either.
    ignore = BotoConfig(ignore_configured_endpoint_urls=True, proxies={})
    given = merged.get("config")
    if given is None or given.retries is None:
        # The credential providers' STS clients too: botocore never retries,
        # the agent's RetryBudget does (#12 item 4); stacked, a silent STS took
        # 3 x 3 stalls (#22 item 4).
        given = BotoConfig(retries={"total_max_attempts": 1, "mode": "standard"}).merge(
            given or BotoConfig()
        )
    merged["config"] = given.merge(ignore)
    return merged


def _credential_resolver(session: Any, env: Mapping[str, str], sender: Sender) -> Any:
    """botocore's default chain (credentials.create_credential_resolver),
    every provider reading `env`."""
    from botocore import credentials as bc

    profile = session.get_config_variable("profile") or "default"
    cache: dict[str, Any] = {}
    env_keys = bc.EnvProvider(environ=env)
    container = bc.ContainerProvider(environ=env)
    metadata = _instance_metadata(session, env, sender)
    builder = bc.ProfileProviderBuilder(session, cache=cache)
    assume_role = bc.AssumeRoleProvider(
        load_config=lambda: session.full_config,
        client_creator=session.create_client,
        cache=cache,
        profile_name=profile,
        credential_sourcer=bc.CanonicalNameCredentialSourcer([env_keys, container, metadata]),
        profile_provider_builder=builder,
    )
    web_identity = bc.AssumeRoleWithWebIdentityProvider(
        load_config=lambda: {"profiles": {_ENV_WEB_IDENTITY: _web_identity_settings(env)}},
        client_creator=session.create_client,
        profile_name=_ENV_WEB_IDENTITY,
        cache=cache,
        disable_env_vars=True,
    )
    profile_providers = builder.providers(profile_name=profile, disable_env_vars=True)
    providers = [env_keys, assume_role, web_identity, *profile_providers, container, metadata]
    return bc.CredentialResolver(providers=providers)


def _web_identity_settings(env: Mapping[str, str]) -> dict[str, str]:
    names = {
        "role_arn": "AWS_ROLE_ARN",
        "web_identity_token_file": "AWS_WEB_IDENTITY_TOKEN_FILE",
        "role_session_name": "AWS_ROLE_SESSION_NAME",
    }
    return {key: env[name] for key, name in names.items() if env.get(name)}


def _instance_metadata(session: Any, env: Mapping[str, str], sender: Sender) -> Any:
    from botocore import credentials as bc
    from botocore.utils import InstanceMetadataFetcher, resolve_imds_endpoint_mode

    config = {
        "ec2_metadata_service_endpoint": session.get_config_variable(
            "ec2_metadata_service_endpoint"
        ),
        "ec2_metadata_service_endpoint_mode": resolve_imds_endpoint_mode(session),
        "ec2_metadata_v1_disabled": session.get_config_variable("ec2_metadata_v1_disabled"),
    }
    timeout_s = session.get_config_variable("metadata_service_timeout")
    fetcher = InstanceMetadataFetcher(
        timeout=timeout_s,
        num_attempts=session.get_config_variable("metadata_service_num_attempts"),
        user_agent=session.user_agent(),
        config=config,
        env=dict(env),
    )
    # botocore built its session with the proxies of os.environ (its NO_PROXY
    # has no CIDR blocks): the agent's decision instead (#22 item 2). The
    # attribute is botocore's own (IMDSFetcher, 1.32 to today); the fetcher
    # takes no session argument.
    fetcher._session = sender.metadata_session(fetcher.get_base_url(), float(timeout_s))
    return bc.InstanceMetadataProvider(iam_role_fetcher=fetcher)
