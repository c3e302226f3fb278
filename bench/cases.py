"""The bench's cases for one file or a few large ones, every source kind
(#6, #16 items 1, 2, 5, 6). Each case runs its baseline and the agent
alternately (`interleave`), so a busy minute of a shared machine hits both.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from benchlib import (
    BIG_MIB,
    CAPS_MBPS,
    PY,
    RUNS,
    Case,
    Context,
    Peers,
    Row,
    Sample,
    Target,
    agent_cmd,
    agent_env,
    agent_start,
    curl_files,
    curl_script,
    disk_floor,
    durable,
    fresh,
    interleave,
    repeat,
    run,
    sh,
    watch_origin,
    write_model,
)

BIG_CASE = f"single {BIG_MIB // 1024 or BIG_MIB} {'GiB' if BIG_MIB >= 1024 else 'MiB'}"


def single(ctx: Context) -> list[Row]:
    """One large file, MODEL_SHA256 pinned (every byte hashed) vs curl."""
    path, sha = ctx.big()
    url = f"{ctx.http()}/big/big.bin"
    env = agent_env(ctx.work, MODEL_SOURCE=url, MODEL_SHA256=sha, MODEL_PATH=ctx.out("a/big.bin"))
    direct = dict(env, LLMKUBE_DIRECT_IO="on")
    size = os.path.getsize(path)
    curl, curl_durable, agent, start, agent_direct, floor = interleave(
        RUNS,
        [
            (lambda: run(curl_files([url], ctx.out("c"))), lambda: fresh(ctx.out("c"))),
            (
                lambda: run(durable(curl_files([url], ctx.out("c")), ctx.out("c"))),
                lambda: fresh(ctx.out("c")),
            ),
            (lambda: run(agent_cmd(), env), lambda: fresh(ctx.out("a"))),
            agent_start(env),
            (lambda: run(agent_cmd(), direct), lambda: fresh(ctx.out("a"))),
            disk_floor(ctx.out("floor"), [path]),
        ],
    )
    mb = size / 1e6
    case = f"{BIG_CASE}, MODEL_SHA256"
    peers = Peers(curl, curl_durable, floor, start)
    return [
        *peers.rows(case, ("curl (no verify)", "curl + fsync"), mb),
        peers.agent(case, "agent (sha256)", agent, mb, Target(">= 1.15x", 1.15)),
        Row(case, "agent DIRECT_IO=on", agent_direct, mb, curl.wall_s),
    ]


def servable(ctx: Context) -> list[Row]:
    """Time-to-servable (#16 item 1): staging plus the inference server's
    first read of every byte (`cat file > /dev/null`), pinned. The agent's
    write modes side by side (LLMKUBE_DIRECT_IO)."""
    path, sha = ctx.big()
    url = f"{ctx.http()}/big/big.bin"
    mb = os.path.getsize(path) / 1e6

    def agent_env_for(mode: str | None) -> dict[str, str]:
        dest = ctx.out(f"s-{mode or 'default'}/big.bin")
        extra = {"LLMKUBE_DIRECT_IO": mode} if mode else {}
        return agent_env(ctx.work, MODEL_SOURCE=url, MODEL_SHA256=sha, MODEL_PATH=dest, **extra)

    def agent_then_read(mode: str | None) -> tuple[Callable[[], Sample], Callable[[], object]]:
        env = agent_env_for(mode)
        dest = env["MODEL_PATH"]
        return (
            lambda: run(sh(f"{PY} -m llmkube_stager stage && cat {dest} > /dev/null"), env),
            lambda: fresh(os.path.dirname(dest)),
        )

    curl_dir = ctx.out("sc")

    def curl_then_read(sync: str) -> tuple[Callable[[], Sample], Callable[[], object]]:
        script = f"{curl_script([url], curl_dir)}{sync} && cat {curl_dir}/f0 > /dev/null"
        return (lambda: run(sh(script)), lambda: fresh(curl_dir))

    modes = [None, "on", "off"]
    curl, curl_durable, floor, agent, start, *others = interleave(
        RUNS,
        [
            curl_then_read(""),
            curl_then_read(f" && sync {curl_dir}/f0 {curl_dir}"),
            disk_floor(ctx.out("floor"), [path]),
            agent_then_read(modes[0]),
            agent_start(agent_env_for(modes[0])),
            *(agent_then_read(m) for m in modes[1:]),
        ],
    )
    agents = [agent, *others]
    case = f"servable {BIG_CASE}, stage + cat"
    peers = Peers(curl, curl_durable, floor, start)
    rows = peers.rows(case, ("curl + cat", "curl + fsync + cat"), mb)
    for mode, sample in zip(modes, agents, strict=True):
        if mode is None:
            rows.append(peers.agent(case, "agent + cat", sample, mb, Target(">= 1.1x curl", 1.1)))
        else:
            rows.append(Row(case, f"agent DIRECT_IO={mode}", sample, mb, curl.wall_s))
    return rows


def multi(ctx: Context) -> list[Row]:
    """4 shards + config.json, MODEL_FILE_SHA256 pinned, vs curl one by one."""
    pins = ctx.shards()
    names = sorted(pins)
    base = f"{ctx.http()}/multi"
    env = agent_env(
        ctx.work,
        MODEL_SOURCE=f"{base}/",
        MODEL_FILES="\n".join(names),
        CACHE_DIR=ctx.out("a"),
        MODEL_FILE_SHA256="\n".join(f"{pins[n]} {n}" for n in names),
    )
    urls = [f"{base}/{n}" for n in names]
    sources = [os.path.join(ctx.multi_dir(), n) for n in names]
    total_bytes = sum(map(os.path.getsize, sources))
    curl, curl_durable, agent, start, floor = interleave(
        RUNS,
        [
            (lambda: run(curl_files(urls, ctx.out("c"))), lambda: fresh(ctx.out("c"))),
            (
                lambda: run(durable(curl_files(urls, ctx.out("c")), ctx.out("c"))),
                lambda: fresh(ctx.out("c")),
            ),
            (lambda: run(agent_cmd(), env), lambda: fresh(ctx.out("a"))),
            agent_start(env),
            disk_floor(ctx.out("floor"), sources),
        ],
    )
    total = total_bytes / 1e6
    case = "4 shards + json, pinned"
    peers = Peers(curl, curl_durable, floor, start)
    return [
        *peers.rows(case, ("curl (no verify)", "curl + fsync"), total),
        peers.agent(case, "agent (sha256)", agent, total, Target(">= 1.05x", 1.05)),
    ]


def warm(ctx: Context) -> list[Row]:
    """A cached 40-file model: no request, no heavy import, fast."""
    cache = ctx.out("warm")
    os.makedirs(cache, exist_ok=True)
    names = [f"model-{i:05d}-of-00040.safetensors" for i in range(1, 41)]
    for name in names:
        with open(os.path.join(cache, name), "wb") as handle:
            handle.write(b"\0" * 4096)
        with open(os.path.join(cache, name + ".llmkube-size"), "w") as handle:
            handle.write("4096")
    ctx.http()
    before = ctx.servers.requests_logged()
    env = agent_env(
        ctx.work,
        MODEL_SOURCE=f"http://127.0.0.1:{ctx.servers.http_port}/x/",
        MODEL_FILES="\n".join(names),
        CACHE_DIR=cache,
    )
    sample = repeat(max(RUNS, 5), lambda: run(agent_cmd(), env), lambda: None)
    requests = ctx.servers.requests_logged() - before
    heavy = warm_heavy_imports(env)
    note = f"requests={requests}; heavy imports={','.join(heavy) or 'none'}"
    target = Target(
        "<= 175 ms, no request, no heavy import", max_s=0.175, holds=not (requests or heavy)
    )
    return [Row("warm start, 40 files", "agent", sample, 0.0, None, note, target)]


def warm_heavy_imports(env: dict[str, str]) -> list[str]:
    code = (
        "import sys, runpy; sys.argv=['llmkube-stager','stage']\n"
        "try:\n runpy.run_module('llmkube_stager', run_name='__main__')\n"
        "except SystemExit: pass\n"
        "print(','.join(m for m in ('httpx','boto3','botocore','huggingface_hub','filelock',"
        "'psutil','ssl','http.client') if m in sys.modules))"
    )
    out = run([PY, "-c", code], env).stdout.strip()
    return [m for m in out.split(",") if m]


CAPPED_MIB = int(os.environ.get("BENCH_CAPPED_MIB", "512"))


def capped(ctx: Context) -> list[Row]:
    """A CDN edge that caps each connection at 20 MB/s (#16 item 2): the
    agent widens to ranged connections, curl has one."""
    path = os.path.join(ctx.servers.www, "capped-src", "model.bin")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_model(path, CAPPED_MIB, 3)
        os.sync()
    url = f"{ctx.http()}/capped20/capped-src/model.bin"
    env = agent_env(ctx.work, MODEL_SOURCE=url, MODEL_PATH=ctx.out("a/model.bin"))
    curl, agent = interleave(
        RUNS,
        [
            (lambda: run(curl_files([url], ctx.out("c"))), lambda: fresh(ctx.out("c"))),
            (lambda: run(agent_cmd(), env), lambda: fresh(ctx.out("a"))),
        ],
    )
    mb = os.path.getsize(path) / 1e6
    case = f"capped origin ({CAPS_MBPS['capped20']} MB/s/conn), {CAPPED_MIB} MiB"
    return [
        Row(case, "curl", curl, mb),
        Row(case, "agent", agent, mb, curl.wall_s, target=Target(">= 6x", 6.0)),
    ]


def resume(ctx: Context) -> list[Row]:
    """SIGKILL at 50% on the 50 MB/s-capped origin, then restart: the bytes
    fetched again."""
    path, _ = ctx.big()
    size = os.path.getsize(path)
    dest_dir = fresh(ctx.out("r"))
    env = agent_env(
        ctx.work,
        MODEL_SOURCE=f"{ctx.http()}/capped/big/big.bin",
        MODEL_PATH=os.path.join(dest_dir, "big.bin"),
    )
    run(agent_cmd(), env, kill_when=lambda: partial_progress(dest_dir) >= size // 2)
    done_at_kill = partial_progress(dest_dir)
    second = run(agent_cmd(), env)
    with open(os.path.join(ctx.work, "term.json")) as handle:
        again = json.load(handle)["stats"]["bytes"]
    share = again * 100 / size
    note = f"killed at {done_at_kill * 100 // size}%; fetched again {share:.1f}%"
    target = Target("<= 55%", holds=share <= 55)
    return [Row("resume after SIGKILL at 50%", "agent", second, again / 1e6, None, note, target)]


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


_BOTO = (
    "import boto3,sys; c=boto3.client('s3',endpoint_url=sys.argv[1],"
    "aws_access_key_id='benchkey',aws_secret_access_key='benchsecret',"
    "region_name='us-east-1')\n"
)
# The peer's path for an object and for a prefix (list, then each object).
BOTO_ONE = _BOTO + "c.download_file('bench',sys.argv[2],sys.argv[3])"
BOTO_PREFIX = (
    _BOTO + "import os\n"
    "for o in c.list_objects_v2(Bucket='bench',Prefix=sys.argv[2])['Contents']:\n"
    " c.download_file('bench',o['Key'],os.path.join(sys.argv[3],os.path.basename(o['Key'])))"
)


def s3(ctx: Context) -> list[Row]:
    """SeaweedFS's S3 server: one large object, and a prefix of 4 shards
    (MODEL_FILES), vs boto3 `download_file` (#16 item 2)."""
    endpoint = ctx.s3()
    if endpoint is None:
        print("s3: SeaweedFS (weed) is not installed; skipped", flush=True)
        return []
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="benchkey",
        aws_secret_access_key="benchsecret",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket="bench")
    big, _ = ctx.big()
    client.upload_file(big, "bench", "big.bin")
    pins = ctx.shards()
    shards = sorted(n for n in pins if n.endswith(".safetensors"))
    for name in shards:
        client.upload_file(os.path.join(ctx.multi_dir(), name), "bench", f"shards/{name}")
    creds = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "benchkey",
        "AWS_SECRET_ACCESS_KEY": "benchsecret",
    }
    one_env = agent_env(
        ctx.work, MODEL_SOURCE="s3://bench/big.bin", MODEL_PATH=ctx.out("a/big.bin"), **creds
    )
    prefix_env = agent_env(
        ctx.work,
        MODEL_SOURCE="s3://bench/shards/",
        MODEL_FILES="\n".join(shards),
        CACHE_DIR=ctx.out("ap"),
        **creds,
    )
    one_bytes = os.path.getsize(big)
    shard_paths = [os.path.join(ctx.multi_dir(), n) for n in shards]
    prefix_bytes = sum(map(os.path.getsize, shard_paths))
    boto_one = [PY, "-c", BOTO_ONE, endpoint, "big.bin", ctx.out("b.bin")]
    boto_prefix = [PY, "-c", BOTO_PREFIX, endpoint, "shards/", ctx.out("bp")]
    os.makedirs(ctx.out("bp"), exist_ok=True)
    samples = interleave(
        RUNS,
        [
            (lambda: run(boto_one), lambda: fresh(ctx.out("b.bin"))),
            (lambda: run(durable(boto_one, ctx.out("b.bin"))), lambda: fresh(ctx.out("b.bin"))),
            (lambda: run(agent_cmd(), one_env), lambda: fresh(ctx.out("a"))),
            agent_start(one_env),
            disk_floor(ctx.out("floor"), [big]),
            (lambda: run(boto_prefix), lambda: _empty(ctx.out("bp"))),
            (lambda: run(durable(boto_prefix, ctx.out("bp"))), lambda: _empty(ctx.out("bp"))),
            (lambda: run(agent_cmd(), prefix_env), lambda: fresh(ctx.out("ap"))),
            agent_start(prefix_env),
            disk_floor(ctx.out("floor"), shard_paths),
        ],
    )
    one, prefix = f"S3 {BIG_CASE[7:]} object (SeaweedFS)", "S3 4-shard prefix (SeaweedFS)"
    return [
        *_s3_rows(one, samples[:5], one_bytes / 1e6),
        *_s3_rows(prefix, samples[5:], prefix_bytes / 1e6),
    ]


def _s3_rows(case: str, samples: list[Sample], mb: float) -> list[Row]:
    """boto3, boto3 + fsync, the agent, its start, the floor (in `interleave` order)."""
    boto, boto_durable, agent, start, floor = samples
    peers = Peers(boto, boto_durable, floor, start)
    return [
        *peers.rows(case, ("boto3 download_file", "boto3 + fsync"), mb),
        peers.agent(case, "agent", agent, mb, Target(">= 2x boto3", 2.0)),
    ]


def _empty(directory: str) -> None:
    fresh(directory)
    os.makedirs(directory, exist_ok=True)


def hf(ctx: Context) -> list[Row]:
    """A fake hub that redirects LFS files to a CDN (nginx) and lists their
    sha256, as the Hub does: huggingface_hub's snapshot_download (size
    checks only) vs the agent (every LFS byte hashed) (#16 item 2)."""
    from hfhub import start_hub

    pins = ctx.shards()
    lfs = {
        name: (os.path.join(ctx.multi_dir(), name), sha)
        for name, sha in pins.items()
        if name.endswith(".safetensors")
    }
    with open(os.path.join(ctx.multi_dir(), "config.json"), "rb") as handle:
        small = {
            "config.json": handle.read(),
            "tokenizer.json": b'{"version": "1.0", "model": {"type": "BPE"}}' * 200,
            "generation_config.json": b'{"max_length": 4096}',
            "README.md": b"# bench model\n",
            ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
        }
    hub = start_hub("bench/model", lfs, small, f"{ctx.http()}/multi")
    ctx.servers.on_stop(hub.close)
    watch_origin(os.getpid(), children=False)  # the hub's threads, not the timed tools
    names = sorted([*lfs, *small])
    env = agent_env(
        ctx.work,
        MODEL_SOURCE="hf://bench/model@main",
        MODEL_FILES="\n".join(names),
        CACHE_DIR=ctx.out("ah"),
        HF_ENDPOINT=hub.url,
    )
    peer = (
        "import sys; from huggingface_hub import snapshot_download\n"
        "snapshot_download('bench/model', revision='main', local_dir=sys.argv[1])"
    )
    peer_env = agent_env(
        ctx.work,
        HF_ENDPOINT=hub.url,
        HF_HOME=ctx.out("hf-home"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )

    def peer_fresh() -> None:
        fresh(ctx.out("bh"))
        fresh(ctx.out("hf-home"))

    peer_cmd = [PY, "-c", peer, ctx.out("bh")]
    lfs_bytes = sum(os.path.getsize(p) for p, _ in lfs.values())
    mb = (lfs_bytes + sum(map(len, small.values()))) / 1e6
    peer_run, peer_durable, agent, start, floor = interleave(
        RUNS,
        [
            (lambda: run(peer_cmd, peer_env), peer_fresh),
            (lambda: run(durable(peer_cmd, ctx.out("bh")), peer_env), peer_fresh),
            (lambda: run(agent_cmd(), env), lambda: fresh(ctx.out("ah"))),
            agent_start(env),
            disk_floor(ctx.out("floor"), [p for p, _ in lfs.values()]),
        ],
    )
    case = f"HF hub + CDN, 4 LFS + {len(small)} small"
    peers = Peers(peer_run, peer_durable, floor, start)
    return [
        *peers.rows(case, ("hf snapshot_download", "hf snapshot + fsync"), mb),
        peers.agent(case, "agent (LFS sha256)", agent, mb, Target(">= 3x", 3.0)),
    ]


def costs(ctx: Context) -> list[Row]:
    """CPU per MB of each stage, for the scaling notes (#16 item 6): sha256
    on one core, and the agent without and with hashing (receive + write,
    then + sha256), from the fast origin."""
    path, sha = ctx.big()
    url = f"{ctx.http()}/big/big.bin"
    mb = os.path.getsize(path) / 1e6
    hash_code = (
        "import hashlib,mmap,sys\n"
        "b=mmap.mmap(-1,64<<20); b.write(bytes(range(256))*(1<<18))\n"
        "h=hashlib.sha256()\n"
        f"for _ in range({max(1, int(mb) // 64)}): h.update(b)\n"
    )
    hashing = repeat(RUNS, lambda: run([PY, "-c", hash_code]), lambda: None)
    plain = agent_env(
        ctx.work, MODEL_SOURCE=url, MODEL_PATH=ctx.out("k/big.bin"), LLMKUBE_DIRECT_IO="on"
    )
    pinned = dict(plain, MODEL_SHA256=sha)
    cached = dict(pinned, LLMKUBE_DIRECT_IO="off", LLMKUBE_CONNECTIONS="1")
    unhashed, hashed, buffered = interleave(
        RUNS,
        [
            (lambda: run(agent_cmd(), plain), lambda: fresh(ctx.out("k"))),
            (lambda: run(agent_cmd(), pinned), lambda: fresh(ctx.out("k"))),
            (lambda: run(agent_cmd(), cached), lambda: fresh(ctx.out("k"))),
        ],
    )
    case = "cost per MB (scaling notes)"
    return [
        Row(case, "sha256, one core", hashing, mb, note="python -c hashlib over memory"),
        Row(case, "agent, no hash", unhashed, mb, note="receive + O_DIRECT write, one stream"),
        Row(case, "agent, sha256", hashed, mb, note="receive + sha256 + O_DIRECT write"),
        Row(case, "agent, page cache", buffered, mb, note="receive + sha256 + page-cache write"),
    ]


CASES = [
    Case("single", single, "one large file pinned vs curl"),
    Case("servable", servable, "stage + first read of every byte vs curl + cat"),
    Case("multi", multi, "4 shards pinned vs curl one by one"),
    Case("warm", warm, "warm start of a cached 40-file model"),
    Case("capped", capped, "20 MB/s-per-connection origin vs curl"),
    Case("s3", s3, "SeaweedFS: one object and a 4-shard prefix vs boto3"),
    Case("hf", hf, "fake hub + CDN vs huggingface_hub snapshot_download"),
    Case("resume", resume, "SIGKILL at 50% then restart"),
    Case("costs", costs, "CPU per MB of sha256, receive, write"),
]
