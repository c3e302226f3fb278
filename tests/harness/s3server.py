"""moto's S3 server on 127.0.0.1, for tests that need real SigV4, Range,
If-Match and S3 error codes (ARCHITECTURE "Testing").

`S3Server` runs the same WSGI application and request handler that
`moto.server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)` runs,
built with `werkzeug.serving.make_server` directly so that it can also
serve TLS (`tls=` an `ssl.SSLContext` or a `(cert, key)` pair) and keep a
log of the requests it got (`requests()`): moto itself keeps none.

moto keeps its backends in module globals: every server in one process
shares buckets, so tests use distinct bucket names or call `reset()`. moto
is a dev dependency, imported only when a server starts.

IAM-checked requests (`enable_auth()`, a user from `create_user()`) make
moto verify signatures and access keys on header-signed requests; moto cannot
authenticate presigned (query-signed) requests in that mode, so only tests
of refused credentials should use it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import ssl
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import unquote

from tests.harness.lifecycle import Lifecycle

_HOST = "127.0.0.1"
_ADMIN_TIMEOUT_S = 10.0
_ALLOW_ALL_S3 = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
    }
)
DUMMY_KEY_ID = "AKIAMOTOTESTKEY00001"
DUMMY_SECRET = "moto-test-secret-key"
REGION = "us-east-1"

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(frozen=True)
class S3Request:
    """One request as moto's server received it (header names lower-cased)."""

    method: str
    path: str  # percent-decoded path
    query: str  # raw query string
    headers: dict[str, str]
    status: int


class _Recorder:
    """WSGI middleware in front of moto's app: logs each request."""

    def __init__(self, app: WsgiApp) -> None:
        self._app = app
        self.lock = threading.Lock()
        self.log: list[S3Request] = []
        self.hook: Callable[[S3Request], None] | None = None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        status: list[int] = [0]
        hook = self.hook
        if hook is not None:
            hook(_request_of(environ, 0))

        def recording_start(code: str, headers: Any, *args: Any) -> Any:
            status[0] = int(code.split(" ", 1)[0])
            return start_response(code, headers, *args)

        result = self._app(environ, recording_start)
        with self.lock:
            self.log.append(_request_of(environ, status[0]))
        return result


def _request_of(environ: dict[str, Any], status: int) -> S3Request:
    headers = {
        key[5:].replace("_", "-").lower(): str(value)
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers[key.replace("_", "-").lower()] = str(environ[key])
    # WSGI hands PATH_INFO over as latin-1 text of the raw (decoded) bytes.
    raw = str(environ.get("RAW_URI") or environ.get("REQUEST_URI") or "")
    path = unquote(raw.split("?", 1)[0]) if raw else _wsgi_text(environ.get("PATH_INFO", ""))
    return S3Request(
        method=str(environ.get("REQUEST_METHOD", "")),
        path=path,
        query=str(environ.get("QUERY_STRING", "")),
        headers=headers,
        status=status,
    )


def _wsgi_text(value: object) -> str:
    text = str(value)
    try:
        return text.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return text


class S3Server(Lifecycle):
    """moto's S3 (and IAM) server, threaded, on 127.0.0.1."""

    def __init__(self, *, tls: ssl.SSLContext | tuple[str, str] | None = None) -> None:
        self._tls = tls
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._recorder: _Recorder | None = None
        self._clients: dict[tuple[str, str, str, bool | str], Any] = {}

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("S3 server already started")
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        # Werkzeug logs every request at INFO; the stager's own logs are what tests show.
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._recorder = _Recorder(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            _HOST,
            0,
            self._recorder,
            threaded=True,
            request_handler=MotoRequestHandler,
            ssl_context=self._tls,
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.01},
            name=f"moto-s3-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(1.0)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("S3 server not started")
        port: int = self._server.server_address[1]
        return port

    @property
    def endpoint_url(self) -> str:
        scheme = "http" if self._tls is None else "https"
        return f"{scheme}://{_HOST}:{self.port}"

    # -- the request log ----------------------------------------------------------------

    def requests(self, method: str | None = None) -> list[S3Request]:
        if self._recorder is None:
            return []
        with self._recorder.lock:
            log = list(self._recorder.log)
        return [r for r in log if method is None or r.method == method]

    def on_request(self, hook: Callable[[S3Request], None] | None) -> None:
        """Run `hook` before moto answers each request (status 0 in its argument);
        e.g. overwrite an object between the agent's probe and its GET."""
        if self._recorder is None:
            raise RuntimeError("S3 server not started")
        self._recorder.hook = hook

    def clear_log(self) -> None:
        if self._recorder is not None:
            with self._recorder.lock:
                self._recorder.log.clear()

    # -- clients and admin --------------------------------------------------------------

    def client(
        self,
        service: str = "s3",
        *,
        key_id: str = DUMMY_KEY_ID,
        secret: str = DUMMY_SECRET,
        verify: bool | str = True,
    ) -> Any:
        """A boto3 client for this server (path-style, SigV4); cached, since
        building one costs a few hundred milliseconds."""
        cache_key = (service, key_id, secret, verify)
        if cache_key not in self._clients:
            self._clients[cache_key] = self._new_client(service, key_id, secret, verify)
        return self._clients[cache_key]

    def _new_client(self, service: str, key_id: str, secret: str, verify: bool | str) -> Any:
        import boto3
        from botocore.config import Config as BotoConfig

        return boto3.session.Session().client(
            service,
            endpoint_url=self.endpoint_url,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            region_name=REGION,
            verify=verify,
            config=BotoConfig(signature_version="s3v4", s3={"addressing_style": "path"}),
        )

    def _admin(self, path: str, body: bytes) -> bytes:
        conn: http.client.HTTPConnection
        if self._tls is None:
            conn = http.client.HTTPConnection(_HOST, self.port, timeout=_ADMIN_TIMEOUT_S)
        else:
            unverified = ssl._create_unverified_context()  # our own loopback server
            conn = http.client.HTTPSConnection(
                _HOST, self.port, timeout=_ADMIN_TIMEOUT_S, context=unverified
            )
        try:
            conn.request(
                "POST", path, body=body, headers={"Content-Type": "application/octet-stream"}
            )
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        if response.status != 200:
            raise RuntimeError(f"moto {path} answered {response.status}: {data[:200]!r}")
        return data

    def reset(self) -> None:
        """Forget every bucket, object and IAM user (all servers of this process)."""
        self._admin("/moto-api/reset", b"")

    def create_user(self, name: str = "stager") -> tuple[str, str]:
        """An IAM user allowed s3:*; returns (access key id, secret key)."""
        iam = self.client("iam", verify=False)
        iam.create_user(UserName=name)
        iam.put_user_policy(UserName=name, PolicyName="s3-all", PolicyDocument=_ALLOW_ALL_S3)
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return str(key["AccessKeyId"]), str(key["SecretAccessKey"])

    @contextlib.contextmanager
    def enable_auth(self) -> Iterator[None]:
        """moto checks access keys and signatures of every request meanwhile."""
        self._admin("/moto-api/reset-auth", b"0")
        try:
            yield
        finally:
            self._admin("/moto-api/reset-auth", b"inf")


@contextlib.contextmanager
def s3_server(*, tls: ssl.SSLContext | tuple[str, str] | None = None) -> Iterator[S3Server]:
    with S3Server(tls=tls) as server:
        yield server
