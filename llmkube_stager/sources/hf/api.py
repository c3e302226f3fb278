"""The hub API through `huggingface_hub`: one `model_info(files_metadata=True)`
per run, and the translation of its answers into contract reasons.

The mapping is by type and HTTP status (never by message text), with the
hub's `X-Error-Code` header where the status alone would lie. docs/
sources.md holds the table; tests/sources/test_hf_doc.py replays every
row of it against the fake hub through the real client.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llmkube_stager.config import Config
from llmkube_stager.errors import (
    REMEDY_GATED,
    ConfigError,
    Reason,
    SourceError,
    Wire,
    proxy_unauthorized,
)
from llmkube_stager.logs import display_url
from llmkube_stager.proxy import Proxy
from llmkube_stager.sources.deps import HF_HUB, release, require
from llmkube_stager.sources.hf.ref import HfRef
from llmkube_stager.sources.wire.bounded import MAX_DIGITS, AbsurdNumber
from llmkube_stager.sources.wire.ratelimit import check_waits, rate_limit_wait_s
from llmkube_stager.sources.wire.status import MAX_REDIRECTS, next_hop, status_error

if TYPE_CHECKING:
    import ssl

# What a server without the hub API (a static mirror, a caching proxy that
# only serves /resolve/) answers to /api/models/...: the real hub sets an
# X-Error-Code on every 404 of that route (RepoNotFound, RevisionNotFound).
_NO_API_STATUSES = frozenset({404, 405, 501})


@dataclass(frozen=True)
class HubFile:
    size_bytes: int | None
    sha256: str | None  # LFS files only
    blob_id: str | None


@dataclass(frozen=True)
class Resolution:
    commit: str
    files: dict[str, HubFile]


class HubApiAbsent(SourceError):
    """The endpoint answered the API route like a server that has none."""


def resolve_revision(
    config: Config, ref: HfRef, ssl_context: Callable[[], ssl.SSLContext]
) -> Resolution:
    """model_info(revision, files_metadata=True) through huggingface_hub,
    with our trust store, proxy and timeouts; its errors become SourceErrors."""
    version = require(HF_HUB)
    try:
        import huggingface_hub
        from huggingface_hub import constants
    except ImportError as exc:
        raise ConfigError(
            f"{HF_HUB.dist} {version} is installed but cannot be imported "
            f"({type(exc).__name__}); reinstall it"
        ) from None
    # No telemetry: its agent detection GETs <endpoint>/api/agent-harnesses
    # without our timeouts and writes under $HOME (found by the fake hub).
    constants.HF_HUB_DISABLE_TELEMETRY = True
    context = ssl_context() if ref.endpoint.lower().startswith("https") else None
    huggingface_hub.set_client_factory(lambda: _hub_client(config, context, version))
    token = config.secrets.hf_token
    api = huggingface_hub.HfApi(endpoint=ref.endpoint, token=token or False)
    proxy = config.proxy.for_full_url(ref.endpoint)
    try:
        info = api.model_info(ref.repo, revision=ref.revision, files_metadata=True)
    except SourceError:
        raise  # already ours: the transport's (a 407 from the proxy, #22 item 6)
    except Exception as exc:
        raise translate_hub_error(exc, ref, token_sent=bool(token), proxy=proxy) from exc
    try:
        files = _hub_files(info.siblings or [])
    except AbsurdNumber as err:
        raise err.at(f"{ref.repo}@{ref.revision} on {display_url(ref.endpoint)}") from None
    return Resolution(commit=info.sha or ref.revision, files=files)


def close_hub_session() -> None:
    """Close the client set_client_factory made, if the library was ever
    imported (a missing or too-old one never is: `plan --probe` still closes)."""
    import sys

    if "huggingface_hub" not in sys.modules:
        return
    from huggingface_hub import close_session

    close_session()


def _hub_client(config: Config, context: ssl.SSLContext | None, version: str) -> Any:
    """The hub's HTTP client with our trust store, proxy decision and
    timeouts, from the library that release speaks: httpx2 from 2.0 on,
    httpx in 1.x (both may be installed; handing 1.x an httpx2 client
    breaks its error types). The transport enforces the timeouts per
    request: huggingface_hub passes `timeout=None`, which would override
    the client's (#22 item 4)."""
    hx: Any = importlib.import_module("httpx2" if release(version) >= ((2,), 0) else "httpx")
    from llmkube_stager.sources.wire.httpx_proxy import routing_transport

    timeouts = config.timeouts
    verify = context if context is not None else True
    return hx.Client(
        verify=verify,
        transport=routing_transport(
            hx, config.proxy, verify, timeouts=(timeouts.connect_s, timeouts.stall_s)
        ),
        timeout=hx.Timeout(timeouts.stall_s, connect=timeouts.connect_s),
        follow_redirects=True,
        # The data path's rules for redirects (#29 item 10): at most 10, and
        # only to http(s), each refused as ModelSourceRejected, never retried.
        max_redirects=MAX_REDIRECTS,
        # #29 item 8 first: a wait that holds no bounded number is refused
        # before anything else reads it.
        event_hooks={"response": [_bounded_waits, _check_redirect]},
        trust_env=False,
    )


def _check_redirect(response: Any) -> None:
    """An httpx response hook, run before the client follows a redirect:
    a target that is not http(s) is refused as the data path refuses it
    (status.next_hop), nothing sent to it (#29 item 10)."""
    location = response.headers.get("location")
    if response.is_redirect and location is not None:
        next_hop(str(response.url), location)


def _bounded_waits(response: Any) -> None:
    """#29 item 8: huggingface_hub reads a 429's `RateLimit` with int(),
    which raises past 4,300 digits. Every wait an answer carries is read
    here first, with the bound, before the library sees the answer: one
    beyond it is a bad answer (raised through the library as ours)."""
    try:
        check_waits(response.headers.get)
    except AbsurdNumber as err:
        where = f"{display_url(str(response.request.url))} returned HTTP {response.status_code},"
        raise err.at(where) from None


def _hub_files(siblings: list[Any]) -> dict[str, HubFile]:
    files = {}
    for sibling in siblings:
        lfs = getattr(sibling, "lfs", None)
        sha = getattr(lfs, "sha256", None)
        # An LFS file's own size is lfs.size; the sibling's size is the
        # same on the hub, but only lfs.size is documented as the file's.
        size = getattr(lfs, "size", None)
        if not isinstance(size, int):
            size = getattr(sibling, "size", None)
        if isinstance(size, int) and not 0 <= size < 10**MAX_DIGITS:
            # #29 item 8: JSON holds integers of up to 4,300 digits, and signs.
            what = "a negative number" if size < 0 else f"a number of {len(str(size))} digits"
            raise AbsurdNumber(
                f"answered with {what} as the size of {sibling.rfilename!r} in its model info: "
                "no file's size",
                reason=Reason.SOURCE_REJECTED,
                answered=True,
            )
        files[sibling.rfilename] = HubFile(
            size_bytes=size if isinstance(size, int) else None,
            sha256=sha.lower() if isinstance(sha, str) else None,
            blob_id=getattr(sibling, "blob_id", None),
        )
    return files


def translate_hub_error(
    exc: Exception, ref: HfRef, *, token_sent: bool, proxy: Proxy | None = None
) -> SourceError:
    """By type first (huggingface_hub's own classes), then by HTTP status and
    the hub's X-Error-Code header. `proxy`: the one the API call went
    through, named in the error."""
    from huggingface_hub import errors

    where = f"{ref.repo}@{ref.revision} on {display_url(ref.endpoint)}"
    if proxy is not None:
        where += f" via the proxy {proxy.display}"
    if isinstance(exc, errors.GatedRepoError):
        return SourceError(
            f"{where} is gated: accept its terms on the hub with the account of HF_TOKEN",
            reason=Reason.SOURCE_UNAUTHORIZED,
            answered=True,
            remedy=REMEDY_GATED,  # #22 item 7: not "check the token"
        )
    if isinstance(exc, errors.HfHubHTTPError):
        return _status_based(exc, where, token_sent)
    if isinstance(exc, _too_many_redirects()):
        # A loop or an endless chain answers the same way every time
        # (#29 item 10): rejected, as on the data path, not retried.
        return SourceError(
            f"{where}: more than {MAX_REDIRECTS} redirects",
            reason=Reason.SOURCE_REJECTED,
            answered=True,
        )
    if isinstance(exc, ValueError | KeyError | TypeError):
        # A 2xx whose body is not model info: not JSON (JSONDecodeError is a
        # ValueError), or JSON without the fields ModelInfo reads.
        return SourceError(
            f"{where}: the hub API answered something that is not model info",
            reason=Reason.SOURCE_REJECTED,
            answered=True,
        )
    return _transport_error(exc, where)


def _too_many_redirects() -> tuple[type[BaseException], ...]:
    """TooManyRedirects of the httpx releases in use (httpx, httpx2)."""
    import sys

    modules = (sys.modules.get(name) for name in ("httpx", "httpx2"))
    return tuple(m.TooManyRedirects for m in modules if m is not None)


def _status_based(exc: Exception, where: str, token_sent: bool) -> SourceError:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if not isinstance(status, int):
        return SourceError(
            f"{where}: {type(exc).__name__}", reason=Reason.SOURCE_REJECTED, answered=True
        )
    headers = getattr(response, "headers", {})
    code = headers.get("x-error-code")
    text = f"{where} returned HTTP {status}" + (f" ({code})" if code else "")
    if status == 407:
        # No proxy of ours in the way (the transport answers for those): one
        # the cluster put there wants credentials (#22 item 6).
        return proxy_unauthorized(where, credentials_sent=False)
    if status in _NO_API_STATUSES and not code:
        return HubApiAbsent(text, reason=Reason.SOURCE_NOT_FOUND, answered=True)
    if status == 401 and not token_sent:
        # The hub answers 401 RepoNotFound to anonymous callers for a private
        # or gated repo AND for a missing one: it will not say which. The
        # one thing that can change the answer is a token.
        return SourceError(
            f"{text} to a request without a token: the repo is private or gated (set HF_TOKEN "
            "in the source secret), or it does not exist",
            reason=Reason.SOURCE_UNAUTHORIZED,
            answered=True,
            # The status as a fact: today's controller finds "returned error:
            # 401" in the condition, as it did in curl's line (#30 item 3).
            wire=Wire(http_status=status),
        )
    if status == 404 and code == "RepoNotFound":
        text += ": no such repo, or the token cannot see it"
    elif status == 401:
        text += ": the hub did not accept HF_TOKEN"
    error = status_error(status, headers.get, where)
    if isinstance(error, AbsurdNumber):
        return error  # #29 item 8: its words say which header (the response hook reads first)
    wait_s = error.retry_after_s
    if status == 429 and wait_s is None:
        wait_s = rate_limit_wait_s(headers.get)
    # Built anew, never changed in place (#32 item 5).
    return error.amended(detail=text, retry_after_s=wait_s)


def _transport_error(exc: BaseException, where: str) -> SourceError:
    from llmkube_stager.sources.wire.errors import translate_network_error
    from llmkube_stager.sources.wire.probe import root_cause

    return translate_network_error(root_cause(exc), where, "hub API request")
