"""The transfer engine: one file from its origin into a complete, verified,
unpublished partial, then published by rename.

    engine.py     picks the path: one stream first, ranged connections when slow
    stream.py     one resumable, size-checked connection into a partial
    widen.py      when that stream hands over to ranged connections
    parallel.py   N ranged connections into one sparse file, with a journal
    pipeline.py   receive / sha256 / write on three threads
    directio.py   O_DIRECT writes and reads, aligned buffers
    hashing.py    sha256 of partial prefixes (resume)
    writemode.py  page cache or O_DIRECT, per file (LLMKUBE_DIRECT_IO=auto)
    writeback.py  write-back while receiving (buffered writes)
    predecessor.py  waiting for a dead writer's partial instead of refetching
    target.py     a partial's identity, the validators of every response,
                  a fresh signed URL when one expired
    retry.py      the bounded retry budget
    progress.py   the progress lines and the partial's heartbeat
    types.py      value types shared by the above (the package's bottom)

It imports cache/ and sources/, never the reverse. Importing this package
costs threads, hashing and sockets: only a run that transfers does.
"""

from llmkube_stager.transfer.engine import discard, fetch_partial, probe, publish_completed
from llmkube_stager.transfer.progress import KeepAlive, ModelProgress
from llmkube_stager.transfer.types import Completed, Handover, TransferEffects

__all__ = [
    "Completed",
    "Handover",
    "KeepAlive",
    "ModelProgress",
    "TransferEffects",
    "discard",
    "fetch_partial",
    "probe",
    "publish_completed",
]
