"""Listings of many objects, served page by page in each cloud's own wire
form (S3 ListObjectsV2 as botocore parses it, the GCS JSON API's bytes,
Azure List Blobs XML), made on demand so that the fake holds one page at a
time: what a fast listing endpoint hands the agent's listing step (#41
item 5). `python -m tests.harness.listings CLOUD N` lists N objects through
the agent's own listing code and prints, as JSON, the files listed and the
process's peak RSS before and after (KiB).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmkube_stager.sources.azure.listing import PAGE_BLOBS

# A long but ordinary name (~90 bytes): a sharded checkpoint's layout.
PAGE_OBJECTS = 1000
MD5_B64 = "1B2M2Y8AsgTpgAmY7PhCfg=="


def object_name(i: int, n: int) -> str:
    return f"models/llama-3-70b-instruct/shards/layer-{i // 100:05d}/model-{i:06d}-of-{n:06d}.bin"


def _span(token: str | None, n: int, per_page: int) -> tuple[int, int]:
    start = int(token or 0)
    return start, min(start + per_page, n)


def s3_page(n: int) -> Callable[[str, str | None], dict[str, Any]]:
    def page(prefix: str, token: str | None) -> dict[str, Any]:
        start, end = _span(token, n, PAGE_OBJECTS)
        contents = [
            {"Key": object_name(i, n), "Size": 1 << 20, "ETag": f'"{i:032x}"'}
            for i in range(start, end)
        ]
        return {"Contents": contents, "IsTruncated": end < n, "NextContinuationToken": str(end)}

    return page


def gcs_page(n: int) -> Callable[[str, str | None], dict[str, Any]]:
    def page(prefix: str, token: str | None) -> dict[str, Any]:
        start, end = _span(token, n, PAGE_OBJECTS)
        items = [
            {
                "kind": "storage#object",
                "name": object_name(i, n),
                "size": str(1 << 20),
                "generation": str(1_700_000_000_000_000 + i),
                "md5Hash": MD5_B64,
                "crc32c": "AAAAAA==",
            }
            for i in range(start, end)
        ]
        more = {"nextPageToken": str(end)} if end < n else {}
        # Parsed from its bytes, as the session parses the answer (json_of).
        doc: dict[str, Any] = json.loads(json.dumps({"items": items, **more}))
        return doc

    return page


def azure_page(n: int) -> Callable[[str, str], bytes]:
    def page(prefix: str, marker: str) -> bytes:
        start, end = _span(marker, n, PAGE_BLOBS)
        blobs = "".join(
            f"<Blob><Name>{object_name(i, n)}</Name><Properties>"
            f"<Content-Length>{1 << 20}</Content-Length><Etag>0x8D{i:013X}</Etag>"
            f"<Content-MD5>{MD5_B64}</Content-MD5></Properties></Blob>"
            for i in range(start, end)
        )
        marker_el = f"<NextMarker>{end}</NextMarker>" if end < n else "<NextMarker/>"
        return (
            "<?xml version='1.0' encoding='utf-8'?><EnumerationResults>"
            f"<Blobs>{blobs}</Blobs>{marker_el}</EnumerationResults>"
        ).encode()

    return page


def list_through_the_agent(cloud: str, n: int) -> int:
    """The files the agent's listing of `models/` keeps, N objects served."""
    if cloud == "s3":
        from llmkube_stager.sources.s3.listing import list_objects

        return len(list_objects("s3://b/models", "b", "models", s3_page(n)).files)
    if cloud == "gs":
        from llmkube_stager.sources.gcs.listing import list_objects as list_gcs

        return len(list_gcs("gs://b/models", "b", "models", gcs_page(n)).files)
    from llmkube_stager.sources.azure.listing import list_blobs

    return len(list_blobs("az://a/c/models", "c", "models", azure_page(n)).files)


def _peak_kib() -> int:
    """This process's own peak RSS. Not getrusage's ru_maxrss: Linux keeps it
    across execve, so a child of a big pytest (876 MiB late in the full
    suite) reports the parent's size, whatever the listing used."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


if __name__ == "__main__":
    cloud, count = sys.argv[1], int(sys.argv[2])
    import llmkube_stager.sources.gcs.listing
    import llmkube_stager.sources.s3.listing  # noqa: F401  (imported before the baseline)

    before = _peak_kib()
    files = list_through_the_agent(cloud, count)
    print(json.dumps({"files": files, "before_kib": before, "peak_kib": _peak_kib()}))
