"""oci:// against KServe's `oci+fetch://` path (#43 item 5): the same
artifact in the suite's real registry (Debian's docker-registry, the CNCF
distribution, anonymous, on 127.0.0.1), pulled by oras-py's blob fetch
(what KServe's initializer uses for `oci+fetch://`: one GET per layer,
streamed to its file) and by the agent, each into a fresh empty directory,
alternated BENCH_RUNS times. The peer is also timed made as durable
(an fsync of its output), as the agent fsyncs before it publishes; the
agent checks every layer's sha256 while receiving it, oras-py checks none.
Every run's files are checked against the layers' sha256 before it counts.

Cases: oci-raw (one raw layer of BENCH_SIZE_MIB), oci-modelpack (4 raw
layers of BENCH_SIZE_MIB / 4 and a config.json, as modctl --raw pushes a
sharded model). oras-py (ORAS_PY_VERSION) runs in a virtualenv of its own
under `.bench/`, built once with the dev venv's pip.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from benchlib import (
    PY,
    ROOT,
    RUNS,
    Case,
    Context,
    Row,
    Sample,
    durable,
    fresh,
    interleave_runs,
    median_sample,
    paired_ratios,
    run,
    sha256_of,
)
from kserve import DURABLE_TARGET, tool_python

sys.path.insert(0, ROOT)
from tests.harness.registry import Registry, modelpack_layer, push_image

ORAS_PY_VERSION = "0.2.43"
# KServe's oci+fetch path, reduced to its transfer: the manifest, then each
# layer's blob by digest into its annotated file (oras-py's download_blob).
_ORAS_PULL = """
import json, os, sys
import oras.provider
host, repo, tag, dest = sys.argv[1:5]
reg = oras.provider.Registry(hostname=host, insecure=True)
target = f"{host}/{repo}:{tag}"
manifest = reg.get_manifest(target)
for layer in manifest["layers"]:
    name = layer["annotations"]["org.cncf.model.filepath"]
    out = os.path.join(dest, name)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    reg.download_blob(f"{host}/{repo}", layer["digest"], out)
"""


def oras_python() -> str:
    return tool_python(f"oras-{ORAS_PY_VERSION}", f"oras=={ORAS_PY_VERSION}")


def _pushed(files: dict[str, str]) -> list[tuple[str, bytes]]:
    out = []
    for path in sorted(files):
        with open(path, "rb") as handle:
            out.append((os.path.basename(path), handle.read()))
    return out


def side_by_side_oci(ctx: Context, case: str, files: dict[str, str]) -> list[Row]:
    """oras-py, oras-py + fsync, the agent; the ratio against oras-py's."""
    model = {os.path.basename(p): sha for p, sha in files.items()}
    nbytes = sum(os.path.getsize(p) for p in files)
    with Registry() as registry:
        layers = [modelpack_layer(name, data) for name, data in _pushed(files)]
        push_image(registry, "bench/model", "v1", layers)
        del layers
        o_dest, a_dest = ctx.out("oci-o"), ctx.out("oci-a")
        peer = [oras_python(), "-c", _ORAS_PULL, registry.hostport, "bench/model", "v1", o_dest]
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("MODEL_", "LLMKUBE_"))},
            "MODEL_SOURCE": f"oci://{registry.hostport}/bench/model:v1",
            "CACHE_DIR": a_dest,
            "LLMKUBE_TERMINATION_LOG": os.path.join(ctx.work, "term.json"),
            "PROGRESS_INTERVAL": "3600",
        }
        agent = [PY, "-m", "llmkube_stager", "stage"]
        variants = [
            _checked("oras-py", peer, env, o_dest, model),
            _checked("oras-py+fsync", durable(peer, o_dest), env, o_dest, model),
            _checked("agent", agent, env, a_dest, model),
        ]
        runs = interleave_runs(RUNS, variants)
    plain, synced, mine = (median_sample(r) for r in runs)
    paired = paired_ratios(runs[1], runs[2])
    fresh(o_dest)
    fresh(a_dest)
    mb = nbytes / 1e6
    load = f"load {os.getloadavg()[0]:.2f}"
    note = f"{len(model)} layers, sha256 checked after every run; {load}"
    return [
        Row(case, f"oras-py {ORAS_PY_VERSION}", plain, mb, note=note),
        Row(case, "oras-py + fsync", synced, mb, note="oras-py's, then fsync of its output"),
        Row(
            case,
            "agent (oci://)",
            mine,
            mb,
            plain.wall_s,
            note=f"vs durable peer {paired}" if paired else "",
            target=DURABLE_TARGET,
            durable_peer_s=synced.wall_s,
        ),
    ]


def _checked(
    tool: str, cmd: list[str], env: dict[str, str], dest: str, model: dict[str, str]
) -> tuple[Callable[[], Sample], Callable[[], object]]:
    """`cmd` into a fresh `dest`; the run counts only when every layer's
    file there has the layer's sha256 (the agent's records beside them are
    its own)."""

    def make() -> Sample:
        sample = run(cmd, env)
        if sample.exit_code != 0:
            raise RuntimeError(f"{tool} exited {sample.exit_code}")
        for name, sha in model.items():
            path = os.path.join(dest, name)
            if not os.path.isfile(path) or sha256_of(path) != sha:
                raise RuntimeError(f"{tool}: {path} is not the layer's bytes")
        return sample

    def before() -> None:
        fresh(dest)
        os.makedirs(dest)

    return make, before


def raw_case(ctx: Context) -> list[Row]:
    path, sha = ctx.big()
    return side_by_side_oci(ctx, "oci-raw", {path: sha})


def modelpack_case(ctx: Context) -> list[Row]:
    directory = ctx.multi_dir()
    files = {os.path.join(directory, n): sha for n, sha in ctx.shards().items()}
    return side_by_side_oci(ctx, "oci-modelpack", files)


CASES = [
    Case("oci-raw", raw_case, "one raw ModelPack layer: oras-py (KServe oci+fetch) vs agent"),
    Case("oci-modelpack", modelpack_case, "4 raw layers + config.json: oras-py vs agent"),
]
