"""S3 and botocore failures -> contract reasons, by error code, then by HTTP
status, never by message text (ARCHITECTURE idea 3).

The two tables below are the ones docs/sources.md shows; a test keeps the
document and the code equal. A HEAD answer carries no body, so no error
code: it is mapped by its status alone (S3 throttles with `503 SlowDown`,
which is why 503 is rate limiting here, not an outage).
"""

from __future__ import annotations

from typing import Any

from llmkube_stager.errors import ConfigError, Network, Reason, SourceError, Wire, rejected

# S3 (and STS, for credentials) error codes, checked first.
ERROR_CODES: dict[str, Reason] = {
    "NoSuchKey": Reason.SOURCE_NOT_FOUND,
    "NoSuchBucket": Reason.SOURCE_NOT_FOUND,
    "NotFound": Reason.SOURCE_NOT_FOUND,
    "AccessDenied": Reason.SOURCE_UNAUTHORIZED,
    "AllAccessDisabled": Reason.SOURCE_UNAUTHORIZED,
    "InvalidAccessKeyId": Reason.SOURCE_UNAUTHORIZED,
    "SignatureDoesNotMatch": Reason.SOURCE_UNAUTHORIZED,
    "ExpiredToken": Reason.SOURCE_UNAUTHORIZED,
    "InvalidToken": Reason.SOURCE_UNAUTHORIZED,
    "TokenRefreshRequired": Reason.SOURCE_UNAUTHORIZED,
    "InvalidIdentityToken": Reason.SOURCE_UNAUTHORIZED,
    "ExpiredTokenException": Reason.SOURCE_UNAUTHORIZED,
    "IDPRejectedClaim": Reason.SOURCE_UNAUTHORIZED,
    "SlowDown": Reason.SOURCE_RATE_LIMITED,
    "Throttling": Reason.SOURCE_RATE_LIMITED,
    "ThrottlingException": Reason.SOURCE_RATE_LIMITED,
    "RequestLimitExceeded": Reason.SOURCE_RATE_LIMITED,
    "TooManyRequests": Reason.SOURCE_RATE_LIMITED,
    "PreconditionFailed": Reason.SOURCE_CHANGED,
    "InternalError": Reason.SOURCE_UNAVAILABLE,
    "ServiceUnavailable": Reason.SOURCE_UNAVAILABLE,
    "IDPCommunicationError": Reason.SOURCE_UNAVAILABLE,
}

# HTTP statuses, when the code is absent or not in ERROR_CODES; any other
# 5xx is SOURCE_UNAVAILABLE, any other status SOURCE_REJECTED.
STATUSES: dict[int, Reason] = {
    401: Reason.SOURCE_UNAUTHORIZED,
    403: Reason.SOURCE_UNAUTHORIZED,
    404: Reason.SOURCE_NOT_FOUND,
    412: Reason.SOURCE_CHANGED,
    429: Reason.SOURCE_RATE_LIMITED,
    503: Reason.SOURCE_RATE_LIMITED,
}

# Worth another attempt after a backoff (RetryBudget).
TRANSIENT: frozenset[Reason] = frozenset({Reason.SOURCE_RATE_LIMITED, Reason.SOURCE_UNAVAILABLE})


# An unsigned request refused (#46 item 6): the credentials were not found,
# so the remedy is where the agent looks for them.
REMEDY_S3_NO_CREDENTIALS = (
    "no AWS credentials were found, so the request went unsigned, which only a public bucket "
    "allows: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (from a Secret, e.g. the one the "
    "pod's envFrom names), AWS_PROFILE with the shared credentials file, or a web identity "
    "(AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE, as IRSA sets them)"
)


def reason_for(code: str, status: int) -> Reason:
    if code in ERROR_CODES:
        return ERROR_CODES[code]
    if status in STATUSES:
        return STATUSES[status]
    return Reason.SOURCE_UNAVAILABLE if status >= 500 else Reason.SOURCE_REJECTED


def status_error(code: str, status: int, text: str) -> SourceError:
    reason = reason_for(code, status)
    # What S3 said rides along as facts (the operator's matcher reads them).
    wire = Wire(http_status=status or None, s3_code=code)
    return SourceError(text, reason=reason, transient=reason in TRANSIENT, answered=True, wire=wire)


def translate_s3_error(exc: Exception, where: str) -> SourceError:
    """A botocore exception of the control path (HEAD, presign, credentials).
    A failed request names the service and endpoint it went to (the STS
    endpoint for credentials, #22 item 3) and the proxy it went through."""
    from botocore import exceptions as bex

    if isinstance(exc, SourceError):
        return exc  # ours already: Sender's (a 407 from the proxy, #22 item 6)
    where = _hop_where(exc, where)
    if isinstance(exc, bex.ClientError):
        return _client_error(exc.response, where, str(getattr(exc, "operation_name", "")))
    if isinstance(exc, bex.SSLError):
        return SourceError(
            f"TLS certificate verify failed for {where}",
            reason=Reason.SOURCE_UNTRUSTED,
            wire=_network_wire(exc, Network.TLS_UNTRUSTED),
        )
    if isinstance(exc, bex.ProxyConnectionError):
        # `where` names the proxy (Hop); botocore's text holds its URL.
        return SourceError(
            f"cannot reach the proxy for {where}",
            reason=Reason.SOURCE_UNREACHABLE,
            transient=True,
            wire=_network_wire(exc, _network_kind(exc)),
        )
    if isinstance(
        exc, bex.ConnectTimeoutError | bex.EndpointConnectionError | bex.ReadTimeoutError
    ):
        target = where if where.startswith("the ") else f"the S3 endpoint for {where}"
        return SourceError(
            f"cannot reach {target}: {_network_words(exc)}",
            reason=Reason.SOURCE_UNREACHABLE,
            transient=True,
            wire=_network_wire(exc, _network_kind(exc)),
        )
    if isinstance(exc, bex.ParamValidationError):
        # botocore refused before sending: retrying cannot help.
        raise ConfigError(f"invalid S3 request for {where}: check the bucket and key names")
    if isinstance(exc, bex.ProfileNotFound | bex.InvalidConfigError):
        raise ConfigError(f"the AWS configuration for {where} is invalid: {type(exc).__name__}")
    if isinstance(exc, bex.NoCredentialsError | bex.PartialCredentialsError):
        return SourceError(
            f"incomplete S3 credentials for {where}", reason=Reason.SOURCE_UNAUTHORIZED
        )
    if isinstance(exc, bex.CredentialRetrievalError):
        # The container endpoint or IMDS answered, without usable credentials.
        return SourceError(
            f"could not obtain AWS credentials for {where}: {type(exc).__name__}",
            reason=Reason.SOURCE_UNAUTHORIZED,
        )
    if isinstance(exc, bex.BotoCoreError):
        return SourceError(
            f"S3 request failed for {where}: {type(exc).__name__}",
            reason=Reason.SOURCE_UNREACHABLE,
            transient=True,
        )
    if _is_parse_error(exc):
        # An answer that is not S3's or STS's (a proxy's or gateway's page).
        return rejected(f"{where} answered something that is not an S3 or STS response")
    raise exc


def _is_parse_error(exc: Exception) -> bool:
    from botocore.parsers import ResponseParserError

    return isinstance(exc, ResponseParserError)


def _hop_where(exc: Exception, where: str) -> str:
    """`where` (the s3:// object), or the STS endpoint when the failed
    request was STS's, with the proxy it went through (session.Hop)."""
    from llmkube_stager.sources.s3.session import HOP_ATTRIBUTE, Hop

    hop = getattr(exc, HOP_ATTRIBUTE, None)
    if not isinstance(hop, Hop):
        return where
    text = where if hop.service == "S3" else f"the {hop.service} endpoint {hop.endpoint}"
    return text + (f" via the proxy {hop.proxy}" if hop.proxy else "")


def _network_words(exc: Exception) -> str:
    from botocore import exceptions as bex

    if isinstance(exc, bex.ConnectTimeoutError):
        return "connect timed out"
    if isinstance(exc, bex.ReadTimeoutError):
        return "timed out waiting for an answer (LLMKUBE_STALL_TIMEOUT)"
    return "could not connect"


def _network_kind(exc: Exception) -> Network | None:
    """By the types in the exception's chain, never its text."""
    import socket

    from botocore import exceptions as bex

    if isinstance(exc, bex.ConnectTimeoutError):
        return Network.CONNECT_TIMEOUT
    if isinstance(exc, bex.ReadTimeoutError):
        return Network.READ_TIMEOUT
    cause: BaseException | None = exc
    for _ in range(10):
        if cause is None:
            break
        if isinstance(cause, socket.gaierror):
            return Network.DNS
        if isinstance(cause, ConnectionRefusedError):
            return Network.REFUSED
        if isinstance(cause, ConnectionResetError):
            return Network.RESET
        nested = getattr(cause, "kwargs", {}).get("error")  # botocore keeps urllib3's here
        cause = (
            nested if isinstance(nested, BaseException) else cause.__cause__ or cause.__context__
        )
    return None


def _network_wire(exc: Exception, kind: Network | None) -> Wire:
    from urllib.parse import urlsplit

    from llmkube_stager.sources.wire.tls import cert_error

    kwargs = getattr(exc, "kwargs", {})
    # A proxy that cannot be reached is the peer (its URL comes masked).
    url = str(kwargs.get("endpoint_url") or kwargs.get("proxy_url") or "")
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80 if parts.scheme else None)
    except ValueError:
        port = None
    problem = cert_error(exc)
    return Wire(
        network=kind,
        host=parts.hostname or "",
        port=port,
        tls_problem=str(problem.verify_message or "") if problem is not None else "",
    )


def _client_error(response: Any, where: str, operation: str) -> SourceError:
    error = response.get("Error", {}) if isinstance(response, dict) else {}
    code = str(error.get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    if code == str(status):
        code = ""  # botocore names a body-less (HEAD) answer by its status
    answer = code or f"HTTP {status}"
    if operation.startswith("AssumeRole"):
        # Getting credentials failed, not the object: say which step.
        answer = f"STS {operation} answered {answer}"
    return status_error(code, status, f"{where}: {answer}")
