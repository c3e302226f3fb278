"""Azure Blob failures -> contract reasons and remedies (#33 item 2), by
HTTP status, never by message text (ARCHITECTURE idea 3).

A 401/403 names what the user set (the remedy of `Credential.name`), a
404 the container and blob, a 503 (ServerBusy) or 500 OperationTimedOut is
throttling (Azure's scalability targets answer 503), retried with backoff
as a 429 is.
"""

from __future__ import annotations

from llmkube_stager.errors import Reason, SourceError

REMEDY_NOT_FOUND_AZURE = (
    "check the storage account, container and blob path of the URI, and that the credential "
    "can see the container (a SAS or role scoped to another container answers 404 or 403)"
)


# What an anonymous request is called in messages (credentials.Anonymous).
ANONYMOUS_NAME = "no credentials (anonymous access)"
# The credentials the agent takes and how each is asked for, and those it
# does not take: said when an anonymous request is refused (#41 item 3).
REMEDY_NO_CREDENTIALS = (
    "no credential was given, so the request was anonymous: set one of AZURE_STORAGE_ACCESS_KEY "
    "(or a SAS), AZURE_STORAGE_CONNECTION_STRING, AZURE_CLIENT_ID + AZURE_TENANT_ID with "
    "AZURE_CLIENT_SECRET or AZURE_CLIENT_CERTIFICATE_PATH (a service principal) or "
    "AZURE_FEDERATED_TOKEN_FILE (AKS workload identity), AZURE_CLIENT_ID alone (a user-assigned "
    "managed identity) or LLMKUBE_AZURE_MANAGED_IDENTITY=true (the system-assigned one); "
    "not supported: Azure Arc, Service Fabric and Cloud Shell managed identities, "
    "AZURE_USERNAME/AZURE_PASSWORD, and the developer tools' sign-ins (Azure CLI, PowerShell)"
)


def unauthorized_remedy(credential: str) -> str:
    if credential == ANONYMOUS_NAME:
        return REMEDY_NO_CREDENTIALS
    return (
        f"Azure Storage refused {credential}: check it (a key of this account, a SAS that grants "
        "read and list on the container and has not expired, a role such as Storage Blob Data "
        "Reader on the container for a service principal or workload identity) and the "
        "Kubernetes Secret or service account that provides it"
    )


def status_of(err: SourceError) -> int | None:
    return None if err.wire is None else err.wire.http_status


def azure_error(err: SourceError, where: str, credential: str) -> SourceError:
    """The wire's error for an Azure request, with Azure's meaning."""
    status = status_of(err)
    if status in (401, 403):
        return SourceError(
            f"{where}: Azure Storage answered HTTP {status} to {credential}",
            reason=Reason.SOURCE_UNAUTHORIZED,
            answered=True,
            wire=err.wire,
            remedy=unauthorized_remedy(credential),
            file=err.file,
        )
    if status == 404:
        return SourceError(
            f"{where}: no such container or blob (HTTP 404)",
            reason=Reason.SOURCE_NOT_FOUND,
            answered=True,
            wire=err.wire,
            remedy=REMEDY_NOT_FOUND_AZURE,
            file=err.file,
        )
    if status == 503:
        # ServerBusy: Azure's throttling (the kind's remedy), backed off as a 429.
        return err.amended(reason=Reason.SOURCE_RATE_LIMITED)
    return err


def translate_identity_error(exc: Exception) -> SourceError:
    """azure-identity failing to get a token: unauthorized when the token
    endpoint refused the credential, unreachable when it could not be asked.
    The exception's text is never shown (it may quote the request)."""
    from azure.core.exceptions import ClientAuthenticationError

    if getattr(exc, "response", None) is None and _not_asked(exc):
        return SourceError(
            f"the Azure token endpoint could not be reached ({type(exc).__name__})",
            reason=Reason.SOURCE_UNREACHABLE,
            transient=True,
        )
    if isinstance(exc, ClientAuthenticationError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if isinstance(status, int) and (status == 429 or status >= 500):
            return SourceError(
                f"the Azure token endpoint answered HTTP {status}",
                reason=Reason.SOURCE_UNAVAILABLE,
                transient=True,
                answered=True,
            )
        return SourceError(
            "the Azure token endpoint refused the credential (AZURE_CLIENT_ID, AZURE_TENANT_ID "
            "and AZURE_CLIENT_SECRET, AZURE_CLIENT_CERTIFICATE_PATH or "
            "AZURE_FEDERATED_TOKEN_FILE)",
            reason=Reason.SOURCE_UNAUTHORIZED,
            answered=True,
            remedy=unauthorized_remedy("the service principal or workload identity"),
        )
    return SourceError(
        f"no Azure token could be had ({type(exc).__name__})",
        reason=Reason.SOURCE_UNREACHABLE,
        transient=True,
    )


def _not_asked(exc: BaseException) -> bool:
    """The token endpoint was never answered: a connection refused, a name
    not resolved, a proxy down, a TLS handshake failed, the answer cut.
    MSAL wraps these into a ClientAuthenticationError with no response
    (#33 review item 1), so the chain of causes says it, not the type."""
    from azure.core.exceptions import ServiceRequestError, ServiceResponseError

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ServiceRequestError | ServiceResponseError | ConnectionError):
            return True
        current = current.__cause__ or current.__context__
    return False
