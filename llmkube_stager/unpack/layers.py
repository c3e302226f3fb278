"""An OCI artifact's tar layers unpacked into one model tree (#43 item 3).

The layers are already on the volume, each checked against its digest
(staging/layers.py). They are read in manifest order into one private work
directory by the rules of archive.py and members.py (bounded memory,
nothing outside it, no links out, no device files), a later layer's file
replacing an earlier one's as a container runtime applies them. OCI
whiteouts (`.wh.` names), which delete what an earlier layer holds, are
refused by name. A modelcar image keeps the model under `/models` and a
whole OS in its base layers: only its `models/` folder is unpacked, and it
becomes the model's root; a ModelPack layer's members are the model's
paths already.

Published as archive.py publishes KServe's archives: one syncfs, an intent
naming the finished work directory, its entries renamed into the model
directory (a killed container finishes the same publish), then the record
(`unpacked.list`, the manifest digest in its header) renamed into place.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import IO

from llmkube_stager.layout import KSERVE_PRIVATE_NAME as PRIVATE_DIR
from llmkube_stager.unpack.archive import (
    _RECORD_VERSION,
    Unpacked,
    _bad_bytes,
    _clear_stale_work,
    _pending_publish,
    intend,
    publish_work,
)
from llmkube_stager.unpack.members import ArchiveLimits, ArchiveRefused, Writer
from llmkube_stager.unpack.reading import HARDLINK, Bound, Member, tar_members

MODELCAR_ROOT = "models"
_INTENT_NAME = "publishing"
WHITEOUT_PREFIX = ".wh."


def unpack_layers(
    layers: Sequence[tuple[str, str]],
    modelcar: bool,
    source: str,
    manifest_digest: str,
    dest: str,
    limits: ArchiveLimits,
) -> Unpacked:
    """Unpack (name, path) of each layer, in order, into `dest` as one
    model, or finish the publish a killed container left."""
    private = posixpath.join(dest, PRIVATE_DIR)
    os.makedirs(private, mode=0o700, exist_ok=True)
    work = _pending_publish(private, source)
    if work is None:
        _clear_stale_work(private)
        work = f"unpack.{os.urandom(6).hex()}"
        os.mkdir(posixpath.join(private, work), 0o700)
        try:
            _write_layers(layers, modelcar, posixpath.join(private, work), limits)
            _write_record(posixpath.join(private, work), source, manifest_digest)
        except BaseException:
            _clear_stale_work(private)
            raise
        intend(private, work, source)
    done = publish_work(private, work, source, dest, source)
    _tidy(private)
    return done


def _write_layers(
    layers: Sequence[tuple[str, str]], modelcar: bool, work: str, limits: ArchiveLimits
) -> None:
    with open(os.devnull, "w", encoding="utf-8") as nowhere:
        for name, path in layers:
            # The record is written from the finished tree: a replaced
            # file would be listed twice by the writer.
            writer = Writer(work, name, limits, nowhere, layered=True)
            with _refusing(name):
                for member in tar_members(path):
                    kept = _kept(member, modelcar, writer)
                    if kept is not None:
                        writer.add(kept)


@contextlib.contextmanager
def _refusing(name: str) -> Iterator[None]:
    """A bound hit or bytes that are no tar: ArchiveRefused, by the layer's name."""
    try:
        with _bad_bytes(name, "tar"):
            yield
    except Bound as bound:
        raise ArchiveRefused(name, str(bound)) from None


def _kept(member: Member, modelcar: bool, writer: Writer) -> Member | None:
    """The member as the model's path, or None for a modelcar's member
    outside `models/` (its OS). A whiteout is refused by name."""
    if modelcar:
        parts = [p for p in member.name.split("/") if p not in ("", ".")]
        if not parts or parts[0] != MODELCAR_ROOT:
            return None
        if member.name.startswith("/") or len(parts) == 1:
            # Absolute: refused by the writer; `models/` itself: made anyway.
            return member if member.name.startswith("/") else None
        member = replace(member, name="/".join(parts[1:]))
        if member.kind == HARDLINK:
            target = [p for p in member.link.split("/") if p not in ("", ".")]
            if not target or target[0] != MODELCAR_ROOT or member.link.startswith("/"):
                raise writer.refuse(
                    f"the hard link {member.name!r:.100} points outside {MODELCAR_ROOT}/"
                )
            member = replace(member, link="/".join(target[1:]))
    if any(p.startswith(WHITEOUT_PREFIX) for p in member.name.split("/")):
        raise writer.refuse(
            f"the member {member.name!r:.100} is an OCI whiteout (.wh.), which deletes what an "
            "earlier layer holds: push the model's final tree in its layers"
        )
    return member


def _write_record(work: str, source: str, manifest_digest: str) -> None:
    """`<work>.list` of every regular file of the finished tree, written as
    a stream (one directory's names in memory at a time)."""
    import json

    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(f"{work}.list", flags, 0o644)
    with open(fd, "w", encoding="utf-8", errors="surrogateescape") as record:
        head = {"v": _RECORD_VERSION, "source": source, "archive": manifest_digest}
        record.write(json.dumps(head) + "\n")
        for size, rel in _files(work):
            record.write(f"{size} {rel}\n")


def _files(work: str) -> Iterator[tuple[int, str]]:
    for top, _dirs, names in os.walk(work):
        for name in names:
            path = posixpath.join(top, name)
            st = os.lstat(path)
            if not os.path.islink(path):
                yield st.st_size, posixpath.relpath(path, work)


def _tidy(private: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(posixpath.join(private, _INTENT_NAME))
    _clear_stale_work(private)


def declared_bytes(name: str, path: str, modelcar: bool) -> int:
    """The unpacked size the layer's tar headers declare (of its `models/`
    folder for a modelcar): what the room check counts before unpacking."""
    total = 0
    with _refusing(name):
        for member in tar_members(path):
            parts = [p for p in member.name.split("/") if p not in ("", ".")]
            if modelcar and (not parts or parts[0] != MODELCAR_ROOT):
                continue
            if member.stream is not None:
                total += _size_of(member.stream)
    return total


def _size_of(stream: IO[bytes]) -> int:
    # tarfile's ExFileObject: a reader over the member, whose header's
    # size its raw part holds (nothing is read to learn it).
    size = getattr(getattr(stream, "raw", None), "size", None)
    return int(size) if isinstance(size, int) else 0
