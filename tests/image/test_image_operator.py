"""#30, #39: the LLMKube operator, unchanged, with this image as its init
image. Each test runs one of the suite's own download commands
(tests/harness/operator_commands.py: one per meaning an operator command
can have, registered in the site catalogue ImagePod.sh mounts) through
`sh -c` in the built image, with the operator's environment and pod
settings (uid 100 from the image, the model-cache-prep container as uid 0,
the volumes at /models and /host-model), against the suite's origin, fake
hub and S3; and the same command with curl on this host as the reference.
The image's result must be the same files or better (records, resume,
verification), and a failure must read at least as well in the Model's
condition (tests/harness/upstream_matcher.py: the controller's matcher).
A script outside the catalogue never runs the agent (#39 item 4)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from llmkube_stager.operator.catalogue import Meaning
from tests.harness.hub import FakeHub
from tests.harness.image import GID, UID, ImagePod, Volume
from tests.harness.mounts import tmpfs
from tests.harness.operator_commands import (
    DONE,
    NOT_DOWNLOADS,
    PLACEHOLDER,
    PREP,
    PVC_VERIFY,
    Shape,
    by_name,
    multi_file,
    pinned_multi,
    shapes,
    single_file,
    token_single,
    with_ca,
)
from tests.harness.origin import Fault, Origin, closed_port_url
from tests.harness.pod import SHORT_BUDGET, Run
from tests.harness.sample import gguf_like
from tests.harness.seaweed import SeaweedS3, s3_env
from tests.harness.tlsca import tls_server_context
from tests.harness.upstream_matcher import controller_message, match

pytestmark = [pytest.mark.image, pytest.mark.usefixtures("host_curl")]

DATA = gguf_like(2 << 20, seed=30)
FILES = {"config.json": b'{"model_type": "llama"}', "sub/model.safetensors": DATA}
# A new version at the source, of other sizes (the suite's OnChange
# commands compare sizes, as the operator's do).
NEWER = gguf_like(3 << 20, seed=31)
NEWER_FILES = {"config.json": b'{"model_type": "llama", "v": 2}', "sub/model.safetensors": NEWER}
# Where the operator mounts the volumes; the host reference gets host
# directories in their place (a kubelet mounts them; curl cannot).
_PATH_VARS = ("CACHE_DIR", "MODEL_PATH")
_MOUNTS = re.compile(r"/models|/host-model/|/custom-certs/|/tmp/|/model-source")
# The agent's own records beside the model (CONTRACT §4): "better", not other.
# (size records, the lock, validators; the digest gate's stamp and marker).
_AGENT_MARKS = (".llmkube", ".sha256")
SINGLE = by_name("single http IfNotPresent cache").script


def on_host(script: str, env: Mapping[str, str], root: Path) -> Run:
    """The reference: the same command under this host's sh and curl, the
    volumes' paths mapped onto `root`."""

    def mapped_paths(text: str) -> str:  # one pass: `root` itself is under /tmp
        return _MOUNTS.sub(lambda m: f"{root}{m.group(0)}", text)

    text = mapped_paths(script)
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    mapped = {k: mapped_paths(v) if k in _PATH_VARS else v for k, v in env.items()}
    (root / "models").mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["sh", "-c", text],
        env={"PATH": os.environ["PATH"], **mapped},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return Run(("sh", "-c", script), proc.returncode, proc.stdout, proc.stderr, None)


# curl's `--etag-save` marker beside each file (`.<name>.etag`, LLMKube's
# OnChange of v0.8.2 to v0.9.12): curl's record, as the agent's are its own;
# the agent writes none (docs/switching-llmkube.md).
_CURL_MARK = re.compile(r"(?:^|/)\.[^/]+\.etag\Z")


def model_files(models: Path) -> dict[str, bytes]:
    """The files a serving container would see: no partials, no records."""
    found = {}
    for path in models.rglob("*"):
        rel = str(path.relative_to(models))
        record = any(m in rel for m in _AGENT_MARKS) or _CURL_MARK.search(rel)
        if path.is_file() and not rel.endswith(".tmp") and not record:
            found[rel] = path.read_bytes()
    return found


def same_or_better(image: Run, pod: ImagePod, ref: Run, ref_root: Path) -> None:
    assert ref.returncode == 0, f"the reference failed: {ref}"
    assert image.returncode == 0, str(image)
    assert model_files(pod.models) == model_files(ref_root / "models")
    assert [p for p in pod.models.rglob("*.tmp")] == [], "a partial was left"
    assert pod.container.writes() == [], "written outside the volumes"
    for path in pod.models.rglob("*"):
        assert (path.stat().st_uid, path.stat().st_gid) == (UID, GID), path


def agent_line(shape: Shape) -> str:
    """What the image's sh logs when it runs `shape` as the agent: the
    operator's commands by their catalogue name, the suite's by theirs."""
    name = shape.name if shape.name.startswith("LLMKube ") else f"the suite's {shape.name} command"
    return f"llmkube-stager: running {name} ({shape.meaning.describe()})"


def operator_texts() -> list[Shape]:
    """The operator's real commands, when LLMKUBE_OPERATOR_TEXTS names a
    folder of them with their meanings.json (tools/operator-catalogue's
    input, kept outside this repository: no text of the operator's is in
    it). They are known to the image through its own catalogue, and run
    through the same differential as the suite's: how the catalogue's
    meanings were checked while it was built (#39 item 3)."""
    folder = os.environ.get("LLMKUBE_OPERATOR_TEXTS")
    if not folder:
        return []
    meanings = json.loads((Path(folder) / "meanings.json").read_text())
    return [
        Shape(said["name"], (Path(folder) / name).read_bytes().decode(), Meaning(**said["meaning"]))
        for name, said in sorted(meanings.items(), key=lambda item: item[1]["name"])
    ]


def cache_env(source: str, key: str = "k1", name: str = "model.gguf") -> dict[str, str]:
    return {
        "MODEL_SOURCE": source,
        "CACHE_DIR": f"/models/{key}",
        "MODEL_PATH": f"/models/{key}/{name}",
    }


def multi_env(source: str, cache_dir: str = "/models/k2") -> dict[str, str]:
    return {"MODEL_SOURCE": source, "CACHE_DIR": cache_dir, "MODEL_FILES": "\n".join(FILES)}


def serve_repo(origin: Origin, files: Mapping[str, bytes] = FILES) -> str:
    for rel, data in files.items():
        origin.put(f"/org/repo/resolve/main/{rel}", data)
    return origin.url + "/org/repo/resolve/main/"


def _ca_dir(tmp_path: Path) -> Path:
    """The CA ConfigMap's volume, for the image and the reference alike."""
    certs = tmp_path / "ref" / "custom-certs"
    certs.mkdir(parents=True, exist_ok=True)
    shutil.copy("/etc/ssl/certs/ca-certificates.crt", certs / "ca.crt")
    return certs


# -- every meaning, on an empty, a current and a stale cache (#39 item 3) ---------------------


@dataclass
class Source:
    """Where a command's model comes from, for one test: the environment
    that names it, the volumes it needs, how to publish a newer version
    there, and what the source was asked (methods) since `forget`."""

    env: dict[str, str]
    change: Callable[[], None]
    asked: Callable[[], list[str]]
    forget: Callable[[], None]
    extra: list[Volume] = field(default_factory=list)
    # Makes the source fail every request from now on (None: a host file,
    # whose bind mount cannot be taken away between two runs).
    fail: Callable[[], None] | None = None


def _http_source(shape: Shape, origin: Origin) -> Source:
    m = shape.meaning
    if m.layout == "single":
        origin.put("/m/model.gguf", DATA)
        env = cache_env(origin.url + "/m/model.gguf")
        if not m.cached:  # the operator's emptyDir: no CACHE_DIR, the file at /models
            env.update(CACHE_DIR="", MODEL_PATH="/models/ns-m.gguf")
    else:
        base = serve_repo(origin)
        if m.multi_url == "resolve-main":  # the repository's URL, not its base
            base = origin.url + "/org/repo"
        env = multi_env(base, "/models/k2" if m.cached else "/models")

    def change() -> None:
        if m.layout == "single":
            origin.put("/m/model.gguf", NEWER)
        else:
            serve_repo(origin, NEWER_FILES)

    def fail() -> None:
        paths = ["/m/model.gguf"] if m.layout == "single" else [
            f"/org/repo/resolve/main/{rel}" for rel in FILES
        ]  # fmt: skip
        for path in paths:
            origin.set_fault(path, Fault(status=503))

    asked = lambda: [r.method for r in origin.requests()]  # noqa: E731
    return Source(env, change, asked, origin.clear_log, fail=fail)


def _s3_source(shape: Shape, s3: SeaweedS3, bucket: str) -> Source:
    secret = s3_env(s3)
    secret.pop("AWS_EC2_METADATA_DISABLED")  # not in an operator's Secret
    if shape.meaning.layout == "single":
        s3.put(bucket, "m/model.gguf", DATA)
        env = {**cache_env(f"s3://{bucket}/m/model.gguf"), "S3_KEY": "m/model.gguf"}
        if not shape.meaning.cached:
            env.update(CACHE_DIR="", MODEL_PATH="/models/ns-m.gguf")

        def change() -> None:
            s3.put(bucket, "m/model.gguf", NEWER)

    else:
        for rel, data in FILES.items():
            s3.put(bucket, f"p/{rel}", data)
        cache_dir = "/models/k2" if shape.meaning.cached else "/models"
        env = {**multi_env(f"s3://{bucket}/p", cache_dir), "S3_PREFIX": "p"}

        def change() -> None:
            for rel, data in NEWER_FILES.items():
                s3.put(bucket, f"p/{rel}", data)

    env.update(S3_BUCKET=bucket, **secret)

    def fail() -> None:  # the endpoint gone: every request refused
        env["AWS_ENDPOINT_URL"] = closed_port_url()

    asked = lambda: [r.method for r in s3.object_requests(bucket)]  # noqa: E731
    return Source(env, change, asked, s3.clear, fail=fail)


def _local_source(tmp_path: Path) -> Source:
    host = tmp_path / "ref" / "host-model"
    host.mkdir(parents=True)
    (host / "model.gguf").write_bytes(DATA)

    def change() -> None:
        (host / "model.gguf").write_bytes(NEWER)

    mount = Volume(host / "model.gguf", "/host-model/model.gguf", read_only=True)
    return Source(cache_env("/data/models/m.gguf"), change, list, lambda: None, [mount])


def _source(shape: Shape, request: pytest.FixtureRequest, tmp_path: Path) -> Source:
    kind = shape.meaning.kind
    if kind == "s3":
        s3: SeaweedS3 = request.getfixturevalue("s3")
        source = _s3_source(shape, s3, request.getfixturevalue("bucket"))
    elif kind == "local":
        source = _local_source(tmp_path)
    else:
        assert kind == "http", shape
        source = _http_source(shape, request.getfixturevalue("origin"))
    if shape.meaning.ca_dir:
        source.extra.append(Volume(_ca_dir(tmp_path), shape.meaning.ca_dir, read_only=True))
    if shape.meaning.pinned:  # the pins of what the source holds first
        if shape.meaning.layout == "single":
            source.env["MODEL_SHA256"] = hashlib.sha256(DATA).hexdigest()
        else:
            source.env["MODEL_FILE_SHA256"] = "\n".join(
                f"{hashlib.sha256(d).hexdigest()} {rel}" for rel, d in FILES.items()
            )
    return source


# pvc:// verifies a claim and writes no cache: test_pvc_verify is its differential.
DIFFERENTIAL = [s for s in [*shapes(), *operator_texts()] if s.meaning.kind != "pvc"]


@pytest.mark.parametrize("shape", DIFFERENTIAL, ids=[s.name for s in DIFFERENTIAL])
def test_each_command_means_in_the_image_what_it_means_under_curl(
    pod: ImagePod, request: pytest.FixtureRequest, tmp_path: Path, shape: Shape
) -> None:
    """Each of the suite's commands (and, with LLMKUBE_OPERATOR_TEXTS, each
    of the operator's), as the agent in the image and under sh and curl on
    the host: the same files, the same success, on an empty cache, a
    current one (IfNotPresent asks nothing, OnChange no body), a stale one
    (a newer version at the source: OnChange takes it, IfNotPresent keeps
    the cached copy without asking), then with the source failing."""
    source = _source(shape, request, tmp_path)
    ref_root = tmp_path / "ref"
    expected = 1 if shape.meaning.layout == "single" else len(FILES)
    first: dict[str, bytes] = {}
    for state in ("empty", "current", "stale"):
        if state == "stale":
            source.change()
        ref = on_host(shape.script, source.env, ref_root)
        source.forget()
        image = pod.sh(shape.script, env=source.env, extra=source.extra)
        same_or_better(image, pod, ref, ref_root)
        assert agent_line(shape) in image.stderr, str(image)
        asked = source.asked()
        files = model_files(pod.models)
        if state == "empty":
            first = files
            assert image.compact_term()["stats"]["fetched"] == expected, image.term
            if shape.meaning.kind == "local":
                assert "Model copied successfully" in image.stderr
            continue
        # Pinned, the pins still name the first version: that copy is right.
        if shape.meaning.policy == "IfNotPresent" or state == "current" or shape.meaning.pinned:
            assert files == first, f"{state}: the cached copy must stay"
        else:
            assert files != first, "OnChange kept an outdated model"
        if shape.meaning.policy == "IfNotPresent":
            assert asked == [], f"a {state} IfNotPresent start contacted the source: {asked}"
        elif state == "current":
            assert "GET" not in asked, f"OnChange revalidates a current cache, no body: {asked}"
        elif shape.meaning.layout == "single" and not shape.meaning.pinned:
            assert "Model revalidated (downloaded)" in image.stderr
    if source.fail is not None:
        failing_source_keeps_the_cache_and_fails_an_empty_one(pod, source, shape, ref_root)


def failing_source_keeps_the_cache_and_fails_an_empty_one(
    pod: ImagePod, source: Source, shape: Shape, ref_root: Path
) -> None:
    """The source fails every request: a cached copy is kept and the start
    succeeds (IfNotPresent without asking, OnChange as the command's
    "kept cached copy"), in the image as under curl; with nothing cached,
    both fail and neither publishes a file."""
    assert source.fail is not None
    source.fail()
    env = {**source.env, **SHORT_BUDGET}
    kept = model_files(pod.models)
    ref = on_host(shape.script, env, ref_root)
    image = pod.sh(shape.script, env=env, extra=source.extra)
    # A partial may stay for the next start to resume: not same_or_better.
    assert (ref.returncode, image.returncode) == (0, 0), f"{ref}\n{image}"
    assert model_files(pod.models) == kept == model_files(ref_root / "models")
    assert pod.container.writes() == [], "written outside the volumes"
    for models in (pod.models, ref_root / "models"):
        for child in models.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    ref = on_host(shape.script, env, ref_root)
    image = pod.sh(shape.script, env=env, extra=source.extra)
    assert ref.returncode != 0, f"the reference succeeded with its source failing: {ref}"
    assert image.returncode != 0, str(image)
    assert model_files(pod.models) == {} == model_files(ref_root / "models")


def test_an_hf_single_file_source_works_where_curl_could_not(
    pod: ImagePod, origin: Origin, tmp_path: Path
) -> None:
    """Spec §16 gap 14: a single-file Model's MODEL_SOURCE is spec.source
    verbatim, so curl was handed `hf://...` and failed; the agent resolves it."""
    with FakeHub(origin) as hub:
        hub.add_repo("org/repo", {"model.gguf": DATA})
        env = {**cache_env("hf://org/repo/model.gguf"), "HF_ENDPOINT": hub.url}
        ref = on_host(SINGLE, env, tmp_path / "ref")
        image = pod.sh(SINGLE, env=env)
    assert ref.returncode != 0, "curl fetched hf:// after all"
    assert image.returncode == 0, str(image)
    assert (pod.models / "k1/model.gguf").read_bytes() == DATA


def test_a_cut_transfer_resumes_in_the_same_start(
    pod: ImagePod, origin: Origin, tmp_path: Path
) -> None:
    """The origin cuts the first GET short: the L0 script's curl fails the
    start (the pod restarts and fetches from zero); the agent resumes with
    a range request and publishes in the same start."""
    origin.put("/m/model.gguf", DATA)
    env = cache_env(origin.url + "/m/model.gguf")
    cut = Fault(truncate_after=len(DATA) // 2, methods=("GET",), times=1)
    origin.set_fault("/m/model.gguf", cut)
    ref = on_host(SINGLE, env, tmp_path / "ref")
    assert ref.returncode != 0 and not (tmp_path / "ref/models/k1/model.gguf").exists()
    origin.set_fault("/m/model.gguf", cut)
    origin.clear_log()
    image = pod.sh(SINGLE, env=env)
    assert image.returncode == 0, str(image)
    assert (pod.models / "k1/model.gguf").read_bytes() == DATA
    resumed = [
        r
        for r in origin.requests(method="GET")
        if r.headers.get("range", "bytes=0-").removeprefix("bytes=")[:2] not in ("0-", "")
    ]
    assert resumed, "the agent fetched from zero again"


def test_file_digest_gates(pod: ImagePod, origin: Origin, tmp_path: Path) -> None:
    """spec.fileSha256 (MODEL_FILE_SHA256): right pins stage as the script
    does; a wrong pin publishes nothing under that name, in both."""
    base = serve_repo(origin)
    pins = "\n".join(f"{hashlib.sha256(d).hexdigest()} {rel}" for rel, d in FILES.items())
    env = {**multi_env(base), "MODEL_FILE_SHA256": pins}
    ref = on_host(pinned_multi(), env, tmp_path / "ref")
    same_or_better(pod.sh(pinned_multi(), env=env), pod, ref, tmp_path / "ref")

    wrong = {**multi_env(base, "/models/k6"), "MODEL_FILE_SHA256": f"{'0' * 64} config.json"}
    ref_wrong = on_host(pinned_multi(), wrong, tmp_path / "ref-wrong")
    image = pod.sh(pinned_multi(), env=wrong)
    assert ref_wrong.returncode != 0 and image.returncode != 0, (ref_wrong, image)
    assert not (pod.models / "k6/config.json").exists()
    assert image.compact_term()["reason"] == "ModelTransferChecksumMismatch"


def test_hf_multi_file_without_a_token(pod: ImagePod, origin: Origin, tmp_path: Path) -> None:
    """A public repo through the hub (HF_ENDPOINT names it, as a mirror's
    Secret does): the operator's normalized `.../resolve/main/` base."""
    with FakeHub(origin) as hub:
        hub.add_repo("org/repo", FILES)
        env = {**multi_env(f"{hub.url}/org/repo/resolve/main/"), "HF_ENDPOINT": hub.url}
        ref = on_host(multi_file(False, True), env, tmp_path / "ref")
        image = pod.sh(multi_file(False, True), env=env)
        same_or_better(image, pod, ref, tmp_path / "ref")
        sent = [r for r in hub.requests() if r.authorization]
        assert sent == [], "no token was given, none may be sent"


def _scripts(multi: bool, policy: str) -> str:
    return multi_file(False, True, policy) if multi else single_file("http", True, policy)


def _owned_by_the_image_user(root: Path) -> None:
    """What curl_user (uid 100) left: the host ran the scripts as root."""
    for path in [root, *root.rglob("*")]:
        os.chown(path, UID, GID)


@pytest.mark.parametrize("policy", ["IfNotPresent", "OnChange"])
@pytest.mark.parametrize("multi", [False, True], ids=["single", "multi"])
def test_an_upgrade_starts_from_the_scripts_cache_with_the_origin_down(
    pod: ImagePod, origin: Origin, multi: bool, policy: str
) -> None:
    """Spec §8.4 item 6: the operator's upgrade rolls every Deployment; the
    new pods must start from the cache the scripts left, whatever the origin
    does (here every request gets a 503)."""
    origin.put("/m/model.gguf", DATA)
    base = serve_repo(origin)
    env = multi_env(base) if multi else cache_env(origin.url + "/m/model.gguf")
    staged = on_host(_scripts(multi, "IfNotPresent"), env, pod.models.parent)
    assert staged.returncode == 0, str(staged)
    _owned_by_the_image_user(pod.models)
    before = model_files(pod.models)
    for path in ("/m/model.gguf", *(f"/org/repo/resolve/main/{rel}" for rel in FILES)):
        origin.set_fault(path, Fault(status=503))
    origin.clear_log()
    # OnChange asks the origin, which answers 503 to every retry: a short
    # budget (a source Secret may set one) keeps the wait short.
    budget = {"LLMKUBE_RETRIES": "1", "LLMKUBE_MAX_RETRY_WAIT": "1"}
    run = pod.sh(_scripts(multi, policy), env={**env, **budget})
    assert run.returncode == 0, str(run)
    assert model_files(pod.models) == before
    if policy == "IfNotPresent":
        assert origin.requests() == [], "a warm IfNotPresent start contacted the origin"
    assert pod.container.writes() == []


@pytest.mark.parametrize("multi", [False, True], ids=["single", "multi"])
def test_a_rollback_starts_from_the_agents_cache(
    pod: ImagePod, origin: Origin, tmp_path: Path, multi: bool
) -> None:
    """Back to curlimages/curl: the scripts find the agent's files where
    they look, and start without a transfer."""
    origin.put("/m/model.gguf", DATA)
    base = serve_repo(origin)
    env = multi_env(base) if multi else cache_env(origin.url + "/m/model.gguf")
    assert pod.sh(_scripts(multi, "IfNotPresent"), env=env).returncode == 0
    staged = model_files(pod.models)
    origin.clear_log()
    back = on_host(_scripts(multi, "IfNotPresent"), env, pod.models.parent)
    assert back.returncode == 0, str(back)
    assert origin.requests() == []
    assert model_files(pod.models) == staged
    if not multi:
        assert "kept: " in back.stdout, back


def test_hf_with_a_token_from_the_source_secret(
    pod: ImagePod, origin: Origin, tmp_path: Path
) -> None:
    """A private repo: the token goes to the hub (HF_ENDPOINT names it),
    the CDN's 302 target gets none; the suite's command that sends the
    token when one is set."""
    with FakeHub(origin, tokens={"hf_secret_token"}) as hub:
        hub.add_repo("org/private", {"model.gguf": DATA}, private=True)
        env = {
            **cache_env(f"{hub.url}/org/private/resolve/main/model.gguf"),
            "HF_TOKEN": "hf_secret_token",
            "HF_ENDPOINT": hub.url,
        }
        script = token_single()
        ref = on_host(script, env, tmp_path / "ref")
        origin.clear_log()
        hub.clear_log()
        image = pod.sh(script, env=env)
        same_or_better(image, pod, ref, tmp_path / "ref")
        assert (
            "hf_secret_token" not in image.stderr + image.stdout + (image.term_raw or b"").decode()
        )
        assert any(r.authorization == "Bearer hf_secret_token" for r in hub.requests())
        assert origin.requests(), "the bytes came from the CDN"
        assert not [r for r in origin.requests() if r.headers.get("authorization")], (
            "the token followed the redirect to the CDN"
        )
        without = pod.sh(script, env={**env, "HF_TOKEN": "", "CACHE_DIR": "/models/k9",
                                       "MODEL_PATH": "/models/k9/model.gguf"})  # fmt: skip
        assert without.returncode != 0, "a private repo without a token must fail"
        assert match(controller_message(without.term_raw, without.stderr)) is not None


def test_digest_gate(pod: ImagePod, origin: Origin, tmp_path: Path) -> None:
    origin.put("/m/model.gguf", DATA)
    script = token_single(pinned=True)
    good = {
        **cache_env(origin.url + "/m/model.gguf"),
        "MODEL_SHA256": hashlib.sha256(DATA).hexdigest(),
    }
    ref = on_host(script, good, tmp_path / "ref")
    same_or_better(pod.sh(script, env=good), pod, ref, tmp_path / "ref")
    assert (pod.models / "k1/model.gguf.sha256").exists(), "the stamp the gate writes"

    wrong = {**cache_env(origin.url + "/m/model.gguf", key="k3"), "MODEL_SHA256": "0" * 64}
    ref_wrong = on_host(script, wrong, tmp_path / "ref-wrong")
    image = pod.sh(script, env=wrong)
    assert (ref_wrong.returncode != 0, image.returncode != 0) == (True, True)
    assert not (pod.models / "k3/model.gguf").exists()
    assert image.compact_term()["reason"] == "ModelTransferChecksumMismatch"

    missing = cache_env(origin.url + "/m/model.gguf", key="k4")  # gated script, no pin
    unpinned = pod.sh(script, env=missing)
    assert unpinned.returncode != 0 and not (pod.models / "k4/model.gguf").exists()


# -- the containers that are not downloads: the real shell ------------------------------------


@pytest.mark.parametrize(
    ("script", "owner"),
    [(PREP, (100, 100)), (NOT_DOWNLOADS[1], (0, 102))],
    ids=["no fsGroup", "fsGroup 102"],
)
def test_prep_then_downloader(
    pod: ImagePod, origin: Origin, script: str, owner: tuple[int, int]
) -> None:
    """model-cache-prep as uid 0 on a root-owned 0755 volume: without an
    fsGroup it chowns to 100:100 with 770; with the chart's fsGroup 102 to
    0:102 with g+rwX (the real /bin/sh runs it). Then the downloader, as the
    image's user, can write."""
    os.chown(pod.models, 0, 0)
    pod.models.chmod(0o755)
    prep = pod.sh(script, env={}, user="0:0")
    assert prep.returncode == 0, str(prep)
    assert (pod.models.stat().st_uid, pod.models.stat().st_gid) == owner
    origin.put("/m/model.gguf", DATA)
    run = pod.sh(SINGLE, env=cache_env(origin.url + "/m/model.gguf"))
    assert run.returncode == 0, str(run)
    assert (pod.models / "k1/model.gguf").read_bytes() == DATA


def test_prefetch_job(pod: ImagePod, origin: Origin) -> None:
    """The Job's downloader (the stager switch set) and the container that
    only says it is done (the real /bin/sh)."""
    base = serve_repo(origin)
    run = pod.sh(
        multi_file(False, True), env={**multi_env(base), "LLMKUBE_PREFETCH_STAGER": "true"}
    )
    assert run.returncode == 0, str(run)
    assert model_files(pod.models / "k2") == FILES
    done = pod.sh(DONE, env={})
    assert (done.returncode, done.stdout) == (0, "staged\n")


def test_the_operators_error_placeholders_fail_as_they_did(pod: ImagePod) -> None:
    run = pod.sh(PLACEHOLDER, env={})
    assert run.returncode == 1 and run.stdout.startswith("ERROR: this Model cannot"), str(run)
    assert run.term_raw is None, "the real /bin/sh ran it, not the agent"


CANARY = "CANARY-c4n4ry-7e1"
# Near misses of the suite's commands (#39 item 4): one token changed, one
# command added, a quote; each also carries a credential-like option value
# (`-uadmin:CANARY` in place of `--show-error`) that no refusal may print.
_WITH_CANARY = SINGLE.replace("--show-error", f"-uadmin:{CANARY}")
_ONCHANGE = by_name("single http OnChange cache").script.replace(
    "--show-error", f"-uadmin:{CANARY}"
)
NEAR_MISSES = {
    "one token changed": _WITH_CANARY,
    "a leading rm -rf": 'rm -rf "$CACHE_DIR"\n' + _WITH_CANARY,
    "a trailing touch": _WITH_CANARY + 'touch "$MODEL_PATH.done"\n',
    "a function named mv": "mv() { :; }\n" + _WITH_CANARY,
    "a single-quoted source": _WITH_CANARY.replace('"$MODEL_SOURCE"', "'$MODEL_SOURCE'"),
    "OnChange compared with -ne": _ONCHANGE.replace('-eq "$want"', '-ne "$want"'),
    # No curl in it: nothing to refuse, the real /bin/sh runs it.
    "a pvc verify that passes a mismatch": PVC_VERIFY.replace(
        '[ "$got" = "$MODEL_SHA256" ]', '[ "$got" != "$MODEL_SHA256" ]'
    ),
}


def test_the_near_misses_are_what_they_are_built_from() -> None:
    """Each near miss differs from its command (a replace that found
    nothing would test the command itself)."""
    known = {s.script for s in shapes()}
    assert len(set(NEAR_MISSES.values())) == len(NEAR_MISSES)
    assert known.isdisjoint(NEAR_MISSES.values())
    assert all(CANARY in script for script in NEAR_MISSES.values() if "curl" in script)


@pytest.mark.parametrize("script", list(NEAR_MISSES.values()), ids=list(NEAR_MISSES))
def test_a_near_miss_never_runs_the_agent(pod: ImagePod, origin: Origin, script: str) -> None:
    """#39 items 2 and 4: a script outside the catalogue that names curl is
    refused before any I/O (exit 2, InvalidConfiguration), never staged as
    the command it resembles, and the refusal prints no value of it."""
    origin.put("/m/model.gguf", DATA)
    run = pod.sh(script, env=cache_env(origin.url + "/m/model.gguf"))
    assert "llmkube-stager: running" not in run.stderr, str(run)
    if "curl" not in script:  # nothing to refuse: /bin/sh runs it
        assert run.term_raw is None, str(run)
        return
    assert run.returncode == 2, str(run)
    doc = run.compact_term()
    assert doc["reason"] == "InvalidConfiguration", doc
    assert "not a command of any LLMKube version this image knows" in doc["message"], doc
    assert "curlimages/curl" in doc["remedy"], doc
    assert CANARY not in run.outputs and "admin" not in run.outputs, run.outputs
    assert origin.requests() == [] and not (pod.models / "k1").exists()


def test_without_the_site_catalogue_the_suites_command_is_refused(
    pod: ImagePod, origin: Origin
) -> None:
    """The image knows the operator's commands alone: the suite's reach the
    agent only through the site catalogue the other tests mount."""
    origin.put("/m/model.gguf", DATA)
    run = pod.sh(SINGLE, env=cache_env(origin.url + "/m/model.gguf"), catalogue=False)
    assert run.returncode == 2, str(run)
    assert "llmkube-stager: running" not in run.stderr, str(run)
    assert run.compact_term()["reason"] == "InvalidConfiguration"
    assert origin.requests() == [] and not (pod.models / "k1").exists()


# -- #30 item 3: what the Model's condition shows, failure by failure -------------------------


def _condition(run: Run) -> tuple[str, str] | None:
    found = match(controller_message(run.term_raw, run.stderr))
    return None if found is None else (found.reason, found.line)


FAILURES = ["not found", "forbidden", "refused", "unresolvable"]


@pytest.mark.parametrize("failure", FAILURES)
def test_the_condition_reads_at_least_as_well_as_the_scripts(
    pod: ImagePod, origin: Origin, tmp_path: Path, failure: str, capsys: pytest.CaptureFixture[str]
) -> None:
    origin.put("/m/model.gguf", DATA)
    url = origin.url + "/m/model.gguf"
    if failure == "not found":
        url = origin.url + "/m/missing.gguf"
    elif failure == "forbidden":
        origin.set_fault("/m/model.gguf", Fault(status=403))
    elif failure == "refused":
        url = closed_port_url() + "/m/model.gguf"
    else:
        url = "http://no-such-host.invalid/m/model.gguf"
    script = SINGLE
    env = cache_env(url)
    ref = on_host(script, env, tmp_path / "ref")
    image = pod.sh(script, env={**env, "LLMKUBE_RETRIES": "0", "LLMKUBE_CONNECT_TIMEOUT": "2"})
    assert ref.returncode != 0 and image.returncode != 0
    want, got = _condition(ref), _condition(image)
    assert want is not None and got is not None, (ref.stderr, image.stderr)
    assert got[0] == want[0], (want, got)
    with capsys.disabled():
        print(f"\n{failure}: scripts: {want[1]!r}\n{' ' * len(failure)}  agent:   {got[1]!r}")


def test_a_draft_model_beside_its_target(pod: ImagePod, origin: Origin) -> None:
    """The draft's downloader is the same command with its own environment
    (mergeStorageConfigs renames the container, never the command)."""
    origin.put("/m/model.gguf", DATA)
    base = serve_repo(origin)
    target = pod.sh(SINGLE, env=cache_env(origin.url + "/m/model.gguf"))
    draft = pod.sh(multi_file(False, True), env=multi_env(base, "/models/draftkey"))
    assert (target.returncode, draft.returncode) == (0, 0), (target, draft)
    assert (pod.models / "k1/model.gguf").read_bytes() == DATA
    assert model_files(pod.models / "draftkey") == FILES


VERIFIERS = [
    by_name("pvc verify"),
    *(s for s in operator_texts() if s.meaning.kind == "pvc"),
]


@pytest.mark.parametrize("verifier", VERIFIERS, ids=[s.name for s in VERIFIERS])
@pytest.mark.parametrize("right", [True, False], ids=["match", "mismatch"])
def test_pvc_verify(pod: ImagePod, tmp_path: Path, right: bool, verifier: Shape) -> None:
    """pvc:// with spec.sha256: the claim read-only at /model-source, hashed
    on every start, nothing written to it (the suite's command, and the
    operator's with LLMKUBE_OPERATOR_TEXTS)."""
    claim = tmp_path / "ref" / "model-source"
    claim.mkdir(parents=True)
    (claim / "m.gguf").write_bytes(DATA)
    pin = hashlib.sha256(DATA).hexdigest() if right else "0" * 64
    env = {
        "MODEL_SOURCE": "pvc://claim/m.gguf",
        "MODEL_PATH": "/model-source/m.gguf",
        "MODEL_SHA256": pin,
    }
    ref = on_host(verifier.script, env, tmp_path / "ref")
    volume = Volume(claim, "/model-source", read_only=True)
    image = pod.sh(verifier.script, env=env, extra=[volume])
    assert agent_line(verifier) in image.stderr, str(image)
    assert (image.returncode == 0, ref.returncode == 0) == (right, right), (image, ref)
    assert sorted(p.name for p in claim.iterdir()) == ["m.gguf"], "the claim was written"
    if not right:
        assert image.compact_term()["reason"] == "ModelTransferChecksumMismatch"
        assert "SHA256 mismatch for the pre-staged" in image.compact_term()["message"]


def test_a_script_whose_source_is_of_another_kind_is_refused(pod: ImagePod, origin: Origin) -> None:
    """A local copy's command with an http MODEL_SOURCE never downloads."""
    origin.put("/m/model.gguf", DATA)
    run = pod.sh(single_file("local", True), env=cache_env(origin.url + "/m/model.gguf"))
    assert run.returncode == 2, str(run)
    assert "local command, but MODEL_SOURCE is a http:// source" in run.compact_term()["message"]
    assert origin.requests() == [] and not (pod.models / "k1").exists()


def test_tls_through_the_operators_ca_mount(pod: ImagePod, tmp_path: Path) -> None:
    """--ca-cert-configmap: the CA at /custom-certs, added to the system
    roots (the agent reads the directory; the prelude's /tmp bundle is not
    needed). Without it both fail, and the condition says untrusted."""
    context, ca_dir = tls_server_context(tmp_path)
    certs = tmp_path / "ref" / "custom-certs"
    certs.mkdir(parents=True)
    for pem in ca_dir.iterdir():
        shutil.copy(pem, certs / pem.name)
    with Origin(tls=context) as tls_origin:
        tls_origin.put("/m/model.gguf", DATA)
        env = cache_env(tls_origin.url + "/m/model.gguf")
        script = with_ca(SINGLE)
        ref = on_host(script, env, tmp_path / "ref")
        image = pod.sh(script, env=env, extra=[Volume(certs, "/custom-certs", read_only=True)])
        same_or_better(image, pod, ref, tmp_path / "ref")

        bare = SINGLE  # no --ca-cert-configmap
        env = cache_env(tls_origin.url + "/m/model.gguf", key="k5")
        ref = on_host(bare, env, tmp_path / "ref-bare")
        image = pod.sh(bare, env={**env, "LLMKUBE_RETRIES": "0"})
    want, got = _condition(ref), _condition(image)
    assert want is not None and got is not None, (ref.stderr, image.stderr)
    assert got[0] == want[0] == "ModelSourceUntrusted", (want, got)


def test_out_of_space_reads_better_than_curls_line(
    pod: ImagePod, origin: Origin, tmp_path: Path
) -> None:
    """A cache volume too small for the model: curl's line matched no
    signature (curl: (23) Failure writing output); the agent's names it."""
    origin.put("/m/model.gguf", DATA)
    env = cache_env(origin.url + "/m/model.gguf")
    script = SINGLE
    with tmpfs(pod.models / "k1") as _, tmpfs(tmp_path / "ref" / "models" / "k1") as _:
        os.chown(pod.models / "k1", UID, GID)
        ref = on_host(script, env, tmp_path / "ref")
        image = pod.sh(script, env={**env, "LLMKUBE_RETRIES": "0"})
        assert not (pod.models / "k1/model.gguf").exists()
    assert ref.returncode != 0 and image.returncode != 0
    want, got = _condition(ref), _condition(image)
    assert got is not None and got[0] == "ModelTransferOutOfSpace", (got, image.stderr)
    if want is not None:
        assert got[0] == want[0]


# A pod spec's command that starts the script some other way: the outer
# script names neither curl nor a MODEL_ variable (the real /bin/sh runs
# it); the script itself comes from the environment.
_INDIRECT = "SUITE_SCRIPT"


def test_curl_reached_some_other_way_says_it_is_not_here(pod: ImagePod, origin: Origin) -> None:
    """An absolute /bin/sh bypasses the image's sh: its curl fails like any
    curl (exit 2), names the host, and the script never exits 0 without the
    model; no key of the source Secret is printed."""
    origin.put("/m/model.gguf", DATA)
    env = {**cache_env(origin.url + "/m/model.gguf"), "AWS_SECRET_ACCESS_KEY": "s3cr3t-value"}
    script = SINGLE.replace("curl --fail", 'curl -u "x:$AWS_SECRET_ACCESS_KEY" --fail')
    assert script != SINGLE
    run = pod.sh(f'exec /bin/sh -c "${_INDIRECT}"', env={**env, _INDIRECT: script})
    assert run.returncode == 2, str(run)
    assert "curl: (2) curl is not in this image" in run.stderr
    assert "s3cr3t-value" not in run.stdout + run.stderr
    assert not (pod.models / "k1/model.gguf").exists()


@pytest.mark.parametrize("options", ["-ec", "-e -c", "-xc"])
def test_sh_with_options_the_agent_honours_runs_the_agent(
    pod: ImagePod, origin: Origin, options: str
) -> None:
    """A pod spec's `sh -ec SCRIPT` reaches the image's sh (first on PATH)
    and runs the agent; it went to /bin/sh, whose curl is not here (#30
    review, llmkube_stager/operator/shell.py command_script)."""
    origin.put("/m/model.gguf", DATA)
    env = {**cache_env(origin.url + "/m/model.gguf"), _INDIRECT: SINGLE}
    run = pod.sh(f'exec sh {options} "${_INDIRECT}"', env=env)
    assert run.returncode == 0, str(run)
    assert agent_line(by_name("single http IfNotPresent cache")) in run.stderr, str(run)
    assert run.compact_term()["stats"]["fetched"] == 1
    assert (pod.models / "k1/model.gguf").read_bytes() == DATA
