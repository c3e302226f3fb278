"""An OCI artifact of tar layers staged as one model (#43 item 3).

ModelPack's non-raw layers and a modelcar image's layers are tar archives
(tar, tar+gzip): their files are known only once unpacked, so they do not
go through the listed engine (staging/listed.py). Here:

1. A warm IfNotPresent start reads the record of the unpacked set
   (`.llmkube-stager/unpacked.list`, its header naming the reference and
   the manifest digest) and finds every file at its size: no request, no
   unpacking.
2. Each layer is fetched into a partial in the cache's staging area
   (`.llmkube-stager/oci-layers/<hex>.part`, never in the served tree),
   resumed from its size after a dropped connection or a killed pod, and
   checked against the layer digest before it is renamed to `<hex>.tar`:
   a layer with a wrong byte is never unpacked.
3. The room check counts each layer still to fetch, then what the tar
   headers declare for the unpacked tree.
4. The layers are unpacked and published by unpack/layers.py, atomic for
   the model: a kill while unpacking leaves nothing published; a kill
   while publishing is finished by the next start. The layers are then
   deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from llmkube_stager.config import Config
from llmkube_stager.errors import Reason, SourceError, TransferError
from llmkube_stager.layout import KSERVE_PRIVATE_NAME
from llmkube_stager.logs import Log
from llmkube_stager.model import Decision, FileResult, RemoteFile
from llmkube_stager.sources.oci.manifest import ArchiveArtifact, Descriptor
from llmkube_stager.sources.oci.source import OciFetcher, OciSource
from llmkube_stager.staging.prepare import Effects
from llmkube_stager.staging.room import check_room
from llmkube_stager.unpack.archive import RECORD_NAME, _record_lines, unpacked_record

LAYERS_DIR = "oci-layers"
_CHUNK_BYTES = 1 << 20


def source_key(config: Config) -> str:
    """What the record of an unpacked artifact answers: the reference."""
    from llmkube_stager.sources.oci.ref import parse_oci_source

    return f"oci {parse_oci_source(config.source).display}"


def warm_results(config: Config) -> tuple[FileResult, ...] | None:
    """The files of an artifact unpacked before, all at their recorded
    sizes (IfNotPresent), read from the disk alone; None otherwise."""
    if config.refresh_policy != "IfNotPresent" or config.kserve_mode:
        return None
    private = posixpath.join(config.cache_dir, KSERVE_PRIVATE_NAME)
    done = unpacked_record(private, source_key(config), config.cache_dir)
    if done is None:
        return None
    return tuple(_results(private, Decision.REUSE))


def stage_layers(config: Config, art: ArchiveArtifact, effects: Effects) -> tuple[FileResult, ...]:
    """Fetch, check, unpack and publish the artifact's layers, under the
    cache's lock where flock excludes (off FUSE, as the engine's writers):
    two writers never append to one partial."""
    os.makedirs(config.cache_dir, exist_ok=True)
    with _writer_lock(config, effects):
        return _stage_layers(config, art, effects.log)


def _writer_lock(config: Config, effects: Effects) -> contextlib.AbstractContextManager[object]:
    if effects.probe_fs(config.cache_dir).is_fuse is True:
        return contextlib.nullcontext()
    from llmkube_stager.cache.lock import CacheLock

    return CacheLock(
        config.cache_dir, config.timeouts.lock_s, effects.log, effects.monotonic, effects.sleep
    )


def _stage_layers(config: Config, art: ArchiveArtifact, log: Log) -> tuple[FileResult, ...]:
    from llmkube_stager.unpack.layers import declared_bytes, unpack_layers
    from llmkube_stager.unpack.members import ArchiveLimits

    private = posixpath.join(config.cache_dir, KSERVE_PRIVATE_NAME)
    key = source_key(config)
    done = unpacked_record(private, key, config.cache_dir)
    if done is not None and done.archive == art.digest:
        # OnChange of an unmoved manifest, or another writer finished it
        # while this one waited for the lock: the set stands.
        return tuple(_results(private, Decision.REUSE))
    layers_dir = posixpath.join(private, LAYERS_DIR)
    os.makedirs(layers_dir, mode=0o700, exist_ok=True)
    paths = [posixpath.join(layers_dir, f"{layer.hex}.tar") for layer in art.layers]
    held = [_held_bytes(path, layer) for path, layer in zip(paths, art.layers, strict=True)]
    need = sum(layer.size_bytes - h for layer, h in zip(art.layers, held, strict=True))
    check_room(need, _free_bytes(config.cache_dir), len(art.layers), config.cache_dir)
    fetched = _fetch_all(config, art, paths, log)
    named = [
        (f"layer {layer.digest[:19]}", path) for layer, path in zip(art.layers, paths, strict=True)
    ]
    unpacked = sum(declared_bytes(name, path, art.modelcar) for name, path in named)
    free = _free_bytes(config.cache_dir)
    if free is not None and unpacked > free:
        raise TransferError(
            f"no space left on device for the model: its layers unpack to {unpacked} bytes "
            f"(their tar headers) and {config.cache_dir} has {free} bytes free; nothing was "
            "unpacked",
            reason=Reason.OUT_OF_SPACE,
        )
    limits = ArchiveLimits(config.archive_max_bytes, config.archive_max_files)
    done = unpack_layers(named, art.modelcar, key, art.digest, config.cache_dir, limits)
    log.info("unpacked", f"{done.files} files unpacked from {len(paths)} layers", files=done.files)
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
    results = list(_results(private, Decision.FETCH))
    if results:
        results[0] = FileResult(results[0].rel, Decision.FETCH, fetched)
    return tuple(results)


def _results(private: str, decision: Decision) -> Iterator[FileResult]:
    for _size, rel in _record_lines(posixpath.join(private, RECORD_NAME), _any_source(private), []):
        yield FileResult(rel, decision)


def _any_source(private: str) -> str:
    import json

    with open(posixpath.join(private, RECORD_NAME), encoding="utf-8") as record:
        return str(json.loads(record.readline(64 << 10)).get("source", ""))


def _held_bytes(path: str, layer: Descriptor) -> int:
    if os.path.isfile(path):
        return layer.size_bytes
    with contextlib.suppress(OSError):
        return min(os.path.getsize(_part(path)), layer.size_bytes)
    return 0


def _part(path: str) -> str:
    return path.removesuffix(".tar") + ".part"


def _free_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _fetch_all(config: Config, art: ArchiveArtifact, paths: list[str], log: Log) -> int:
    from llmkube_stager.transfer.retry import RetryBudget

    source = OciSource(config, log)
    fetcher = source.fetcher()
    fetched = 0
    try:
        budget = RetryBudget(config.timeouts, _sleep, log)
        for layer, path in zip(art.layers, paths, strict=True):
            if os.path.isfile(path):
                continue  # fetched and checked by an earlier run
            remote = RemoteFile(
                rel=layer.hex,
                url=source.ref.blob_url(layer.digest),
                dest=path,
                sha256=layer.hex,
                size_bytes=layer.size_bytes,
            )
            got = _Received()
            budget.call(
                lambda r=remote, g=got: _fetch_once(fetcher, r, g),  # type: ignore[misc]
                f"layer {layer.digest[:19]}",
            )
            _check_digest(remote, layer, got)
            fetched += got.bytes
    finally:
        fetcher.close()
    return fetched


def _sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


@dataclass
class _Received:
    """The bytes received by this run, and the layer's sha256 over the
    partial's first `hashed` bytes: taken while receiving, so the layer is
    not read again to be checked (a resumed partial's prefix is read once)."""

    bytes: int = 0
    hashed: int = 0
    digest: Any = field(default_factory=hashlib.sha256)

    def catch_up(self, part: str, offset: int) -> None:
        if self.hashed == offset:
            return
        self.digest, self.hashed = hashlib.sha256(), 0
        with open(part, "rb") as prefix:
            while self.hashed < offset:
                chunk = prefix.read(min(_CHUNK_BYTES, offset - self.hashed))
                if not chunk:
                    break
                self.digest.update(chunk)
                self.hashed += len(chunk)


def _fetch_once(fetcher: OciFetcher, remote: RemoteFile, got: _Received) -> None:
    """Append what the partial lacks; a 200 to the Range restarts it."""
    size = remote.size_bytes or 0
    part = _part(remote.dest)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(part, flags, 0o600)
    try:
        offset = os.fstat(fd).st_size
        if offset > size:
            os.ftruncate(fd, 0)
            offset = 0
        if offset < size:
            offset = _receive(fetcher, remote, fd, offset, got)
        if offset < size:
            # The connection ended early: retried, resuming from here.
            raise SourceError(
                f"layer {remote.rel[:12]} ended at {offset} of its {size} bytes",
                reason=Reason.SOURCE_UNAVAILABLE,
                transient=True,
            )
        if offset != size:
            raise TransferError(
                f"layer {remote.rel[:12]} ended at {offset} of its {size} bytes",
                reason=Reason.SIZE_MISMATCH,
            )
        os.fsync(fd)
    finally:
        os.close(fd)


def _receive(fetcher: OciFetcher, remote: RemoteFile, fd: int, offset: int, got: _Received) -> int:
    body = fetcher.open(remote, fetcher.probe(remote), offset)
    try:
        if body.start != offset:  # the registry ignored Range: from byte 0
            os.ftruncate(fd, body.start)
            offset = body.start
        got.catch_up(_part(remote.dest), offset)
        os.lseek(fd, offset, os.SEEK_SET)
        buffer = bytearray(_CHUNK_BYTES)
        view = memoryview(buffer)
        while (n := body.readinto(view)) > 0:
            if offset + n > (remote.size_bytes or 0):
                raise TransferError(
                    f"layer {remote.rel[:12]} is longer than the manifest says",
                    reason=Reason.SIZE_MISMATCH,
                )
            chunk = view[:n]
            while chunk:
                chunk = chunk[os.write(fd, chunk) :]
            got.digest.update(view[:n])
            offset += n
            got.hashed = offset
            got.bytes += n
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()
    return offset


def _check_digest(remote: RemoteFile, layer: Descriptor, got: _Received) -> None:
    """The whole partial against the layer digest, before anything is
    unpacked; a wrong one is deleted (the next run fetches it again)."""
    part = _part(remote.dest)
    got.catch_up(part, layer.size_bytes)  # a partial complete before this run
    digest = got.digest
    if got.hashed != layer.size_bytes or digest.hexdigest() != layer.hex:
        os.unlink(part)
        raise TransferError(
            f"layer {layer.digest[:19]} of {remote.url.split('/v2/', 1)[-1][:200]} does not "
            f"match its digest (sha256 {digest.hexdigest()[:12]}...): nothing was unpacked",
            reason=Reason.CHECKSUM_MISMATCH,
        )
    os.replace(part, remote.dest)
