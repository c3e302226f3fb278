"""gs:// sources against the real gcp-storage-emulator behind the suite's
front (tests/harness/gcs.py), with google-auth's real credential flows
pointed at the suite's fake metadata server and token endpoint (#33 items
1, 4). What went over the wire is the front's record.
"""

from __future__ import annotations

import base64
import hashlib
import re
import signal
import time
from pathlib import Path

import pytest

from llmkube_stager.schemes import REMEDY_RATE_LIMITED_GCS
from llmkube_stager.sources.gcs.errors import REMEDY_NOT_FOUND_GCS, REMEDY_UNAUTHORIZED_GCS
from tests.harness.canary import Secrets, assert_no_leak, leaks, outputs_of
from tests.harness.disk import openat_tracer, read_back_opens, tree
from tests.harness.gcs import (
    GceMetadata,
    GcsEmulator,
    GcsFault,
    GcsFront,
    TokenEndpoint,
    gcs_env,
)
from tests.harness.origin import Blackhole, closed_port_url
from tests.harness.pause import await_stopped, pause_flags
from tests.harness.pod import ON_CHANGE, Pod, import_lines, wait_for
from tests.harness.proxy import ForwardProxy
from tests.harness.sample import KIB, MIB, payload
from tests.harness.tlsca import make_ca

pytestmark = pytest.mark.floors


@pytest.fixture
def bucket(gcs_bucket: str) -> str:
    """A bucket of the test's own on the session's emulator (tests/conftest.py)."""
    return gcs_bucket


def _accept_issued(
    gcs: GcsFront, issuer: GceMetadata | TokenEndpoint, *, only_newest: bool = False
) -> None:
    """The front accepts the tokens the issuer hands out (all, or the newest only)."""
    gcs.accept("never-issued")

    def issued(token: str) -> None:
        with gcs.state.lock:
            tokens = gcs.state.tokens if gcs.state.tokens is not None else set()
            gcs.state.tokens = {token} if only_newest else {*tokens, token}

    issuer.state.on_issue = issued


def _key_env(gcs: GcsFront, no_metadata: GceMetadata, key: Path, **extra: str) -> dict[str, str]:
    return gcs_env(gcs, no_metadata, GOOGLE_APPLICATION_CREDENTIALS=str(key), **extra)


# -- happy paths ------------------------------------------------------------------------------


def test_single_object_with_a_service_account_key(
    pod: Pod, gcs: GcsFront, bucket: str, token_endpoint: TokenEndpoint, no_metadata: GceMetadata
) -> None:
    """The key file's JWT grant at its token_uri (signature checked by the
    fake endpoint), the token on the metadata GET and the media GET, the
    media GET pinned to the generation; neither the key nor the token in
    any output."""
    data = payload(192 * KIB)
    obj = gcs.emulator.put(bucket, "models/llama.gguf", data)
    key = token_endpoint.key_file(pod.tmp / "key.json")
    _accept_issued(gcs, token_endpoint)
    env = pod.single_env(f"gs://{bucket}/models/llama.gguf", **_key_env(gcs, no_metadata, key))
    env["LLMKUBE_LOG_LEVEL"] = "debug"  # each request's line too (#46 item 5)

    run = pod.run(env=env)

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    assert any(x.startswith("> GET ") and "| auth: Bearer <" in x for x in run.lines), run.stderr
    assert "Downloading model from Google Cloud Storage..." in run.stderr
    (token,) = token_endpoint.issued
    meta, media = gcs.requests("meta"), gcs.requests("media")
    assert [m.bearer for m in meta] == [token]
    assert [(m.bearer, m.query["generation"], m.status) for m in media] == [
        (token, [obj["generation"]], 200)
    ]
    written = [d.decode("latin-1") for d in tree(pod.cache_dir).values()]
    private_key = key.read_text().split("PRIVATE KEY-----")[1][100:160]
    for secret in (token, private_key):
        assert leaks(secret, run.outputs, *written) == [], "a secret leaked"
    assert no_metadata.state.paths == []  # a key file: the metadata server is never asked


def test_a_prefix_of_more_than_1000_objects_is_listed_in_pages_once(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata
) -> None:
    """1,003 objects: two pages (pageToken), one listing for the run, no
    metadata request per object, every file at its listed generation."""
    gcs.emulator.put_many(
        bucket, {f"m/shard-{i:04d}.bin": f"shard {i}\n".encode() for i in range(1003)}
    )
    gcs.emulator.put(bucket, "m-v2/other.bin", b"not under the prefix")
    env = gcs_env(gcs, no_metadata, MODEL_SOURCE=f"gs://{bucket}/m", CACHE_DIR=str(pod.tmp / "c"))

    run = pod.run(env=env)

    run.ok(files=1003, fetched=1003)
    staged = tree(pod.tmp / "c")
    assert staged["shard-0000.bin"] == b"shard 0\n" and staged["shard-1002.bin"] == b"shard 1002\n"
    assert not any("other" in rel for rel in staged)
    lists = gcs.requests("list")
    assert [r.query.get("pageToken") for r in lists] == [None, ["1000"]]
    assert all(r.query["prefix"] == ["m"] for r in lists)  # at a '/' boundary: below
    assert gcs.requests("meta") == [] and len(gcs.requests("media")) == 1003
    assert all("authorization" not in r.headers for r in gcs.requests())  # anonymous


def test_warm_start_makes_no_request_and_imports_no_google_library(
    pod: Pod, gcs: GcsFront, bucket: str, metadata: GceMetadata
) -> None:
    gcs.emulator.put(bucket, "m/a.bin", b"a" * 100)
    gcs.emulator.put(bucket, "m/b.bin", b"b" * 200)
    _accept_issued(gcs, metadata)
    env = gcs_env(gcs, metadata, MODEL_SOURCE=f"gs://{bucket}/m", CACHE_DIR=str(pod.tmp / "c"))
    pod.run(env=env).ok(files=2, fetched=2)
    asked, tokens = len(gcs.requests()), len(metadata.issued)

    warm = pod.run(env=env, python_flags=("-X", "importtime"))

    warm.ok(files=2, fetched=0, reused=2)
    assert len(gcs.requests()) == asked and len(metadata.issued) == tokens
    imported = import_lines(warm.stderr)
    gcs_wire = tuple(f"llmkube_stager.sources.gcs.{m}" for m in ("auth", "session", "transport"))
    assert not {m for m in imported if m.startswith(("google", *gcs_wire))}
    assert "llmkube_stager.sources.wire.connection" not in imported


def test_workload_identity_token_from_the_metadata_server(
    pod: Pod, gcs: GcsFront, bucket: str, metadata: GceMetadata
) -> None:
    data = payload(64 * KIB)
    gcs.emulator.put(bucket, "model.gguf", data)
    _accept_issued(gcs, metadata)

    run = pod.run(env=pod.single_env(f"gs://{bucket}/model.gguf", **gcs_env(gcs, metadata)))

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    (token,) = metadata.issued
    assert {r.bearer for r in gcs.requests()} == {token}
    assert leaks(token, run.outputs) == []


def test_on_change_revalidates_by_generation(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata
) -> None:
    gcs.emulator.put(bucket, "m/a.bin", b"one" * 100)
    gcs.emulator.put(bucket, "m/b.bin", b"two" * 100)
    env = gcs_env(
        gcs, no_metadata, MODEL_SOURCE=f"gs://{bucket}/m", CACHE_DIR=str(pod.tmp / "c"), **ON_CHANGE
    )
    pod.run(env=env).ok(files=2, fetched=2)
    before = len(gcs.requests("media"))

    same = pod.run(env=env)

    same.ok(files=2, fetched=0, reused=2)
    assert len(gcs.requests("media")) == before  # a listing only
    gcs.emulator.put(bucket, "m/b.bin", b"new" * 100)  # same size, a new generation

    changed = pod.run(env=env)

    changed.ok(files=2, fetched=1, reused=1)
    assert (pod.tmp / "c" / "b.bin").read_bytes() == b"new" * 100
    assert len(gcs.requests("media")) == before + 1


# -- the generation pin and the declared digests ----------------------------------------------


def test_object_replaced_mid_transfer_is_never_spliced(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata
) -> None:
    """The body is cut after 64 KiB; before the resume the object is
    replaced by one of the same size: the resume names the old generation,
    GCS answers 404 for it, the run stops with ModelSourceChanged and
    publishes nothing (never 64 KiB old + the rest new)."""
    old, new = payload(256 * KIB, 1), payload(256 * KIB, 2)
    first = gcs.emulator.put(bucket, "model.gguf", old)
    gcs.fault(GcsFault("media", times=1, cut_after_bytes=64 * KIB))
    replaced: list[str] = []

    def replace_once(request: object, sent: int) -> None:
        if not replaced:
            replaced.append(gcs.emulator.put(bucket, "model.gguf", new)["generation"])

    gcs.state.after_media = replace_once
    env = pod.single_env(
        f"gs://{bucket}/model.gguf", **gcs_env(gcs, no_metadata, LLMKUBE_CONNECTIONS="1")
    )

    run = pod.run(env=env)

    run.failed("ModelSourceChanged")
    assert not pod.dest().exists()
    media = gcs.requests("media")
    assert len(media) >= 2 and replaced and replaced[0] != first["generation"]
    assert all(m.query["generation"] == [first["generation"]] for m in media)
    resume = media[1]
    assert resume.headers.get("range", "").startswith("bytes=") and resume.status == 404


@pytest.mark.parametrize("checked", ["crc32c", "md5"])
def test_bytes_that_miss_the_declared_digest_are_never_published(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata, checked: str
) -> None:
    """The object declares both: the crc32c is checked where google-crc32c's
    C code runs (#33 item 5, as Google's clients do), the md5 where it does
    not (a copy of the library without its compiled module)."""
    data = payload(128 * KIB)
    obj = gcs.emulator.put(bucket, "model.gguf", data)
    assert obj["md5Hash"] == base64.b64encode(hashlib.md5(data).digest()).decode()
    assert obj["crc32c"]
    gcs.fault(GcsFault("media", corrupt=True))
    env = pod.single_env(f"gs://{bucket}/model.gguf", **gcs_env(gcs, no_metadata))
    if checked == "md5":
        env["PYTHONPATH"] = str(_crc32c_without_its_c_code(pod.tmp / "no-crc32c-c"))

    run = pod.run(env=env)

    run.failed("ModelTransferChecksumMismatch")
    assert f"the {checked} the store declares" in run.compact_term()["message"]
    assert not pod.dest().exists()


@pytest.mark.parametrize("form", ["object", "prefix"])
def test_kill_mid_file_then_rerun_resumes_with_a_range(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata, form: str
) -> None:
    """SIGKILL with half the file sent; the rerun resumes with a Range at the
    same generation. A prefix's rerun finishes from the listing it recorded
    before its first publish (a.json): no second listing, the generation
    read back from the record."""
    data = payload(24 * MIB)
    obj = gcs.emulator.put(bucket, "m/model.bin", data)
    gcs.fault(GcsFault("media", times=1, name="m/model.bin", rate_bytes_per_s=8 * MIB))
    extra = gcs_env(gcs, no_metadata, LLMKUBE_CONNECTIONS="1", LLMKUBE_FILES_IN_FLIGHT="1")
    if form == "object":
        env, dest = pod.single_env(f"gs://{bucket}/m/model.bin", **extra), pod.dest()
    else:
        gcs.emulator.put(bucket, "m/a.json", b"{}")
        env = {**extra, "MODEL_SOURCE": f"gs://{bucket}/m", "CACHE_DIR": str(pod.tmp / "c")}
        dest = pod.tmp / "c" / "model.bin"
    proc = pod.popen(env=env)
    wait_for(lambda: gcs.state.media_sent >= 12 * MIB, 30, "12 MiB sent", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    gcs.state.faults.clear()
    listed = len(gcs.requests("list"))

    run = pod.run(env=env)

    assert dest.read_bytes() == data
    resume = gcs.requests("media")[-1]
    assert resume.query["generation"] == [obj["generation"]]
    offset = int(resume.headers["range"].removeprefix("bytes=").split("-")[0])
    assert 0 < offset < len(data) and resume.status == 206
    assert run.outcome is None or run.outcome.bytes_fetched == len(data) - offset
    assert len(gcs.requests("list")) == listed == (1 if form == "prefix" else 0)
    if form == "prefix":
        assert (pod.tmp / "c" / "a.json").read_bytes() == b"{}"
        assert gcs.requests("meta") == []  # the recorded validator held the generation
        run.ok(files=2, fetched=1, reused=1)
    else:
        run.ok(files=1, fetched=1)


# -- tokens -----------------------------------------------------------------------------------


def test_a_token_revoked_mid_transfer_is_refreshed_and_the_transfer_goes_on(
    pod: Pod, gcs: GcsFront, bucket: str, metadata: GceMetadata
) -> None:
    """The first token is revoked while the body is on the way (the
    connection drops at 64 KiB): the resume gets 401, the agent asks the
    metadata server for a new token once and resumes with it."""
    data = payload(256 * KIB)
    gcs.emulator.put(bucket, "model.gguf", data)
    _accept_issued(gcs, metadata)
    gcs.fault(GcsFault("media", times=1, cut_after_bytes=64 * KIB))

    def revoke(request: object, sent: int) -> None:
        gcs.state.after_media = None
        with gcs.state.lock:
            gcs.state.tokens = set()  # the next issued token is accepted (_accept_issued)

    gcs.state.after_media = revoke
    env = pod.single_env(
        f"gs://{bucket}/model.gguf", **gcs_env(gcs, metadata, LLMKUBE_CONNECTIONS="1")
    )

    run = pod.run(env=env)

    run.ok(files=1, fetched=1)
    assert pod.dest().read_bytes() == data
    first, second = metadata.issued
    media = [(m.bearer, m.status, m.headers.get("range")) for m in gcs.requests("media")]
    assert media[0][:2] == (first, 200)
    assert media[1][:2] == (first, 401)
    assert media[2][0] == second and media[2][1] == 206 and media[2][2] == f"bytes={64 * KIB}-"


def test_a_token_near_its_expiry_is_refreshed_before_the_request(
    pod: Pod, gcs: GcsFront, bucket: str
) -> None:
    """Tokens that expire within google-auth's margin are refreshed before
    each request: the front accepts only the newest token, and no request
    is refused."""
    with GceMetadata(expires_in_s=120) as metadata:
        for i in range(3):
            gcs.emulator.put(bucket, f"m/{i}.bin", payload(8 * KIB, i))
        _accept_issued(gcs, metadata, only_newest=True)
        env = gcs_env(
            gcs,
            metadata,
            MODEL_SOURCE=f"gs://{bucket}/m",
            CACHE_DIR=str(pod.tmp / "c"),
            LLMKUBE_FILES_IN_FLIGHT="1",
        )

        pod.run(env=env).ok(files=3, fetched=3)

        assert [r.status for r in gcs.requests()] == [200] * 4
        assert len(metadata.issued) >= 4
        assert len({r.bearer for r in gcs.requests()}) == 4


# -- refusals ---------------------------------------------------------------------------------


def test_a_key_the_token_endpoint_refuses_is_unauthorized_naming_the_variable(
    pod: Pod, gcs: GcsFront, bucket: str, token_endpoint: TokenEndpoint, no_metadata: GceMetadata
) -> None:
    gcs.emulator.put(bucket, "model.gguf", b"x" * 100)
    key = token_endpoint.key_file(pod.tmp / "key.json", own_key=False)
    env = pod.single_env(f"gs://{bucket}/model.gguf", **_key_env(gcs, no_metadata, key))

    run = pod.run(env=env)

    run.failed("ModelSourceUnauthorized")
    assert run.returncode == 4
    term = run.compact_term()
    assert (
        term["remedy"] == REMEDY_UNAUTHORIZED_GCS
        and "GOOGLE_APPLICATION_CREDENTIALS" in term["message"]
    )
    assert gcs.requests() == [] and token_endpoint.state.refused >= 1
    private_key = key.read_text().split("PRIVATE KEY-----")[1][100:160]
    assert leaks(private_key, run.outputs) == []


def test_an_expired_token_refused_again_is_unauthorized(
    pod: Pod, gcs: GcsFront, bucket: str, metadata: GceMetadata
) -> None:
    """GCS refuses every token (revoked access): one refresh, then
    ModelSourceUnauthorized, exit 4."""
    gcs.emulator.put(bucket, "model.gguf", b"x" * 100)
    gcs.accept("nothing-the-agent-has")

    run = pod.run(env=pod.single_env(f"gs://{bucket}/model.gguf", **gcs_env(gcs, metadata)))

    run.failed("ModelSourceUnauthorized")
    assert run.returncode == 4 and run.compact_term()["remedy"] == REMEDY_UNAUTHORIZED_GCS
    assert len(metadata.issued) == 2  # the first, and one refresh after the 401
    assert [r.status for r in gcs.requests()] == [401, 401]
    for token in metadata.issued:
        assert leaks(token, run.outputs) == []


def test_a_missing_key_file_is_a_configuration_error(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata
) -> None:
    env = pod.single_env(
        f"gs://{bucket}/model.gguf", **_key_env(gcs, no_metadata, pod.tmp / "absent.json")
    )

    run = pod.run(env=env)

    run.failed("InvalidConfiguration")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in run.compact_term()["message"]
    assert gcs.requests() == []


@pytest.mark.parametrize("missing", ["object", "bucket", "prefix"])
def test_a_missing_object_bucket_or_prefix_is_not_found(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata, missing: str
) -> None:
    gcs.emulator.put(bucket, "m/a.bin", b"a")
    if missing == "prefix":
        env = gcs_env(
            gcs, no_metadata, MODEL_SOURCE=f"gs://{bucket}/nothing", CACHE_DIR=str(pod.tmp / "c")
        )
    else:
        where = (
            f"gs://{bucket}/m/absent.bin" if missing == "object" else "gs://no-such-bucket/m.bin"
        )
        env = pod.single_env(where, **gcs_env(gcs, no_metadata))

    run = pod.run(env=env)

    run.failed("ModelSourceNotFound")
    assert run.returncode == 4 and run.compact_term()["remedy"] == REMEDY_NOT_FOUND_GCS


@pytest.mark.parametrize("status", [429, 503])
def test_throttling_past_the_budget_is_rate_limited_with_the_gcs_remedy(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata, status: int
) -> None:
    gcs.emulator.put(bucket, "model.gguf", b"x" * 100)
    gcs.fault(GcsFault("meta", status=status, retry_after="0"))

    run = pod.run(env=pod.single_env(f"gs://{bucket}/model.gguf", **gcs_env(gcs, no_metadata)))

    run.failed("ModelSourceRateLimited")
    assert run.returncode == 1 and run.compact_term()["remedy"] == REMEDY_RATE_LIMITED_GCS
    assert len(gcs.requests("meta")) == 3  # the first and LLMKUBE_RETRIES=2 more


# -- KServe mode ------------------------------------------------------------------------------


def _visible(root: Path) -> dict[str, bytes]:
    """What a model server sees under DEST_DIR (links followed, the agent's
    private dot directory left out)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    }


def test_kserve_storage_uri_of_a_gs_prefix_and_of_one_object(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata
) -> None:
    """KServe's `SRC_URI DEST_DIR` form: a prefix is listed (its tree kept),
    a URI naming one object stages that object under its own name."""
    gcs.emulator.put(bucket, "iris/model.joblib", b"weights")
    gcs.emulator.put(bucket, "iris/sub/config.json", b"{}")
    gcs.emulator.put(bucket, "single/model.pt", b"pt")
    first, second = pod.tmp / "mnt" / "models", pod.tmp / "mnt" / "one"

    run = pod.run(
        f"gs://{bucket}/iris",
        str(first),
        f"gs://{bucket}/single/model.pt",
        str(second),
        env=gcs_env(gcs, no_metadata),
    )

    assert run.returncode == 0, str(run)
    assert _visible(first) == {"model.joblib": b"weights", "sub/config.json": b"{}"}
    assert _visible(second) == {"model.pt": b"pt"}
    assert len(gcs.requests("list")) == 2 and gcs.requests("meta") == []


# -- proxies and trust ------------------------------------------------------------------------


def test_an_https_endpoint_is_trusted_by_llmkube_ca_dir_and_tunnelled_through_the_proxy(
    pod: Pod, gcs_emulator: GcsEmulator, bucket: str, metadata: GceMetadata, proxy: ForwardProxy
) -> None:
    """The JSON API over TLS with the test's CA: a CONNECT tunnel through
    HTTPS_PROXY for the listing and the bytes, the CA from LLMKUBE_CA_DIR;
    the metadata server is asked directly, never through the proxy."""
    ca = make_ca(pod.tmp / "pki")
    gcs_emulator.put(bucket, "model.gguf", b"m" * 1000)
    with GcsFront(gcs_emulator, tls=ca.server_context()) as front:
        _accept_issued(front, metadata)
        proxies = {"HTTPS_PROXY": proxy.url, "HTTP_PROXY": proxy.url}
        env = gcs_env(front, metadata, LLMKUBE_CA_DIR=str(ca.ca_dir), **proxies)

        pod.run(env=pod.single_env(f"gs://{bucket}/model.gguf", **env)).ok(files=1, fetched=1)

        hostport = front.url.removeprefix("https://")
        assert {(r.method, r.target) for r in proxy.requests()} == {("CONNECT", hostport)}
        assert [r.status for r in front.requests()] == [200, 200]
        assert len(metadata.issued) == 1

        pod.single(f"gs://{bucket}/model.gguf", key="untrusted")
        untrusted = pod.run(env={**pod.env, **gcs_env(front, metadata)})

        untrusted.failed("ModelSourceUntrusted")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("GCE_METADATA_HOST", "evil.example/x?"),
        ("GCE_METADATA_IP", "user@169.254.169.254"),
        ("STORAGE_EMULATOR_HOST", "ftp://emulator:21"),
        ("STORAGE_EMULATOR_HOST", "http://user:pw@emulator:9023"),
        ("MODEL_SOURCE", "gs://{bucket}"),
        ("MODEL_SOURCE", "gs://{bucket}/m/"),
    ],
)
def test_a_bad_endpoint_variable_is_refused_before_any_request(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata, name: str, value: str
) -> None:
    value = value.format(bucket=bucket)
    env = pod.single_env(f"gs://{bucket}/model.gguf", **gcs_env(gcs, no_metadata, **{name: value}))

    run = pod.run(env=env)

    run.failed("InvalidConfiguration")
    assert name in run.compact_term()["message"]
    assert "pw" not in run.outputs.replace("password", "")
    assert gcs.requests() == [] and no_metadata.state.paths == []


def test_no_metadata_server_listening_means_anonymous_requests(
    pod: Pod, gcs: GcsFront, bucket: str
) -> None:
    """A node that is no GKE node: the ping to GCE_METADATA_IP is refused
    (here a closed loopback port), the agent settles on anonymous at once.
    Failed before: the refused connect escaped the ping as ModelSourceUnreachable."""
    gcs.emulator.put(bucket, "model.gguf", b"public" * 100)
    closed = closed_port_url().removeprefix("http://")
    env = {"STORAGE_EMULATOR_HOST": gcs.url, "GCE_METADATA_HOST": closed, "GCE_METADATA_IP": closed}

    run = pod.run(env=pod.single_env(f"gs://{bucket}/model.gguf", **env))

    run.ok(files=1, fetched=1)
    assert all("authorization" not in r.headers for r in gcs.requests())


@pytest.mark.parametrize("silent", ["GCE_METADATA_IP", "GCE_METADATA_HOST"])
def test_a_metadata_address_that_accepts_and_never_answers_is_left_within_its_short_bound(
    pod: Pod, gcs: GcsFront, bucket: str, metadata: GceMetadata, silent: str
) -> None:
    """#41 item 5: the metadata server's address accepts the connection and
    never answers. The ping (GCE_METADATA_IP) and the token request
    (GCE_METADATA_HOST) are bounded as google-auth bounds them (3 s), not by
    LLMKUBE_STALL_TIMEOUT (30 s here): a silent ping is no metadata server
    (anonymous), a silent token request a retried ModelSourceUnreachable.
    Failed before: each wait took LLMKUBE_STALL_TIMEOUT."""
    gcs.emulator.put(bucket, "model.gguf", b"public" * 100)
    with Blackhole("accept") as hole:
        hostport = hole.url.removeprefix("http://")
        env = gcs_env(gcs, metadata, **{silent: hostport, "LLMKUBE_STALL_TIMEOUT": "30"})
        started = time.monotonic()
        run = pod.run(env=pod.single_env(f"gs://{bucket}/model.gguf", **env), timeout=120)
        elapsed_s = time.monotonic() - started
        asked = hole.connections

    assert asked >= 1
    if silent == "GCE_METADATA_IP":
        run.ok(files=1, fetched=1)
        assert all(r.bearer is None for r in gcs.requests())
        assert elapsed_s < 15, elapsed_s
    else:
        run.failed("ModelSourceUnreachable", retryable=True)
        assert "metadata server" in run.term["message"]
        # One wait per attempt (LLMKUBE_RETRIES=2 in the source budget).
        assert elapsed_s < 3 * 3 + 15, elapsed_s
    assert metadata.issued == []


# -- canaries ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["success", "key-refused", "token-refused", "not-found"])
def test_no_google_secret_and_no_other_credential_in_any_output_or_request(
    pod: Pod,
    gcs: GcsFront,
    bucket: str,
    token_endpoint: TokenEndpoint,
    no_metadata: GceMetadata,
    case: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A key file, its tokens and every other secret variable of the pod
    (HF_TOKEN, AWS_*) through success and each refusal: none in stdout,
    stderr, the termination message or any file the agent left (CONTRACT
    §5), and only the GCS token in a request to GCS."""
    secrets = Secrets.new("CANARY")
    gcs.emulator.put(bucket, "model.gguf", payload(32 * KIB))
    # Outside the pod's directories, which are searched (a Secret's mount).
    secret_dir = tmp_path_factory.mktemp("secret")
    key = token_endpoint.key_file(secret_dir / "key.json", own_key=case != "key-refused")
    _accept_issued(gcs, token_endpoint)
    if case == "token-refused":
        token_endpoint.state.on_issue = None  # issued, never accepted: 401, 401
    name = "absent.gguf" if case == "not-found" else "model.gguf"
    env = pod.single_env(f"gs://{bucket}/{name}", **_key_env(gcs, no_metadata, key))

    run = pod.run(env={**env, **secrets.env})

    expected = {
        "success": "ModelTransferSucceeded",
        "key-refused": "ModelSourceUnauthorized",
        "token-refused": "ModelSourceUnauthorized",
        "not-found": "ModelSourceNotFound",
    }[case]
    assert run.term["reason"] == expected, str(run)
    private_key = key.read_text().split("PRIVATE KEY-----")[1].replace("\\n", "")
    canaries = {
        **secrets.named,
        **{f"token-{i}": t for i, t in enumerate(token_endpoint.issued)},
        **{f"private-key-{i}": private_key[i : i + 60] for i in range(100, 1500, 200)},
    }
    assert_no_leak(outputs_of(run, pod.tmp), canaries)
    for request in gcs.requests():
        for value in request.headers.values():
            assert not any(c in value for c in secrets.env.values()), request.path


def test_a_slow_stream_widens_to_ranged_gets_of_the_same_generation(
    pod: Pod, gcs: GcsFront, bucket: str, metadata: GceMetadata
) -> None:
    """48 MiB whose first stream is slow: the engine widens to parallel
    ranged GETs, each naming the listed generation and carrying the token;
    the declared md5 is then checked over the whole partial (read back)."""
    data = payload(48 * MIB, 5)
    obj = gcs.emulator.put(bucket, "big.bin", data)
    _accept_issued(gcs, metadata)
    gcs.fault(GcsFault("media", times=1, name="big.bin", rate_bytes_per_s=8 * MIB))
    env = pod.single_env(f"gs://{bucket}/big.bin", "big.bin", **gcs_env(gcs, metadata))

    run = pod.run(env=env)

    run.ok(files=1, fetched=1)
    assert pod.dest("big.bin").read_bytes() == data
    media = gcs.requests("media")
    ranged = [m for m in media if re.fullmatch(r"bytes=\d+-\d+", m.headers.get("range", ""))]
    assert len(media) >= 3 and ranged, [m.headers.get("range") for m in media]
    assert {m.query["generation"][0] for m in media} == {obj["generation"]}
    assert {m.bearer for m in media} == set(metadata.issued)


def test_a_flipped_byte_in_a_ranged_part_is_caught_by_the_read_back(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata
) -> None:
    """The stream is slow and widens; every ranged part has one byte
    flipped: no body was whole, so the partial is read back against the
    declared md5 and nothing is published."""
    data = payload(48 * MIB, 6)
    gcs.emulator.put(bucket, "big.bin", data)
    gcs.fault(GcsFault("media", times=1, name="big.bin", rate_bytes_per_s=8 * MIB))
    gcs.fault(GcsFault("media", name="big.bin", corrupt=True))
    env = pod.single_env(
        f"gs://{bucket}/big.bin", "big.bin", **gcs_env(gcs, no_metadata, LLMKUBE_RETRIES="0")
    )

    run = pod.run(env=env)

    run.failed("ModelTransferChecksumMismatch")
    assert not pod.dest("big.bin").exists()
    assert any(re.fullmatch(r"bytes=\d+-\d+", m.headers.get("range", "")) for m in gcs.requests())


def test_a_whole_body_is_checked_against_the_crc32c_while_it_streams(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata, tmp_path: Path
) -> None:
    """One GET of the whole object: its crc32c (checked rather than the
    md5, google-crc32c's C code being installed) is taken as the bytes
    arrive, so the partial is never opened again to be read back (#33 item
    5: after direct writes the read-back read the disk); strace's record of
    the agent's opens."""
    data = payload(16 * MIB, 26)
    gcs.emulator.put(bucket, "big.bin", data)
    trace = tmp_path / "opens.log"
    env = pod.single_env(
        f"gs://{bucket}/big.bin", "big.bin", **gcs_env(gcs, no_metadata, LLMKUBE_CONNECTIONS="1")
    )

    run = pod.run(env=env, wrapper=openat_tracer(trace))

    run.ok(files=1, fetched=1)
    assert pod.dest("big.bin").read_bytes() == data
    assert [m.headers.get("range") for m in gcs.requests("media")] == [None]
    read_back = read_back_opens(trace)
    assert read_back == [], read_back


def test_a_second_fetch_in_one_run_is_checked_against_the_md5_again(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata
) -> None:
    """A set of two (OnChange: both staged, then renamed): the first GET of
    each object is whole and matches its md5 while received. The agent is
    frozen after the first rename; an old script's `*.tmp` sweep takes the
    other partial, so the agent stages that file again in the same run,
    with the same probe answer, and this second GET has a byte flipped. It
    must be checked against the md5 again, never published because the
    first body matched (review of #33: the match was kept on the probe
    answer for the whole run). google-crc32c without its C code, so that
    the md5 is what is checked (with it, the crc32c is, read back)."""
    data = {"a.bin": payload(128 * KIB, 41), "b.bin": payload(128 * KIB, 42)}
    for rel, body in data.items():
        gcs.emulator.put(bucket, f"m/{rel}", body)
        gcs.fault(GcsFault("media", name=f"m/{rel}", corrupt=True, after=1))
    cache = pod.tmp / "c"
    env = gcs_env(
        gcs, no_metadata, MODEL_SOURCE=f"gs://{bucket}/m", CACHE_DIR=str(cache), **ON_CHANGE
    )
    env["PYTHONPATH"] = str(_crc32c_without_its_c_code(pod.tmp / "no-crc32c-c"))
    flags, pause = pause_flags([cache / rel for rel in data], times=1)
    proc = pod.popen(env={**env, **pause}, python_flags=flags)
    try:
        await_stopped(proc, 60)
        published = {p.name for p in cache.iterdir() if p.name in data}
        (lost,) = set(data) - published
        swept = list(cache.glob("*.tmp"))  # `find "$CACHE_DIR" -name '*.tmp' -delete`
        assert any(p.name.startswith(lost) for p in swept), swept
        for partial in swept:
            partial.unlink()
    finally:
        proc.send_signal(signal.SIGCONT)
    run = pod.finish(proc)

    assert "staging it again" in run.stderr, str(run)
    seconds = [m for m in gcs.requests("media") if m.path.endswith(f"/o/m/{lost}")]
    assert len(seconds) >= 2, "the lost file was never fetched again"
    on_disk = cache / lost
    assert not on_disk.exists() or on_disk.read_bytes() == data[lost], "wrong bytes published"
    run.failed("ModelTransferChecksumMismatch")
    assert "the md5 the store declares" in run.compact_term()["message"]


def test_kserve_sha256_objects_are_files_like_any_other(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata
) -> None:
    """#31 item 4 for gs://: in KServe mode a `*.sha256` object, beside the
    file whose stamp name it has or named alone by its exact key, is staged
    byte for byte; the stamp check runs after the patterns, on every
    listing (staging/listed.py), never in the source's own listing."""
    gcs.emulator.put(bucket, "sums/model.bin", b"weights")
    gcs.emulator.put(bucket, "sums/model.bin.sha256", b"abc  model.bin\n")
    gcs.emulator.put(bucket, "one/model.onnx.sha256", b"def  model.onnx\n")
    first, second = pod.tmp / "mnt" / "models", pod.tmp / "mnt" / "one"

    run = pod.run(
        f"gs://{bucket}/sums",
        str(first),
        f"gs://{bucket}/one/model.onnx.sha256",
        str(second),
        env=gcs_env(gcs, no_metadata),
    )

    assert run.returncode == 0, str(run)
    assert _visible(first) == {"model.bin": b"weights", "model.bin.sha256": b"abc  model.bin\n"}
    assert _visible(second) == {"model.onnx.sha256": b"def  model.onnx\n"}
    asked = len(gcs.requests())
    warm = pod.run(
        f"gs://{bucket}/sums",
        str(first),
        f"gs://{bucket}/one/model.onnx.sha256",
        str(second),
        env=gcs_env(gcs, no_metadata),
    )
    assert warm.returncode == 0, str(warm)
    assert len(gcs.requests()) == asked  # a warm start asks nothing
    assert _visible(first)["model.bin.sha256"] == b"abc  model.bin\n"


# -- crc32c: composite objects (no md5Hash) ---------------------------------------------------


@pytest.mark.parametrize("form", ["object", "prefix"])
def test_a_composite_objects_crc32c_refuses_a_flipped_byte(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata, form: str
) -> None:
    """A composed object declares crc32c alone: with google-crc32c's C
    implementation installed (the image's dependencies, the dev venv), a
    byte flipped on the way is refused against it; before, such an object
    was protected by the generation pin alone and the bad byte was
    published."""
    data = payload(256 * KIB, 31)
    gcs.emulator.put(bucket, "models/model.gguf", data)
    gcs.composite("models/model.gguf")
    gcs.fault(GcsFault("media", corrupt=True))
    env = _crc_env(pod, gcs, bucket, no_metadata, form, LLMKUBE_RETRIES="0")

    run = pod.run(env=env)

    run.failed("ModelTransferChecksumMismatch")
    assert "crc32c" in run.compact_term()["message"]
    assert not _crc_dest(pod, form).exists()


@pytest.mark.parametrize("form", ["object", "prefix"])
def test_a_composite_object_whose_crc32c_matches_is_staged(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata, form: str
) -> None:
    data = payload(256 * KIB, 32)
    gcs.emulator.put(bucket, "models/model.gguf", data)
    gcs.composite("models/model.gguf")

    pod.run(env=_crc_env(pod, gcs, bucket, no_metadata, form)).ok(files=1, fetched=1)

    assert _crc_dest(pod, form).read_bytes() == data
    described = [r for r in gcs.requests() if r.kind in ("meta", "list")]
    assert described, "the object was never described"


def _crc_env(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata, form: str, **extra: str
) -> dict[str, str]:
    if form == "object":
        return pod.single_env(
            f"gs://{bucket}/models/model.gguf", **gcs_env(gcs, no_metadata, **extra)
        )
    return pod.env | {
        "MODEL_SOURCE": f"gs://{bucket}/models/",
        "CACHE_DIR": str(pod.cache_dir),
        **gcs_env(gcs, no_metadata, **extra),
    }


def _crc_dest(pod: Pod, form: str) -> Path:
    return pod.dest() if form == "object" else pod.cache_dir / "model.gguf"


# -- STORAGE_EMULATOR_HOST is an emulator: anonymous, as google-cloud-storage -----------------


@pytest.mark.parametrize("issuer", ["key_file", "metadata_server"])
def test_storage_emulator_host_gets_no_credential_even_with_one_at_hand(
    pod: Pod,
    gcs: GcsFront,
    bucket: str,
    token_endpoint: TokenEndpoint,
    metadata: GceMetadata,
    issuer: str,
) -> None:
    """google-cloud-storage's Client gives an endpoint named by
    STORAGE_EMULATOR_HOST AnonymousCredentials (client.py, `_is_emulator_set`):
    neither a key file's token nor Workload Identity's is sent there (over
    plain http when the variable is host:port), and no token is even asked
    for. API_ENDPOINT_OVERRIDE is the custom endpoint that gets them."""
    data = payload(24 * KIB, 77)
    gcs.emulator.put(bucket, "model.gguf", data)
    extra = {"STORAGE_EMULATOR_HOST": gcs.url, "GCE_METADATA_HOST": metadata.hostport}
    extra["GCE_METADATA_IP"] = metadata.hostport
    if issuer == "key_file":
        key = token_endpoint.key_file(pod.tmp / "key.json")
        extra["GOOGLE_APPLICATION_CREDENTIALS"] = str(key)

    run = pod.run(env=pod.single_env(f"gs://{bucket}/model.gguf", **extra)).ok(files=1, fetched=1)

    assert pod.dest().read_bytes() == data
    assert gcs.requests() and all("authorization" not in r.headers for r in gcs.requests())
    assert token_endpoint.issued == [] and metadata.issued == []
    assert "STORAGE_EMULATOR_HOST" in run.stderr


def test_api_endpoint_override_is_a_custom_endpoint_that_gets_the_credentials(
    pod: Pod, gcs: GcsFront, bucket: str, token_endpoint: TokenEndpoint, no_metadata: GceMetadata
) -> None:
    """google-cloud-storage sends its credentials to API_ENDPOINT_OVERRIDE
    (use_auth_w_custom_endpoint defaults to True): a private endpoint."""
    data = payload(24 * KIB, 78)
    gcs.emulator.put(bucket, "model.gguf", data)
    key = token_endpoint.key_file(pod.tmp / "key.json")
    _accept_issued(gcs, token_endpoint)
    env = {
        "API_ENDPOINT_OVERRIDE": gcs.url,
        "GCE_METADATA_HOST": no_metadata.hostport,
        "GCE_METADATA_IP": no_metadata.hostport,
        "GOOGLE_APPLICATION_CREDENTIALS": str(key),
    }

    pod.run(env=pod.single_env(f"gs://{bucket}/model.gguf", **env)).ok(files=1, fetched=1)

    (token,) = token_endpoint.issued
    assert {r.bearer for r in gcs.requests()} == {token}


# -- crc32c without google-crc32c's C code: said, once --------------------------------------


def _crc32c_without_its_c_code(where: Path) -> Path:
    """A copy of the installed google_crc32c without its compiled module:
    the library's own fallback (`implementation == "python"`), as on a
    platform with no wheel. Put first on PYTHONPATH of the pod."""
    import shutil

    import google_crc32c

    package = Path(google_crc32c.__file__).parent
    target = where / "google_crc32c"
    shutil.copytree(package, target, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    return where


def test_a_composite_object_unchecked_for_want_of_crc32c_c_code_is_said_once(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata
) -> None:
    """Two composite objects (crc32c only) and google-crc32c without its C
    code: the crc32c cannot be checked at speed (transfer/declared.py leaves
    it unchecked), so the run warns, once, naming the library; a JSON log
    stays JSON (the library's own RuntimeWarning is not let through)."""
    import json

    files = {f"part-{i}.bin": payload(64 * KIB, 40 + i) for i in range(2)}
    for rel, data in files.items():
        gcs.emulator.put(bucket, f"models/{rel}", data)
    gcs.composite(*(f"models/{rel}" for rel in files))
    shim = _crc32c_without_its_c_code(pod.tmp / "no-crc32c-c")
    env = pod.env | {
        "MODEL_SOURCE": f"gs://{bucket}/models/",
        "CACHE_DIR": str(pod.cache_dir),
        "PYTHONPATH": str(shim),
        "LLMKUBE_LOG_FORMAT": "json",
        **gcs_env(gcs, no_metadata),
    }

    run = pod.run(env=env).ok(files=2, fetched=2)

    lines = [json.loads(line) for line in run.stderr.splitlines() if line.strip()]
    said = [line for line in lines if "google-crc32c" in json.dumps(line)]
    assert len(said) == 1, run.stderr
    assert said[0].get("level") == "warning", said
    for rel, data in files.items():
        assert (pod.cache_dir / rel).read_bytes() == data


def test_composite_objects_with_crc32c_c_code_are_not_warned_about(
    pod: Pod, gcs: GcsFront, bucket: str, no_metadata: GceMetadata
) -> None:
    gcs.emulator.put(bucket, "models/model.gguf", payload(32 * KIB, 44))
    gcs.composite("models/model.gguf")

    run = pod.run(env=_crc_env(pod, gcs, bucket, no_metadata, "prefix")).ok(files=1, fetched=1)

    assert "google-crc32c" not in run.stderr
