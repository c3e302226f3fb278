"""The old scripts' user-visible lines (spec §13), single- and multi-file.

Users and the operator's tests grep these; keep them byte-identical. Text
logs print them whole, with no prefix or fields, when logged under one of
`logs.VERBATIM_EVENTS`.
"""

from __future__ import annotations

from llmkube_stager.schemes import of_kind

REVALIDATING = "Revalidating model against upstream (RefreshPolicy=OnChange)..."


def hit(multi: bool, rel: str, cached: bool = True, kind: str = "http") -> str:
    if multi:
        return f"Model artifact {rel} already cached, skipping download"
    if _copies(kind):
        return "Model already cached, skipping copy"
    if not cached:
        return "Model already exists, skipping download"
    return "Model already cached, skipping download"


def starting(kind: str, multi: bool, rel: str) -> str:
    if multi:
        return f"Downloading model artifact {rel}..."
    row = of_kind(kind)
    line = row.starting_line if row is not None else None
    return line or "Downloading model..."


def finished(kind: str, multi: bool, rel: str) -> str:
    if multi:
        return f"Model artifact {rel} downloaded"
    return "Model copied successfully" if _copies(kind) else "Model downloaded successfully"


def unchanged(multi: bool, rel: str) -> str:
    if multi:
        return f"Model artifact {rel} revalidated (unchanged, skipped download)"
    return "Model revalidated (unchanged, skipped download)"


def refreshed(multi: bool, rel: str) -> str:
    if multi:
        return f"Model artifact {rel} revalidated (downloaded)"
    return "Model revalidated (downloaded)"


def unreachable_kept(multi: bool, rel: str) -> str:
    if multi:
        return f"Revalidation unreachable for {rel}; kept cached copy"
    return "Revalidation unreachable; kept cached copy"


def reader_kept(rel: str, why: str, size_known: bool) -> str:
    """A pod that may not write kept its copy although the origin answered
    (scenario 51/59: never call an answering origin unreachable)."""
    change = "Upstream changed" if size_known else "Upstream size unknown"
    return f"{change} for {rel}; {why}, so it kept the cached copy"


FUSE_READER_WHY = "a serving pod does not stage on a FUSE cache"
READ_ONLY_WHY = "the cache is read-only for this pod"


def missing_and_failed(multi: bool, rel: str) -> str:
    if multi:
        return f"model artifact {rel} missing and revalidation failed"
    return "model missing and revalidation failed"


def missing_and_failed_line(multi: bool, rel: str) -> str:
    """OnChange with nothing cached and no transfer (spec §5.3 step 7, §6.3 step 5)."""
    return f"ERROR: {missing_and_failed(multi, rel)}"


def failed_to_download(rel: str) -> str:
    """Multi-file IfNotPresent transfer failure (spec §6.2, §11.4)."""
    return f"ERROR: failed to download {rel}"


def pinned_kept(multi: bool, rel: str) -> str:
    if multi:
        return (
            f"Model artifact {rel}: the origin served bytes that do not match the pinned "
            "spec.fileSha256; kept the pinned cached copy"
        )
    return (
        "Model revalidated: the origin served bytes that do not match the pinned spec.sha256; "
        "kept the pinned cached copy"
    )


def pin_field(multi: bool) -> str:
    return "spec.fileSha256" if multi else "spec.sha256"


def _copies(kind: str) -> bool:
    """A local copy's lines say "copy" (spec §13): the scheme table's row."""
    row = of_kind(kind)
    return row is not None and row.copies
