"""Durable-write floors on this disk, interleaved 3x: dd + one fsync (the
bench's floor), dd oflag=direct, and a writer that starts write-back every
64 MiB (sync_file_range, as the agent's page-cache path) then fsyncs; no
network, no hash (docs/performance.md, run 3's experiment).

    python bench/floor.py SOURCE_FILE OUTPUT_FILE   (same filesystem as a cache)
"""

import ctypes
import os
import statistics
import subprocess
import sys
import time

SRC = sys.argv[1]
OUT = sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
sfr = libc.sync_file_range
sfr.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]


def progressive():
    fd = os.open(OUT, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    pending = 0
    with open(SRC, "rb", buffering=0) as src:
        while chunk := src.read(4 << 20):
            os.write(fd, chunk)
            pending += len(chunk)
            if pending >= 64 << 20:
                sfr(fd, 0, 0, 1)
                sfr(fd, 0, 0, 2)
                pending = 0
    os.fsync(fd)
    os.close(fd)


def dd(extra):
    subprocess.run(
        f"cat {SRC} | dd of={OUT} bs=4M iflag=fullblock {extra} status=none", shell=True, check=True
    )


tools = {
    "dd conv=fsync": lambda: dd("conv=fsync"),
    "dd oflag=direct": lambda: dd("oflag=direct conv=fsync"),
    "write-back every 64 MiB + fsync": progressive,
}
times = {k: [] for k in tools}
subprocess.run(["cat", SRC], stdout=subprocess.DEVNULL)
for _ in range(3):
    for name, fn in tools.items():
        if os.path.exists(OUT):
            os.unlink(OUT)
        os.sync()
        t = time.monotonic()
        fn()
        times[name].append(time.monotonic() - t)
os.unlink(OUT)
size = os.path.getsize(SRC)
for name, ts in times.items():
    m = statistics.median(ts)
    runs = " ".join(f"{t:.2f}" for t in ts)
    print(f"{name:34} median {m:6.2f} s  {size / m / 1e6:6.0f} MB/s  runs {runs}")
