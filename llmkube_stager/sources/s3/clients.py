"""The boto3 clients of one S3 source: which credentials, which region,
which addressing style; every request goes out through `session.Sender`
(the agent's proxy decision, CA bundle and timeouts).

One client per region: a bucket that lives in another region answers the
first HEAD with a redirect (`301 PermanentRedirect`, `x-amz-bucket-region`);
botocore follows it for the HEAD, and from then on this source signs every
HEAD and every presigned GET for the bucket's region (#12 item 6): a URL presigned
for the wrong region is refused by S3 with a redirect that has no Location.

botocore never retries on its own (`total_max_attempts: 1`): the agent's
RetryBudget does, so the two are never stacked (#12 item 4).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from llmkube_stager.config import Config
from llmkube_stager.errors import ConfigError, Reason, SourceError
from llmkube_stager.sources.s3.errors import REMEDY_S3_NO_CREDENTIALS, translate_s3_error
from llmkube_stager.sources.s3.settings import (
    DEFAULT_REGION,
    S3Settings,
    addressing_style,
    is_region_name,
    parse_style,
)

if TYPE_CHECKING:
    from llmkube_stager.logs import Log


class S3Clients:
    def __init__(self, config: Config, settings: S3Settings, bucket: str) -> None:
        from llmkube_stager.sources.s3.session import Sender, botocore_env, make_session
        from llmkube_stager.sources.wire.tls import check_ca_bundle

        self._config = config
        self._settings = settings
        self._bucket = bucket
        self.log: Log | None = None
        env = botocore_env(config.aws_env)
        _check_files(env)
        timeouts = config.timeouts
        self._sender = Sender(config.proxy, self._bundle, timeouts.connect_s, timeouts.stall_s)
        self._session = make_session(env, settings.sts_endpoint_url, self._sender)
        profile = _profile(self._session, env)
        profile_style = (profile.get("s3") or {}).get("addressing_style")
        if settings.addressing is None and isinstance(profile_style, str):
            profile_choice = parse_style(profile_style, "the profile's s3 addressing_style")
        else:
            profile_choice = settings.addressing
        self._style = addressing_style(profile_choice, settings.endpoint_url, bucket)
        self.region = settings.region or profile.get("region") or DEFAULT_REGION
        check_ca_bundle(config.ca_dir)
        self._ca_bundle: str | None = None  # written with the first client
        self._bundle_written = False
        self._bundle_lock = threading.Lock()
        self._signed: bool | None = None
        self._clients: dict[str, Any] = {}
        # Parallel range workers presign at once; one client per region.
        self._lock = threading.Lock()

    # -- requests ----------------------------------------------------------------------

    def head(self, key: str, where: str) -> dict[str, Any]:
        try:
            answer: dict[str, Any] = self._client().head_object(Bucket=self._bucket, Key=key)
        except Exception as exc:
            raise self._translated(exc, where) from exc
        return answer

    def list_page(self, prefix: str, token: str | None, where: str) -> dict[str, Any]:
        """One ListObjectsV2 page (#24 item 5, sources/s3/listing.py)."""
        params = {"Bucket": self._bucket, "Prefix": prefix}
        if token:
            params["ContinuationToken"] = token
        try:
            answer: dict[str, Any] = self._client().list_objects_v2(**params)
        except Exception as exc:
            raise self._translated(exc, where) from exc
        return answer

    def presign(self, key: str, where: str, expiry_s: int) -> str:
        try:
            url: str = self._client().generate_presigned_url(
                "get_object", Params={"Bucket": self._bucket, "Key": key}, ExpiresIn=expiry_s
            )
        except Exception as exc:
            raise translate_s3_error(exc, where) from exc
        return url

    def client(self) -> Any:
        """The boto3 client of the bucket's region, for what a writer of
        the bucket asks (the mirror's seeder, mirror/store.py)."""
        return self._client()

    def close(self) -> None:
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                client.close()
        with contextlib.suppress(Exception):
            self._sender.close()
        if self._ca_bundle is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._ca_bundle)

    def _translated(self, exc: Exception, where: str) -> SourceError:
        """An unsigned request refused is told as such (#46 item 6): the
        fix is credentials the agent did not find, not other ones."""
        err = translate_s3_error(exc, where)
        if self._signed is False and err.reason is Reason.SOURCE_UNAUTHORIZED:
            err = err.amended(
                detail=f"{err.detail}; the request was unsigned: no AWS credentials were found"
            )
            err._remedy = REMEDY_S3_NO_CREDENTIALS
        return err

    # -- clients -----------------------------------------------------------------------

    def _bundle(self) -> str | None:
        """The CA bundle file, written on first use: every client's (S3's and
        STS's, #22 item 3)."""
        from llmkube_stager.sources.wire.tls import write_ca_bundle

        with self._bundle_lock:
            if not self._bundle_written:
                self._ca_bundle = write_ca_bundle(self._config.ca_dir)
                self._bundle_written = True
        return self._ca_bundle

    def _client(self) -> Any:
        with self._lock:
            region = self.region
            client = self._clients.get(region)
            if client is None:
                client = self._make_client(region)
                self._clients[region] = client
        return client

    def _learn_region(self, response: Any = None, **_: Any) -> None:
        """botocore's `needs-retry` event: a redirect names the bucket's region."""
        if not isinstance(response, tuple) or len(response) != 2:
            return
        headers = response[1].get("ResponseMetadata", {}).get("HTTPHeaders", {})
        region = headers.get("x-amz-bucket-region")
        if isinstance(region, str) and is_region_name(region) and region != self.region:
            self.region = region
            if self.log is not None:
                self.log.info(
                    "bucket_region",
                    f"bucket {self._bucket} is in {region}; signing for {region}",
                )

    def _credentials_found(self) -> bool:
        """boto3's default chain, once; nothing found means unsigned requests."""
        if self._signed is None:
            credentials = self._session.get_credentials()
            self._signed = credentials is not None
            if self.log is not None and credentials is None:
                self.log.info(
                    "s3_unsigned",
                    "no AWS credentials found (keys, web identity, profile, container, instance "
                    "metadata): sending unsigned requests, which only a public bucket allows",
                )
            elif self.log is not None:
                self.log.info("s3_credentials", f"AWS credentials from {credentials.method}")
        return self._signed

    def _make_client(self, region: str) -> Any:
        from botocore import UNSIGNED
        from botocore.config import Config as BotoConfig

        endpoint = self._settings.endpoint_url
        options: dict[str, Any] = {
            "connect_timeout": self._config.timeouts.connect_s,
            "read_timeout": self._config.timeouts.stall_s,
            # The first attempt counts: botocore never retries, RetryBudget does.
            "retries": {"total_max_attempts": 1, "mode": "standard"},
            "s3": {"addressing_style": self._style},
            "signature_version": "s3v4" if self._credentials_found() else UNSIGNED,
        }
        client = self._session.create_client(
            "s3",
            region_name=region,
            endpoint_url=endpoint,
            config=BotoConfig(**options),
            verify=self._bundle(),
        )
        client.meta.events.register("needs-retry.s3", self._learn_region)
        return client


def _check_files(env: Mapping[str, str]) -> None:
    """Files the credential chain will read: bounded regular files, or a
    clear error now rather than a failed request later, a read that blocks
    on a FIFO or one of /dev/zero that never ends (#41 item 4). The token
    files must be there; the shared files may be absent (botocore reads
    none then)."""
    from llmkube_stager.sources.credfile import check_credential_file

    for name in ("AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"):
        path = env.get(name)
        if path and not os.path.lexists(path):
            raise ConfigError(
                f"{name} {path[:256]!r} does not exist (is the token projected into the pod?)"
            )
        if path:
            check_credential_file(path, name)
    for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        path = env.get(name)
        if path:
            check_credential_file(path, name, missing_ok=True)


def _profile(session: Any, env: Mapping[str, str]) -> dict[str, Any]:
    """The selected profile of the shared files (reading them now)."""
    from botocore.exceptions import BotoCoreError, ProfileNotFound

    try:
        profile: dict[str, Any] = session.get_scoped_config()
    except ProfileNotFound:
        raise ConfigError(
            f"AWS_PROFILE {env.get('AWS_PROFILE', '')[:64]!r} is in neither "
            "AWS_SHARED_CREDENTIALS_FILE nor AWS_CONFIG_FILE"
        ) from None
    except BotoCoreError as exc:  # an unparseable file
        raise ConfigError(f"the AWS shared files cannot be read: {type(exc).__name__}") from None
    return profile
