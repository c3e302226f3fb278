"""A gs:// run's connection to the JSON API (#33 item 1): its endpoint,
its credentials (opened once, on first need: a warm start never gets
here), the control connections, and the two control requests, a listing
page and an object's metadata. Shared by the listing and the fetcher, so a
run asks for its token once.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from llmkube_stager.config import Config
from llmkube_stager.sources.gcs.errors import gcs_status_error
from llmkube_stager.sources.gcs.objects import GcsObject, from_resource
from llmkube_stager.sources.gcs.ref import endpoint_of, is_emulator, list_url, meta_url
from llmkube_stager.sources.wire.connection import ConnectionPool
from llmkube_stager.sources.wire.control import ControlError, call, json_of
from llmkube_stager.sources.wire.status import Origin

if TYPE_CHECKING:
    import ssl

    from llmkube_stager.logs import Log
    from llmkube_stager.sources.gcs.auth import Tokens


class GcsSession:
    def __init__(self, config: Config, bucket: str) -> None:
        self._config = config
        self.bucket = bucket
        self.endpoint = endpoint_of(config.gcs_emulator_host, config.gcs_api_endpoint)
        self.origin = Origin.of(self.endpoint)
        self._ssl: ssl.SSLContext | None = None
        timeouts = config.timeouts
        self.pool = ConnectionPool(
            timeouts.connect_s, timeouts.stall_s, self.ssl_context, config.proxy
        )
        # google-auth's token requests: the same trust, proxies and
        # connections, bounded as Google's token endpoints warrant (#41 item 1).
        from llmkube_stager.sources.gcs.auth import TOKEN_TIMEOUT_S

        self.auth_pool = ConnectionPool(
            min(timeouts.connect_s, TOKEN_TIMEOUT_S),
            min(timeouts.stall_s, TOKEN_TIMEOUT_S),
            self.ssl_context,
            config.proxy,
        )
        self._tokens: Tokens | None = None
        self._lock = threading.Lock()
        self.log: Log | None = None

    def ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            from llmkube_stager.sources.wire.tls import make_ssl_context

            self._ssl = make_ssl_context(self._config.ca_dir)
        return self._ssl

    def preflight(self) -> None:
        """The key file read (a ConfigError before the cache is touched)."""
        self.tokens()

    def tokens(self) -> Tokens:
        with self._lock:
            if self._tokens is None:
                self._tokens = self._open_tokens()
            return self._tokens

    def _open_tokens(self) -> Tokens:
        from llmkube_stager.sources.deps import GOOGLE_AUTH, require
        from llmkube_stager.sources.gcs.auth import Tokens, load_credentials
        from llmkube_stager.sources.gcs.transport import auth_transport

        require(GOOGLE_AUTH)
        request = auth_transport(self.auth_pool)
        if is_emulator(self._config.gcs_emulator_host):
            # As google-cloud-storage does (#33 review item 5): an emulator
            # is sent no credential, not the key file's token nor Workload
            # Identity's, and none is asked for (the fetcher's log says so).
            return Tokens(None, request, "STORAGE_EMULATOR_HOST")
        creds, where = load_credentials(self._config, request)
        if self.log is not None:
            if creds is None:
                self.log.info(
                    "gcs_anonymous",
                    "no Google credentials (GOOGLE_APPLICATION_CREDENTIALS unset, no metadata "
                    "server): sending anonymous requests, which only a public bucket allows",
                )
            else:
                self.log.info("gcs_credentials", f"Google credentials from {where}")
        return Tokens(creds, request, where)

    def list_page(self, prefix: str, page_token: str | None, where: str) -> Mapping[str, Any]:
        url = list_url(self.endpoint, self.bucket, prefix, page_token)
        return json_of(self._get(url, where), where)

    def object_meta(self, name: str) -> GcsObject:
        where = f"gs://{self.bucket}/{name}"
        doc = json_of(self._get(meta_url(self.endpoint, self.bucket, name), where), where)
        return from_resource(doc, where)

    def _get(self, url: str, where: str) -> Any:
        tokens = self.tokens()
        for attempt in range(2):
            header = tokens.header()
            used = tokens.current()
            try:
                answer = call(self.pool, "GET", url, header)
            except ControlError as err:
                raise err.error from None
            if answer.status == 401 and attempt == 0 and tokens.refresh_after_refusal(used):
                continue  # a token revoked or rotated: one fresh one, no retry spent
            if 200 <= answer.status < 300:
                return answer
            raise gcs_status_error(answer.status, answer.get, where, pinned=False)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.pool.close()
        self.auth_pool.close()
