"""Archives built in a test, in memory (#31 C3): the tar and zip builders
the KServe tests each kept a copy of.

`tar_of` for regular files only (tarfile's TarInfo defaults: mode 0644,
owner 0); `tar_built` for anything else (directories, links, modes, pax
headers), the members added by the caller's `build`; `zip_of` for a zip of
named entries."""

from __future__ import annotations

import io
import tarfile
import zipfile
from collections.abc import Callable, Mapping
from typing import Any


def tar_built(
    build: Callable[[tarfile.TarFile], None], mode: str = "w:gz", **options: Any
) -> bytes:
    """The bytes of a tar whose members `build` adds; `mode` as tarfile's
    ("w", "w:gz", "w:bz2", "w:xz"), `options` as tarfile.open's (`format`)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode, **options) as tar:  # type: ignore[call-overload]
        build(tar)
    return buffer.getvalue()


def add_member(tar: tarfile.TarFile, name: str, data: bytes, file_mode: int | None = None) -> None:
    """One regular file; `file_mode` where not TarInfo's 0644."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    if file_mode is not None:
        info.mode = file_mode
    tar.addfile(info, io.BytesIO(data))


def tar_of(entries: Mapping[str, bytes], mode: str = "w:gz") -> bytes:
    """A tar of regular files, in the mapping's order."""

    def build(tar: tarfile.TarFile) -> None:
        for name, data in entries.items():
            add_member(tar, name, data)

    return tar_built(build, mode)


def zip_of(entries: Mapping[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A zip of named entries, in the mapping's order (a name ending in "/"
    is a directory entry)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as zipped:
        for name, data in entries.items():
            zipped.writestr(name, data)
    return buffer.getvalue()
