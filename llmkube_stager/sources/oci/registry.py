"""The registry's control requests (#43 items 1, 2): manifests, and the
401 answered by the scheme its WWW-Authenticate names.

Basic: the docker config's user and password, to the registry's origin
only. Bearer (`realm`, `service`, `scope`): a token asked at the realm,
with the user and password as Basic, or for an `identitytoken` as an
OAuth2 refresh_token grant (POST), anonymously when there are no
credentials. A token expires (Docker Hub's after 300 s): `renew` asks for
a new one with the last challenge, and the blob transfer goes on.

A manifest's bytes are checked against the digest the reference pins, or
else against the one the registry names (Docker-Content-Digest); the
recorded digest is the sha256 of the bytes that were read.
"""

from __future__ import annotations

import hashlib
import json
from urllib.parse import urlencode

from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.logs import display_url
from llmkube_stager.sources.oci.auth import (
    Credentials,
    RegistryAuth,
    basic_header,
    parse_challenge,
)
from llmkube_stager.sources.oci.manifest import ACCEPT
from llmkube_stager.sources.oci.ref import OciRef
from llmkube_stager.sources.wire.connection import ConnectionPool
from llmkube_stager.sources.wire.control import Answer, ControlError, call
from llmkube_stager.sources.wire.status import Origin, status_error

REMEDY_OCI_UNAUTHORIZED = (
    "give the registry's credentials in a docker config.json (the imagePullSecret's "
    ".dockerconfigjson) named by LLMKUBE_OCI_DOCKER_CONFIG or DOCKER_CONFIG, and check that "
    "the account may pull this repository"
)
CLIENT_ID = "llmkube-stager"


class RegistryClient:
    def __init__(self, ref: OciRef, pool: ConnectionPool, creds: Credentials | None) -> None:
        self.ref = ref
        self._pool = pool
        self._creds = creds
        self.auth = RegistryAuth(Origin.of(ref.base_url))
        self._bearer: dict[str, str] | None = None

    def ask(self, method: str, url: str, headers: dict[str, str]) -> Answer:
        answer = self._call(method, url, headers)
        challenge = answer.get("www-authenticate")
        if answer.status == 401 and challenge:
            self._authenticate(challenge, url)
            answer = self._call(method, url, headers)
        return answer

    def _call(self, method: str, url: str, headers: dict[str, str]) -> Answer:
        try:
            return call(self._pool, method, url, {**headers, **self.auth.headers_for(url, url)})
        except ControlError as err:
            raise err.error from None

    def reauthorize(self) -> bool:
        """After a 401 to a blob: a new bearer token with the last
        challenge, or, when none was met yet (a run resumed from its
        record), the challenge of the API root answered. False when nothing
        new can be sent (Basic credentials were refused as they are)."""
        if self._bearer is not None:
            self._fetch_token(self._bearer)
            return True
        if self.auth.header:
            return False
        self.ask("GET", f"{self.ref.base_url}/v2/", {})
        return bool(self.auth.header)

    def _authenticate(self, challenge: str, url: str) -> None:
        scheme, params = parse_challenge(challenge)
        if scheme == "bearer" and params.get("realm"):
            self._bearer = params
            self._fetch_token(params)
            return
        if scheme == "basic" and self._creds is not None and self._creds.username:
            self.auth.header = basic_header(self._creds)
            return
        raise SourceError(
            f"{display_url(url)} returned HTTP 401 and no credentials for "
            f"{self.ref.registry} were given",
            reason=Reason.SOURCE_UNAUTHORIZED,
            answered=True,
            remedy=REMEDY_OCI_UNAUTHORIZED,
        )

    def _fetch_token(self, params: dict[str, str]) -> None:
        realm = params["realm"]
        form = {
            "service": params.get("service", ""),
            "scope": params.get("scope") or self.ref.scope,
        }
        form = {k: v for k, v in form.items() if v}
        creds = self._creds
        if creds is not None and creds.identity_token:
            body = urlencode(
                {
                    **form,
                    "grant_type": "refresh_token",
                    "client_id": CLIENT_ID,
                    "refresh_token": creds.identity_token,
                }
            ).encode()
            headers = {"Content-Type": "application/x-www-form-urlencoded"}
            answer = self._realm_call("POST", realm, headers, body)
        else:
            headers = {"Authorization": basic_header(creds)} if creds and creds.username else {}
            sep = "&" if "?" in realm else "?"
            answer = self._realm_call("GET", f"{realm}{sep}{urlencode(form)}", headers, None)
        self.auth.header = f"Bearer {_token_of(answer, realm)}"

    def _realm_call(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None
    ) -> Answer:
        if Origin.of(url).scheme not in ("http", "https"):
            raise SourceError(
                f"{self.ref.registry} named a token realm that is not http(s)",
                reason=Reason.SOURCE_REJECTED,
                answered=True,
            )
        try:
            answer = call(self._pool, method, url, headers, body)
        except ControlError as err:
            raise err.error from None
        if answer.status in (401, 403):
            raise SourceError(
                f"the token service of {self.ref.registry} returned HTTP {answer.status}: the "
                "credentials were refused",
                reason=Reason.SOURCE_UNAUTHORIZED,
                answered=True,
                remedy=REMEDY_OCI_UNAUTHORIZED,
            )
        if answer.status != 200:
            raise status_error(
                answer.status, answer.get, f"the token service of {self.ref.registry}"
            )
        return answer

    def manifest(self, reference: str, pinned: str | None) -> tuple[bytes, str, str]:
        """(bytes, media type, digest) of a manifest, its bytes checked."""
        url = self.ref.manifest_url(reference)
        answer = self.ask("GET", url, {"Accept": ACCEPT})
        where = f"{self.ref.display} (manifest {reference[:19]})"
        if answer.status != 200:
            raise _refused(answer, where)
        digest = "sha256:" + hashlib.sha256(answer.data).hexdigest()
        named = pinned or (answer.get("docker-content-digest") or "").strip()
        if named and named != digest:
            raise _manifest_mismatch(where, named, digest, pinned is not None)
        return answer.data, answer.get("content-type") or "", digest

    def head_digest(self, reference: str) -> str | None:
        """The digest a tag names now (one HEAD), when the registry says it."""
        answer = self.ask("HEAD", self.ref.manifest_url(reference), {"Accept": ACCEPT})
        if answer.status != 200:
            raise _refused(answer, self.ref.display)
        return (answer.get("docker-content-digest") or "").strip() or None


REMEDY_OCI_NOT_FOUND = (
    "check the registry, repository and tag or digest of the oci:// reference (a registry may "
    "answer 404 for a private repository the credentials cannot see)"
)


def _refused(answer: Answer, where: str) -> SourceError:
    """The status's reason, with the registry's remedies where the generic
    ones name another source's settings."""
    err = status_error(answer.status, answer.get, where)
    remedy = {
        Reason.SOURCE_UNAUTHORIZED: REMEDY_OCI_UNAUTHORIZED,
        Reason.SOURCE_NOT_FOUND: REMEDY_OCI_NOT_FOUND,
    }.get(err.reason)
    if remedy is None:
        return err
    return SourceError(err.detail, reason=err.reason, answered=True, wire=err.wire, remedy=remedy)


def _manifest_mismatch(where: str, named: str, got: str, pinned: bool) -> SourceError:
    if pinned:
        return SourceError(
            f"{where} answered with bytes whose digest is {got[:19]}, not the pinned {named[:19]}",
            reason=Reason.CHECKSUM_MISMATCH,
            answered=True,
        )
    # A manifest that changed while it was read, or a wrong byte on the way:
    # asked again within the retry budget.
    return SourceError(
        f"{where} answered with bytes whose digest is {got[:19]}, not the {named[:19]} the "
        "registry named",
        reason=Reason.SOURCE_CHANGED,
        transient=True,
        answered=True,
    )


def _token_of(answer: Answer, realm: str) -> str:
    try:
        doc = json.loads(answer.data)
        token = doc.get("token") or doc.get("access_token")
        if not isinstance(token, str) or not token:
            raise ValueError
    except (ValueError, AttributeError, RecursionError):
        raise SourceError(
            f"the token service {display_url(realm)} answered without a token",
            reason=Reason.SOURCE_REJECTED,
            answered=True,
        ) from None
    return token
