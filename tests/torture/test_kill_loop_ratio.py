"""What a SIGKILL loop costs the origin (#21 item 9): a 64 MiB file from an
origin that caps each connection at 16 MiB/s, the stager SIGKILLed at 0.3-1.8
s intervals, then let finish. A kill should lose about a second of transfer
per connection, not the whole attempt: the parallel engine commits its resume
journal early and often while a transfer is young. The figure, bytes served
over the file's size, goes into the torture stats (`kill_loop_ratio`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.sample import payload
from tests.harness.torture import Scale, Stats, kill_loop

MIB = 1 << 20
SIZE = 64 * MIB + 1234
RATE = 16 * MIB  # per connection, like a CDN edge
# The issue measured 3.95x over 20 kills; 5.2-5.7x here before #21 item 9.
MAX_RATIO = 1.6


def test_a_kill_loop_costs_little_more_than_the_file(
    pod: Pod, origin: Origin, tmp_path: Path, scale: Scale, stats: Stats
) -> None:
    data = payload(SIZE, 2121)
    origin.put("/k/model.gguf", data, rate_bytes_per_s=RATE)
    root = tmp_path / "cache"
    env = {
        "CACHE_DIR": str(root),
        "MODEL_SOURCE": origin.url + "/k/model.gguf",
        "MODEL_PATH": str(root / "model.gguf"),
        # Two connections: the transfer (~2 s of it) outlasts several kills.
        "LLMKUBE_CONNECTIONS": "2",
    }
    kills = kill_loop(pod, env, scale.n(10, 20), seed=21)
    pod.run(env=env, timeout=120).ok()

    assert hashlib.sha256((root / "model.gguf").read_bytes()).digest() == (
        hashlib.sha256(data).digest()
    )
    served = sum(r.body_bytes for r in origin.requests("/k/model.gguf", "GET"))
    stats.add(kill_loop_kills=kills, kill_loop_bytes_file=SIZE, kill_loop_bytes_served=served)
    ratio = served / SIZE
    print(f"kill loop: {kills} kills, served {ratio:.2f}x the file")
    assert ratio <= MAX_RATIO, f"{kills} kills: the origin served {ratio:.2f}x the file"
