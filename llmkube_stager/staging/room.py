"""Whether the model fits its volume, asked once before the first byte
moves (#44 item 2). The transfer checks each file as it starts
(transfer/engine.py), so a model whose files each fit alone but not
together would fill the volume with its first files and fail on a later
one, leaving a full disk behind: what KServe's local model cache Jobs do
(KServe #6137). The sum is pure; what the partials already hold and the
free space are read by the caller (staging/write.py)."""

from __future__ import annotations

from collections.abc import Iterable

from llmkube_stager.errors import Reason, TransferError


def missing_bytes(sizes: Iterable[tuple[int | None, int]]) -> int:
    """The bytes still to land for (size, bytes its partials hold) of each
    file to transfer; a file of unknown size counts nothing (its own
    transfer checks it once the origin says its size)."""
    return sum(max(size - held, 0) for size, held in sizes if size is not None)


def check_room(need_bytes: int, free_bytes: int | None, files: int, where: str) -> None:
    """Refuse a set that cannot fit before anything is fetched; None: the
    filesystem's free space means nothing (FUSE) or could not be read."""
    if free_bytes is None or need_bytes <= free_bytes:
        return
    raise TransferError(
        f"no space left on device for the model: its {files} file(s) still to download need "
        f"{need_bytes} bytes and {where} has {free_bytes} bytes free; nothing was downloaded",
        reason=Reason.OUT_OF_SPACE,
    )
