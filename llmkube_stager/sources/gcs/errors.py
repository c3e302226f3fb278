"""GCS answers -> contract reasons (#33 item 1), by status only (never by
message text): the JSON API's error body is not read, so nothing it
echoes (a token's claims, an object's metadata) can reach a message.

401/403 name what KServe users set (GOOGLE_APPLICATION_CREDENTIALS, the
service account's key Secret, Workload Identity's binding); 404 names the
bucket and object; 429 and 503 are GCS's "back off" (its retry guidance
treats both alike) and end, past the retry budget, as ModelSourceRateLimited
with the GCS remedy of the scheme row. A 404 of a generation the listing
named is the object replaced or deleted since: ModelSourceChanged, so the
next run lists again instead of splicing two generations.
"""

from __future__ import annotations

from llmkube_stager.errors import Reason, SourceError, Wire
from llmkube_stager.sources.wire.status import HeaderGet, status_error

REMEDY_UNAUTHORIZED_GCS = (
    "Google Cloud Storage refused the credentials: check the credentials file that "
    "GOOGLE_APPLICATION_CREDENTIALS names (a service-account key KServe mounts from the "
    "service account's Secret, a Workload Identity Federation configuration and its subject "
    "token, or user or impersonation credentials), or the GKE Workload Identity binding of "
    "the pod's Kubernetes service account; "
    "the account needs storage.objects.get and storage.objects.list on the bucket "
    "(roles/storage.objectViewer); unset both for a public bucket"
)
REMEDY_NOT_FOUND_GCS = (
    "no such bucket or object in Google Cloud Storage: check the gs://bucket/path of the "
    "storage URI or MODEL_SOURCE (a prefix must hold at least one object), and "
    "STORAGE_EMULATOR_HOST when an emulator or private endpoint is meant"
)


def gcs_status_error(
    status: int, get: HeaderGet, where: str, *, pinned: bool, text: str | None = None
) -> SourceError:
    """An error status of the JSON API; `pinned`: the request named the
    generation the listing or metadata gave; `text`: the wire's own words."""
    text = text or f"{where} returned HTTP {status}"

    def answered(reason: Reason, remedy: str | None = None, detail: str = text) -> SourceError:
        return SourceError(
            detail, reason=reason, answered=True, wire=Wire(http_status=status), remedy=remedy
        )

    if status in (401, 403):
        return answered(Reason.SOURCE_UNAUTHORIZED, REMEDY_UNAUTHORIZED_GCS)
    if status == 404 and pinned:
        return answered(
            Reason.SOURCE_CHANGED,
            detail=f"{text}: the generation it was listed at is gone (the object was replaced "
            "or deleted since); nothing of the new generation was kept",
        )
    if status in (404, 410):
        return answered(Reason.SOURCE_NOT_FOUND, REMEDY_NOT_FOUND_GCS)
    err = status_error(status, get, where)
    if status == 503:
        # GCS's overload answer: backed off as a 429 is (the rate-limit remedy).
        return err.amended(reason=Reason.SOURCE_RATE_LIMITED)
    return err


def status_of(err: SourceError) -> int | None:
    return None if err.wire is None else err.wire.http_status


def translated(err: SourceError) -> SourceError:
    """A data request's error, as GCS means it: the GET named the listed
    generation, so its 404 is the object replaced or deleted since."""
    status = status_of(err)
    if status in (401, 403, 404, 410):
        return gcs_status_error(status or 0, _none, "", pinned=True, text=err.detail)
    if status == 503:
        return err.amended(reason=Reason.SOURCE_RATE_LIMITED)
    return err


def _none(_name: str) -> str | None:
    return None
