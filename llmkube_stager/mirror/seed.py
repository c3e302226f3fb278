"""The seeder (docs/mirror.md "The seeder"): after a run staged a model
from its origin and published it verified in the cache, each file goes to
the mirror, then the manifest, written last and only if absent, then the
ref that names the version.

Each file is hashed again while it is read for the upload, and the upload
is refused unless the digest is the one the run verified (the origin's
sha256, a pin): the mirror never gets bytes the seeder did not verify.
A large file goes by multipart upload; after a kill the upload is found
again (ListMultipartUploads) and a part it holds already, of the same size
and MD5, is not sent again.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import BinaryIO

from llmkube_stager.errors import Reason, SourceError, TransferError
from llmkube_stager.logs import Log
from llmkube_stager.mirror.layout import (
    Entry,
    MirrorManifest,
    encode_manifest,
    encode_ref,
    version_key,
)
from llmkube_stager.mirror.reader import MirrorFetcher
from llmkube_stager.mirror.store import S3Writer
from llmkube_stager.model import Manifest, RemoteFile
from llmkube_stager.sources.base import Fetcher, RemoteMeta

# Parts are read one at a time into memory; S3 wants at least 5 MiB but
# the last; 10,000 parts at most: 16 MiB parts carry files up to 156 GiB.
PART_BYTES = 16 * 1024 * 1024
_READ_BYTES = 1024 * 1024


def seed(fetcher: Fetcher, manifest: Manifest, log: Log, sleep: Callable[[float], None]) -> None:
    """Upload the model `manifest` names, as staged in the cache, unless
    the mirror holds its version already."""
    if not isinstance(fetcher, MirrorFetcher):
        return
    answers = {f.rel: fetcher.origin_answer(f) for f in manifest.files}
    version = _version(fetcher, manifest, answers)
    route = fetcher.route
    if fetcher.version_held(version) is not None:
        log.info("mirror_held", f"the mirror holds version {version} already: nothing to seed")
        return
    writer = S3Writer(fetcher.store, sleep, log)
    try:
        entries = {
            route.name_of(f): _upload(
                writer, route.place.file(version, route.name_of(f)), f, answers[f.rel]
            )
            for f in manifest.files
        }
        document = encode_manifest(MirrorManifest(route.identity, version, entries))
        if writer.put(route.place.manifest(version), document, if_absent=True):
            log.info(
                "mirror_seeded",
                f"the mirror holds version {version} of {route.identity} now "
                f"({len(entries)} files)",
            )
        else:
            log.info(
                "mirror_seeded_by_another",
                f"another seeder wrote the manifest of version {version} first",
            )
        writer.put(route.place.ref(route.ref), encode_ref(version))
    finally:
        writer.close()


def _version(fetcher: MirrorFetcher, manifest: Manifest, answers: dict[str, RemoteMeta]) -> str:
    route = fetcher.route
    if route.commits:
        commit = getattr(fetcher.origin, "resolved_commit", lambda: None)()
        if not isinstance(commit, str) or not commit:
            raise SourceError(
                "the hub named no commit for this run: the mirror cannot be seeded from a hub "
                "mirror without its API",
                reason=Reason.SOURCE_REJECTED,
                answered=True,
            )
        return commit
    return version_key(
        (route.name_of(f), answers[f.rel].size_bytes, answers[f.rel].validator)
        for f in manifest.files
    )


def _expected(file: RemoteFile, answer: RemoteMeta) -> str | None:
    """The digest the run verified the file against, if any."""
    return file.sha256 or answer.sha256


def _upload(writer: S3Writer, key: str, file: RemoteFile, answer: RemoteMeta) -> Entry:
    with open(file.dest, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if answer.size_bytes is not None and size != answer.size_bytes:
            raise TransferError(
                f"{file.rel} in the cache has {size} bytes, the origin {answer.size_bytes}: "
                "not published to the mirror",
                reason=Reason.SIZE_MISMATCH,
                file=file.rel,
            )
        expected = _expected(file, answer) or _hash(handle)
        head = writer.head(key)
        if head is not None and _holds(head, size, expected):
            digest = expected  # a killed seeder's upload finished: not sent again
        elif size < PART_BYTES:
            digest = _put_whole(writer, key, handle, expected)
        else:
            digest = _put_parts(writer, key, handle, size, expected)
    _check(file, digest, expected)
    return Entry(size, digest, answer.etag, answer.last_modified)


def _holds(head: object, size: int, sha256: str) -> bool:
    if not isinstance(head, dict):
        return False
    metadata = head.get("Metadata") or {}
    return head.get("ContentLength") == size and metadata.get("sha256") == sha256


def _hash(handle: BinaryIO) -> str:
    digest = hashlib.sha256()
    handle.seek(0)
    while chunk := handle.read(_READ_BYTES):
        digest.update(chunk)
    handle.seek(0)
    return digest.hexdigest()


def _check(file: RemoteFile, digest: str, expected: str) -> None:
    if digest != expected:
        raise TransferError(
            f"{file.rel} in the cache does not have the sha256 it was verified with "
            f"({expected}, read {digest}): not published to the mirror",
            reason=Reason.CHECKSUM_MISMATCH,
            file=file.rel,
        )


def _put_whole(writer: S3Writer, key: str, handle: BinaryIO, expected: str) -> str:
    handle.seek(0)
    data = handle.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest == expected:
        writer.put_small(key, data, digest)
    return digest


def _put_parts(writer: S3Writer, key: str, handle: BinaryIO, size: int, expected: str) -> str:
    upload = writer.find_upload(key) or writer.create_upload(key, expected)
    held = writer.parts(key, upload)
    digest = hashlib.sha256()
    etags: list[str] = []
    handle.seek(0)
    for number in range(1, -(-size // PART_BYTES) + 1):
        data = handle.read(PART_BYTES)
        digest.update(data)
        md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
        part = held.get(number)
        if part is not None and part.size_bytes == len(data) and part.etag == md5:
            etags.append(md5)  # uploaded before a kill: not sent again
            continue
        etags.append(writer.upload_part(key, upload, number, data))
    if digest.hexdigest() != expected:
        writer.abort(key, upload)
        return digest.hexdigest()
    try:
        writer.complete(key, upload, etags)
    except SourceError as err:
        # Another seeder of the same version completed this upload first:
        # its object is these bytes, whole (CompleteMultipartUpload is atomic).
        head = writer.head(key)
        if err.reason is not Reason.SOURCE_NOT_FOUND or head is None:
            raise
        if not _holds(head, size, expected):
            raise
    return digest.hexdigest()
