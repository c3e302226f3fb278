"""The mirror's objects, reached through the sources' own fetchers: an
s3:// mirror through the S3 fetcher (its own endpoint, keys and region;
SigV4-presigned GETs pinned with If-Match), an http(s):// one through the
HTTP fetcher, which is sent no credential at all. The seeder's writes go
through the S3 source's boto3 client (`S3Writer`); its exceptions are
translated here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from llmkube_stager.config import Config, MirrorSettings, Secrets
from llmkube_stager.config.kserve_env import SIGNING_VARS
from llmkube_stager.errors import REMEDY_MIRROR, Reason, SourceError
from llmkube_stager.logs import Log
from llmkube_stager.mirror.layout import MAX_DOC_BYTES
from llmkube_stager.model import RemoteFile
from llmkube_stager.sources.base import Fetcher

if TYPE_CHECKING:
    from llmkube_stager.sources.s3.clients import S3Clients


def _split_s3(url: str) -> tuple[str, str]:
    bucket, _, prefix = url[5:].partition("/")
    return bucket, prefix.strip("/")


def _mirror_aws_env(config: Config, settings: MirrorSettings) -> dict[str, str]:
    """The origin's AWS settings (the usual credential chain) with the
    mirror's endpoint, region and keys where it has its own."""
    env = dict(config.aws_env)
    if settings.access_key_id:
        # The origin's credentials: a mirror with keys of its own never uses them.
        for name in SIGNING_VARS:
            env.pop(name, None)
        env["AWS_ACCESS_KEY_ID"] = settings.access_key_id
        env["AWS_SECRET_ACCESS_KEY"] = settings.secret_access_key
    if settings.endpoint_url:
        env.pop("AWS_ENDPOINT_URL_S3", None)
        env["AWS_ENDPOINT_URL"] = settings.endpoint_url
    if settings.region:
        env.pop("AWS_DEFAULT_REGION", None)
        env["AWS_REGION"] = settings.region
    return env


def mirror_config(config: Config, settings: MirrorSettings) -> Config:
    """The run's configuration as the mirror's fetcher needs it: no Hugging
    Face token or endpoint (never sent to a mirror), no pins (the manifest
    carries the digests), and for s3:// the mirror's bucket and keys."""
    base = replace(config, hf_endpoint="", pins={}, signing=None)
    if not settings.is_s3:
        return replace(base, source=settings.url, secrets=Secrets())
    bucket, prefix = _split_s3(settings.url)
    env = _mirror_aws_env(config, settings)
    return replace(
        base,
        source=f"s3://{bucket}/{prefix}",
        s3_bucket=bucket,
        s3_key="",
        s3_prefix=prefix,
        model_files=("mirror",),
        model_path="",
        listed=False,
        aws_env=env,
        aws_endpoint_url=env.get("AWS_ENDPOINT_URL", ""),
        aws_region=env.get("AWS_REGION", ""),
        secrets=replace(config.secrets, hf_token=""),
    )


@dataclass
class MirrorStore:
    settings: MirrorSettings
    fetcher: Fetcher
    config: Config  # the mirror's (mirror_config)

    def url_of(self, key: str) -> str:
        if self.settings.is_s3:
            bucket, prefix = _split_s3(self.settings.url)
            return f"s3://{bucket}/{prefix + '/' if prefix else ''}{key}"
        return self.settings.url + quote(key)

    def file(self, key: str) -> RemoteFile:
        # `rel` is the key under the prefix: the S3 fetcher puts the prefix
        # before it (a multi-file source's object_key).
        return RemoteFile(rel=key, url=self.url_of(key), dest="")

    def read(self, key: str) -> bytes | None:
        """A small object whole (a manifest, a ref); None when absent."""
        file = self.file(key)
        try:
            meta = self.fetcher.probe(file)
        except SourceError as err:
            if err.reason is Reason.SOURCE_NOT_FOUND:
                return None
            raise
        body = self.fetcher.open(file, meta, 0)
        try:
            return _read_whole(body.readinto, key)
        finally:
            body.close()

    def close(self) -> None:
        self.fetcher.close()


def _read_whole(readinto: Any, key: str) -> bytes:
    chunks: list[bytes] = []
    total = 0
    buffer = bytearray(64 * 1024)
    while True:
        n = readinto(memoryview(buffer))
        if n == 0:
            return b"".join(chunks)
        chunks.append(bytes(buffer[:n]))
        total += n
        if total > MAX_DOC_BYTES:
            raise SourceError(
                f"the mirror object {key} is larger than a manifest can be",
                reason=Reason.SOURCE_REJECTED,
                answered=True,
            )


def open_store(config: Config, settings: MirrorSettings) -> MirrorStore:
    cfg = mirror_config(config, settings)
    fetcher: Fetcher
    if settings.is_s3:
        from llmkube_stager.sources.s3.settings import parse_s3_ref, s3_settings
        from llmkube_stager.sources.s3.source import S3Fetcher

        fetcher = S3Fetcher(cfg, parse_s3_ref(cfg), s3_settings(cfg))
    else:
        from llmkube_stager.sources.wire.fetcher import HttpFetcher

        fetcher = HttpFetcher(cfg)
    return MirrorStore(settings, fetcher, cfg)


@dataclass(frozen=True)
class Part:
    number: int
    size_bytes: int
    etag: str


class S3Writer:
    """The seeder's writes to an s3:// mirror (docs/mirror.md "The seeder").
    Each request has the budget of any request of the agent (botocore
    itself never retries, sources/s3/clients.py): a busy store's timeout
    costs a retry, not the seed."""

    def __init__(self, store: MirrorStore, sleep: Callable[[float], None], log: Log) -> None:
        from llmkube_stager.sources.s3.clients import S3Clients
        from llmkube_stager.sources.s3.settings import s3_settings

        cfg = store.config
        self._store = store
        self._sleep = sleep
        self._log = log
        self._bucket, self._prefix = _split_s3(store.settings.url)
        self._clients: S3Clients = S3Clients(cfg, s3_settings(cfg), self._bucket)

    def _key(self, key: str) -> str:
        return f"{self._prefix}/{key}" if self._prefix else key

    def _call(self, key: str, what: str, **params: Any) -> Any:
        return self._retried(key, what, Key=self._key(key), **params)

    def _retried(self, key: str, what: str, **params: Any) -> Any:
        from llmkube_stager.transfer.retry import RetryBudget

        budget = RetryBudget(self._store.config.timeouts, self._sleep, self._log)
        where = self._store.url_of(key)
        try:
            return budget.call(lambda: self._once(where, what, **params), where)
        except SourceError as err:
            if err.reason is Reason.SOURCE_NOT_FOUND or _status(err) == 412:
                raise  # answers the callers read (absent, written by another)
            raise err.amended(remedy=REMEDY_MIRROR) from err

    def _once(self, where: str, what: str, **params: Any) -> Any:
        from llmkube_stager.sources.s3.errors import translate_s3_error

        try:
            return getattr(self._clients.client(), what)(Bucket=self._bucket, **params)
        except Exception as exc:
            raise translate_s3_error(exc, where) from exc

    def head(self, key: str) -> Mapping[str, Any] | None:
        try:
            answer: Mapping[str, Any] = self._call(key, "head_object")
        except SourceError as err:
            if err.reason is Reason.SOURCE_NOT_FOUND:
                return None
            raise
        return answer

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> bool:
        """False when `if_absent` and the object exists (412)."""
        extra = {"IfNoneMatch": "*"} if if_absent else {}
        try:
            self._call(key, "put_object", Body=data, **extra)
        except SourceError as err:
            if if_absent and _status(err) == 412:
                return False
            raise
        return True

    def put_small(self, key: str, data: bytes, sha256: str) -> None:
        self._call(key, "put_object", Body=data, Metadata={"sha256": sha256})

    def find_upload(self, key: str) -> str | None:
        """The upload a killed seeder left for this key (the newest)."""
        answer = self._retried(key, "list_multipart_uploads", Prefix=self._key(key))
        uploads = [u for u in answer.get("Uploads") or () if u.get("Key") == self._key(key)]
        uploads.sort(key=lambda u: u.get("Initiated") or 0)
        return str(uploads[-1]["UploadId"]) if uploads else None

    def create_upload(self, key: str, sha256: str) -> str:
        answer = self._call(key, "create_multipart_upload", Metadata={"sha256": sha256})
        return str(answer["UploadId"])

    def parts(self, key: str, upload: str) -> dict[int, Part]:
        found: dict[int, Part] = {}
        marker = 0
        while True:
            answer = self._call(key, "list_parts", UploadId=upload, PartNumberMarker=marker)
            for p in answer.get("Parts") or ():
                part = Part(int(p["PartNumber"]), int(p["Size"]), str(p["ETag"]).strip('"'))
                found[part.number] = part
            if not answer.get("IsTruncated"):
                return found
            marker = int(answer.get("NextPartNumberMarker") or 0)

    def upload_part(self, key: str, upload: str, number: int, data: bytes) -> str:
        answer = self._call(key, "upload_part", UploadId=upload, PartNumber=number, Body=data)
        return str(answer["ETag"]).strip('"')

    def complete(self, key: str, upload: str, etags: list[str]) -> None:
        parts = [{"PartNumber": n, "ETag": f'"{e}"'} for n, e in enumerate(etags, 1)]
        self._call(
            key, "complete_multipart_upload", UploadId=upload, MultipartUpload={"Parts": parts}
        )

    def abort(self, key: str, upload: str) -> None:
        self._call(key, "abort_multipart_upload", UploadId=upload)

    def close(self) -> None:
        self._clients.close()


def _status(err: SourceError) -> int | None:
    return None if err.wire is None else err.wire.http_status
