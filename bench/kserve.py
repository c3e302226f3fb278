"""KServe's storage initializer and the agent in its drop-in mode, side by
side (#24 item 6): the same origins, the same arguments
(`<initializer> SRC_URI DEST_DIR`, as KServe's webhook injects them), the
same environment (the one KServe's credential builder sets), each into a
fresh empty directory, alternated BENCH_RUNS times with a `sync` before
each run. Every run's result is checked against the model's sha256 before
its time counts (outside the timed command).

KServe's initializer is `kserve-storage` (KSERVE_STORAGE_VERSION) from
PyPI, in a virtualenv of its own under `.bench/` (built once, never the dev
venv), run as its `initializer-entrypoint` does:
`Storage.download_files(argv[1::2], argv[2::2])` (the wheel ships no
console script for it; its only one is `kserve-decrypt`).

Cases: kserve-http (one file from nginx), kserve-s3 (a prefix of
KSERVE_S3_OBJECTS x KSERVE_S3_MIB objects plus small files, SeaweedFS),
kserve-hf (the bench's fake hub, 4 LFS shards behind a CDN + small files),
kserve-archive (#31 item 8: a plain tar of KSERVE_ARCHIVE_MEMBERS 1-byte
members through `file://`: KServe links it and extracts it with tarfile's
`data` filter, the agent stages it and unpacks it durably). kserve-gcs
(bench/gcs.py) and kserve-azure (bench/azureblob.py, #33 item 5) reuse
`side_by_side`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable

from benchlib import (
    PY,
    ROOT,
    RUNS,
    START_NOTE,
    Case,
    Context,
    Row,
    Sample,
    Target,
    agent_env,
    disk_floor,
    durable,
    fresh,
    interleave_runs,
    median_sample,
    paired_ratios,
    run,
    sha256_of,
    watch_origin,
    write_model,
)

# #31 item 12: at least 1.5x KServe's initializer made as durable as the
# agent (its output fsynced), or the row names the bound.
DURABLE_TARGET = Target(">= 1.5x KServe + fsync", 1.5, durable=True)

KSERVE_STORAGE_VERSION = "0.21.0"
S3_OBJECTS = int(os.environ.get("KSERVE_S3_OBJECTS", "8"))
S3_MIB = int(os.environ.get("KSERVE_S3_MIB", "64"))
ARCHIVE_MEMBERS = int(os.environ.get("KSERVE_ARCHIVE_MEMBERS", "100000"))
BUCKET = "kserve"
S3_PREFIX = "models/llm"
# KServe's initializer-entrypoint: pairs of (src, dest), one download_files.
_ENTRYPOINT = (
    "import sys\n"
    "from kserve_storage import Storage\n"
    "Storage.download_files(sys.argv[1::2], sys.argv[2::2])\n"
)
_SMALL = {
    "config.json": b'{"architectures": ["LlamaForCausalLM"]}',
    "tokenizer.json": b'{"version": "1.0", "model": {"type": "BPE"}}' * 200,
    "generation_config.json": b'{"max_length": 4096}',
    "README.md": b"# bench model\n",
}


def kserve_python() -> str:
    """KServe's initializer's interpreter: `.bench/kserve-<version>`, built
    once with the dev venv's pip (its own dependencies, resolved by pip as
    a `pip install kserve-storage==...` in KServe's image would)."""
    return tool_python(
        f"kserve-{KSERVE_STORAGE_VERSION}", f"kserve-storage=={KSERVE_STORAGE_VERSION}"
    )


def tool_python(name: str, requirement: str) -> str:
    """A peer's own interpreter, `.bench/<name>` with `requirement`
    installed, built once (never the dev venv)."""
    venv = os.path.join(ROOT, ".bench", name)
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(os.path.join(venv, ".ready")):
        print(f"building the venv {os.path.relpath(venv, ROOT)} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", "--without-pip", venv], check=True)
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", python]
        done = subprocess.run(
            [*pip, "install", "--quiet", requirement], capture_output=True, text=True
        )
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            raise RuntimeError(f"pip install {requirement} for the bench failed")
        open(os.path.join(venv, ".ready"), "w").close()
    return python


def kserve_cmd(src: str, dest: str) -> list[str]:
    return [kserve_python(), "-c", _ENTRYPOINT, src, dest]


def agent_cmd(src: str, dest: str) -> list[str]:
    """The agent as KServe's webhook runs it: `llmkube-stager SRC DEST`."""
    return [PY, "-m", "llmkube_stager", src, dest]


def staged_files(dest: str) -> dict[str, str]:
    """rel -> sha256 of every file under `dest`, outside a top-level dot
    directory: the agent's `.llmkube-stager/` and huggingface_hub's
    `local_dir` metadata (`.cache/`) are each tool's own, not the model's."""
    found = {}
    for top, dirs, files in os.walk(dest):
        if top == dest:
            dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            path = os.path.join(top, name)
            found[os.path.relpath(path, dest)] = sha256_of(path)
    return found


def checked(
    tool: str, cmd: list[str], env: dict[str, str], dest: str, model: dict[str, str]
) -> tuple[Callable[[], Sample], Callable[[], object]]:
    """An `interleave` variant: `cmd` into a fresh empty `dest`; the run
    counts only when `dest` then holds exactly the model's bytes."""

    def make() -> Sample:
        sample = run(cmd, env)
        if sample.exit_code != 0:
            raise RuntimeError(f"{tool} exited {sample.exit_code}")
        got = staged_files(dest)
        if got != model:
            wrong = sorted(set(got.items()) ^ set(model.items()))[:4]
            raise RuntimeError(f"{tool}: {dest} differs from the model: {wrong}")
        return sample

    def before() -> None:
        fresh(dest)
        os.makedirs(dest)  # KServe's emptyDir at /mnt/models exists, empty
        # A pod's HF_HOME is new too: huggingface_hub keeps refs/main and an
        # API answer (.agent_harnesses.json) there.
        fresh(env["HF_HOME"])

    return make, before


def side_by_side(
    ctx: Context,
    case: str,
    src: str,
    env: dict[str, str],
    model: dict[str, str],
    nbytes: int,
    sources: list[str],
    target: Target | None = None,
) -> list[Row]:
    """KServe's initializer, the same + fsync of its output (the agent
    fsyncs before it publishes), the agent; the ratio against KServe's.
    With a `target` (#31 item 12: against KServe's made as durable), also
    the agent's start (it revalidates what it staged: OnChange, no byte
    moved) and the disk floor of the model's bytes (`sources`), so that a
    missed target names its bound from the same runs."""
    k_dest, a_dest = ctx.out("kserve-k"), ctx.out("kserve-a")
    load_before = os.getloadavg()[0]
    variants = [
        checked("kserve", kserve_cmd(src, k_dest), env, k_dest, model),
        checked("kserve+fsync", durable(kserve_cmd(src, k_dest), k_dest), env, k_dest, model),
        checked("agent", agent_cmd(src, a_dest), env, a_dest, model),
    ]
    if target is not None:
        revalidate = dict(env, LLMKUBE_REFRESH_POLICY="OnChange")
        variants += [
            (lambda: run(agent_cmd(src, a_dest), revalidate), lambda: None),
            disk_floor(ctx.out("floor"), sources),
        ]
    runs = interleave_runs(RUNS, variants)
    plain, synced, agent, *bounds = (median_sample(r) for r in runs)
    start, floor = (bounds[0], bounds[1]) if bounds else (None, None)
    # #31 item 12 asks for the ratio in every run: each round's own pair.
    paired = paired_ratios(runs[1], runs[2])
    fresh(k_dest)
    fresh(a_dest)
    mb = nbytes / 1e6
    # The machine is shared: the 1-minute load around the runs, for the docs.
    load = f"load {load_before:.2f} -> {os.getloadavg()[0]:.2f}"
    print(f"  {case}: {load} (1-min average, {os.cpu_count()} cores)", flush=True)
    note = f"{src}; {len(model)} files, sha256 checked after every run; {load}"
    rows = [
        Row(case, f"kserve-storage {KSERVE_STORAGE_VERSION}", plain, mb, note=note),
        Row(case, "kserve + fsync", synced, mb, note="KServe's, then fsync of its output"),
    ]
    if floor is not None and start is not None:
        rows += [
            Row(case, "disk floor (dd)", floor, mb, note="model bytes, dd + fsync"),
            Row(case, "agent start", start, 0.0, note=START_NOTE),
        ]
    agent_row = Row(
        case,
        "agent (kserve mode)",
        agent,
        mb,
        plain.wall_s,
        note=f"vs durable peer {paired}" if paired else "",
        target=target,
        durable_peer_s=synced.wall_s,
        floor=floor,
        start=start,
    )
    return [*rows, agent_row]


def kserve_env(ctx: Context, **extra: str) -> dict[str, str]:
    """The environment of the init container, the same for both tools:
    no MODEL_/LLMKUBE_ variable of the developer's, a HOME and HF_HOME of
    the run (KServe's huggingface_hub writes its cache there)."""
    home = ctx.out("kserve-home")
    os.makedirs(home, exist_ok=True)
    return agent_env(ctx.work, HOME=home, HF_HOME=os.path.join(home, "hf"), **extra)


def http_case(ctx: Context) -> list[Row]:
    """One file over HTTP (the bench's large file), served with
    `Content-Type: application/octet-stream`: KServe's `_download_from_uri`
    refuses any other type for a file that is not an archive."""
    path, sha = ctx.big()
    src = f"{ctx.http()}/octet/big/big.bin"
    model = {"big.bin": sha}
    case = f"kserve: HTTP file, {os.path.getsize(path) >> 20} MiB"
    size = os.path.getsize(path)
    return side_by_side(ctx, case, src, kserve_env(ctx), model, size, [path], DURABLE_TARGET)


def _make_s3_model(directory: str) -> dict[str, str]:
    files = {}
    for i in range(S3_OBJECTS):
        path = os.path.join(directory, f"model-{i + 1:05d}-of-{S3_OBJECTS:05d}.safetensors")
        files[path] = write_model(path, S3_MIB, 100 + i)
    for name, data in _SMALL.items():
        path = os.path.join(directory, name)
        with open(path, "wb") as handle:
            handle.write(data)
        files[path] = hashlib.sha256(data).hexdigest()
    return files


def s3_case(ctx: Context) -> list[Row]:
    """An S3 prefix on SeaweedFS: KServe's four download processes (boto3
    `download_file` each) vs the agent, with KServe's S3 variables."""
    endpoint = ctx.s3()
    if endpoint is None:
        print("kserve-s3: SeaweedFS (weed) is not installed; skipped", flush=True)
        return []
    import boto3

    generated = ctx.model("kserve-s3", _make_s3_model)
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="benchkey",
        aws_secret_access_key="benchsecret",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    model = {}
    for path, sha in generated.files.items():
        name = os.path.basename(path)
        client.upload_file(path, BUCKET, f"{S3_PREFIX}/{name}")
        model[name] = sha
    env = kserve_env(
        ctx,
        AWS_ACCESS_KEY_ID="benchkey",
        AWS_SECRET_ACCESS_KEY="benchsecret",
        AWS_DEFAULT_REGION="us-east-1",
        # KServe's credential builder: S3_ENDPOINT without a scheme, the
        # scheme by S3_USE_HTTPS, and AWS_ENDPOINT_URL with it (which
        # kserve_storage's boto3 client reads).
        S3_ENDPOINT=endpoint.split("://", 1)[1],
        S3_USE_HTTPS="0",
        AWS_ENDPOINT_URL=endpoint,
    )
    case = f"kserve: S3 prefix, {S3_OBJECTS} x {S3_MIB} MiB + {len(_SMALL)} small"
    nbytes = sum(os.path.getsize(p) for p in generated.files)
    sources = list(generated.files)
    return side_by_side(
        ctx, case, f"s3://{BUCKET}/{S3_PREFIX}", env, model, nbytes, sources, DURABLE_TARGET
    )


def hf_case(ctx: Context) -> list[Row]:
    """The bench's fake hub (hfhub.py): 4 LFS shards redirected to nginx,
    small files from the hub; `hf://bench/model` (the whole repository)."""
    from hfhub import start_hub

    pins = ctx.shards()
    lfs = {
        name: (os.path.join(ctx.multi_dir(), name), sha)
        for name, sha in pins.items()
        if name.endswith(".safetensors")
    }
    with open(os.path.join(ctx.multi_dir(), "config.json"), "rb") as handle:
        small = {
            **_SMALL,
            "config.json": handle.read(),
            ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
        }
    hub = start_hub("bench/model", lfs, small, f"{ctx.http()}/multi")
    ctx.servers.on_stop(hub.close)
    watch_origin(os.getpid(), children=False)  # the hub's threads, not the timed tools
    model = {name: sha for name, (_, sha) in lfs.items()}
    model.update({name: hashlib.sha256(data).hexdigest() for name, data in small.items()})
    nbytes = sum(os.path.getsize(p) for p, _ in lfs.values()) + sum(map(len, small.values()))
    env = kserve_env(ctx, HF_ENDPOINT=hub.url)
    case = f"kserve: HF repo, 4 LFS + {len(small)} small"
    sources = [p for p, _ in lfs.values()]
    return side_by_side(ctx, case, "hf://bench/model", env, model, nbytes, sources, DURABLE_TARGET)


def _archive_member(i: int) -> str:
    return f"d{i % 100}/file-{i:06d}.bin"


def _make_archive(directory: str) -> dict[str, str]:
    import io
    import tarfile

    path = os.path.join(directory, "many.tar")
    with tarfile.open(path, "w") as tar:
        for i in range(ARCHIVE_MEMBERS):
            info = tarfile.TarInfo(_archive_member(i))
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    return {path: sha256_of(path)}


def archive_case(ctx: Context) -> list[Row]:
    """Many small members (#31 item 8): where the agent's fsync per member
    made it 87 s against KServe's 30 s; now one syncfs at the end."""
    (path,) = ctx.model("kserve-archive", _make_archive).files
    digest = hashlib.sha256(b"x").hexdigest()
    model = {_archive_member(i): digest for i in range(ARCHIVE_MEMBERS)}
    case = f"kserve: tar of {ARCHIVE_MEMBERS:,} 1-byte members"
    return side_by_side(
        ctx, case, f"file://{path}", kserve_env(ctx), model, os.path.getsize(path), [path]
    )


CASES = [
    Case("kserve-http", http_case, "KServe's initializer vs the agent: one HTTP file"),
    Case("kserve-s3", s3_case, "KServe's initializer vs the agent: an S3 prefix"),
    Case("kserve-hf", hf_case, "KServe's initializer vs the agent: a fake-hub repo"),
    Case("kserve-archive", archive_case, "KServe's initializer vs the agent: many small members"),
]
