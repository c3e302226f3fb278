"""#21 item 2, the scenario (run by tests/fuse/test_stamp_truth.py on two
bindfs mounts, by tests/fuse/test_objstores.py on two object-store mounts):
two prefetch stagers on two nodes of one volume, pinned to different
digests of files of equal size (two origins). A is frozen right after its
publish rename; B publishes; A resumes and stamps, and is frozen again
right after its stamp landed. A's node still reports A's inode for the
name (an attribute cache), so every check by name passes there. Pods
pinned to A's digest on A's node must never be served B's bytes: not while
A's stamp stands (readers check the stamp's evidence against the bytes),
not after A finished (A checks its own stamp against the bytes and takes
it back).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

from tests.harness.disk import sha256
from tests.harness.origin import Origin
from tests.harness.pause import await_stopped, pause_flags
from tests.harness.pod import Pod, Run, single_env
from tests.harness.sample import payload

SIZE = 256 * 1024
ONE_CONNECTION = {"LLMKUBE_CONNECTIONS": "1"}


@dataclass
class Verdicts:
    """What pods pinned to X on A's node got: while A's stamp stood
    (A frozen after it), and after A finished; with what a read of the
    file through A's node gave right after each run (what a pod there is
    served)."""

    x: bytes
    y: bytes
    while_stamped: list[tuple[Run, bytes]]
    after: list[tuple[Run, bytes]]


def run_stamp_race(tmp_path: Path, node1: Path, node2: Path) -> Verdicts:
    x, y = payload(SIZE, 2201), payload(SIZE, 2202)
    assert x != y
    with Origin() as origin_a, Origin() as origin_b:
        origin_a.put("/m.gguf", x, etag='"x"')
        origin_b.put("/m.gguf", y, etag='"y"')
        dest_a = node1 / "k" / "model.gguf"
        a = Pod(tmp_path, single_env(origin_a.url + "/m.gguf", dest_a.parent), stager=True)
        b = Pod(tmp_path, single_env(origin_b.url + "/m.gguf", node2 / "k"), stager=True)
        a.env.update(ONE_CONNECTION, MODEL_SHA256=sha256(x))
        b.env.update(ONE_CONNECTION, MODEL_SHA256=sha256(y))
        flags, pause_env = pause_flags([dest_a, f"{dest_a}.sha256"])
        proc_a = a.popen("stage", python_flags=flags, env=pause_env)
        try:
            await_stopped(proc_a)  # after its publish rename, before its stamp
            b.run("stage").ok()
            proc_a.send_signal(signal.SIGCONT)
            await_stopped(proc_a)  # its stamp landed; its own check not yet run
            while_stamped = _readers(tmp_path, origin_a, dest_a.parent, x)
        finally:
            proc_a.send_signal(signal.SIGCONT)
        a.finish(proc_a).ok()
        after = _readers(tmp_path, origin_a, dest_a.parent, x)
    return Verdicts(x, y, while_stamped, after)


def _readers(tmp_path: Path, origin: Origin, root: Path, x: bytes) -> list[tuple[Run, bytes]]:
    """`verify` and `stage` of a serving pod pinned to X, on A's node."""
    env = {**single_env(origin.url + "/m.gguf", root), "MODEL_SHA256": sha256(x)}
    pod = Pod(tmp_path, env)
    found = []
    for command in ("verify", "stage"):
        run = pod.run(command)
        found.append((run, (root / "model.gguf").read_bytes()))
    return found


def assert_never_served_y(verdicts: Verdicts) -> None:
    for run, served in verdicts.while_stamped + verdicts.after:
        if run.returncode == 0:
            assert served == verdicts.x, (
                f"{run.args} accepted bytes that are not the pinned digest's\n{run}"
            )
        assert "Traceback" not in run.stderr, str(run)
