"""#14 items 1-2: today's operator reads the agent's failures as it read
curl's. Each failure is produced by the real CLI against loopback origins; the
upstream matcher (tests/harness/upstream_matcher.py, a port of spec §11.2)
runs over what the controller would get: the termination message, and the
log tail when there is no termination message."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmkube_stager.commands.diagnose import condition_for
from tests.harness.disk import partials_of
from tests.harness.mounts import tmpfs
from tests.harness.origin import Blackhole, Fault, Origin, closed_port_url
from tests.harness.pod import Pod, Run, wait_for
from tests.harness.seaweed import SeaweedS3, s3_env
from tests.harness.signing import Signer
from tests.harness.tlsca import tls_server_context
from tests.harness.upstream_matcher import MAX_LINE_BYTES, controller_message, log_tail, match

pytestmark = pytest.mark.e2e

MODEL = "/m/model.gguf"
DATA = b"GGUF" + bytes(range(256)) * 4096  # ~1 MiB


@dataclass(frozen=True)
class Failure:
    """What the controller can read of one failed run."""

    run: Run

    @property
    def reason(self) -> str:
        return str(self.run.term["reason"])

    def by_termination(self) -> str:
        return controller_message(self.run.term_raw, self.run.stderr)

    def by_log_tail(self) -> str:
        # No termination message (an older kubelet path, a crash before it
        # was written): FallbackToLogsOnError gives the log tail.
        return controller_message(None, self.run.stderr)


@pytest.fixture(autouse=True)
def _under_the_operator(pod: Pod) -> None:
    """The operator runs the agent through the image's `sh`, which asks for
    the operator's words (LLMKUBE_REMEDY_WORDS=operator, #46 item 6)."""
    pod.env["LLMKUBE_REMEDY_WORDS"] = "operator"


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: a real ENOSPC."""
    with tmpfs(tmp_path / "small") as mount_point:
        yield mount_point


# -- the failures, each made for real ---------------------------------------------------


def _status(status: int) -> Callable[[Pod, Origin, Path], Run]:
    def make(pod: Pod, origin: Origin, tmp: Path) -> Run:
        origin.put(MODEL, DATA)
        origin.set_fault(MODEL, Fault(status=status))
        pod.single(origin.url + MODEL)
        return pod.run("stage")

    return make


def _multi_404(pod: Pod, origin: Origin, tmp: Path) -> Run:
    origin.put("/r/config.json", b"{}")
    pod.multi(origin.url + "/r/", ["config.json", "weights/missing.safetensors"])
    return pod.run("stage")


def _refused(pod: Pod, origin: Origin, tmp: Path) -> Run:
    pod.single(closed_port_url() + MODEL)
    return pod.run("stage")


def _dns(pod: Pod, origin: Origin, tmp: Path) -> Run:
    pod.single("http://no-such-host.invalid" + MODEL)
    return pod.run("stage")


def _connect_timeout(pod: Pod, origin: Origin, tmp: Path) -> Run:
    with Blackhole("syn-drop") as hole:
        pod.single(hole.url + MODEL)
        return pod.run("stage", env={"LLMKUBE_RETRIES": "0"}, timeout=30)


def _silent_origin(pod: Pod, origin: Origin, tmp: Path) -> Run:
    with Blackhole("accept") as hole:
        pod.single(hole.url + MODEL)
        return pod.run("stage", env={"LLMKUBE_RETRIES": "0"}, timeout=30)


def _stall_mid_body(pod: Pod, origin: Origin, tmp: Path) -> Run:
    origin.put(MODEL, DATA)
    origin.set_fault(MODEL, Fault(stall_after=64 * 1024, methods=("GET",)))
    pod.single(origin.url + MODEL)
    return pod.run("stage", env={"LLMKUBE_RETRIES": "0"}, timeout=30)


def _tls(pod: Pod, origin: Origin, tmp: Path) -> Run:
    ctx, _ca_dir = tls_server_context(tmp)
    with Origin(tls=ctx) as tls_origin:
        tls_origin.put(MODEL, DATA)
        pod.single(tls_origin.url + MODEL)
        return pod.run("stage", env={"LLMKUBE_CA_DIR": str(tmp / "no-certs")})


def _s3_missing(what: str) -> Callable[[Pod, Origin, Path, SeaweedS3], Run]:
    def make(pod: Pod, origin: Origin, tmp: Path, s3: SeaweedS3) -> Run:
        bucket = s3.create_bucket(f"dropin-{what}-{os.getpid()}")
        target = f"{bucket}/no-such.gguf" if what == "key" else "no-such-bucket-dropin/m.gguf"
        pod.single(f"s3://{target}")
        return pod.run("stage", env=s3_env(s3))

    return make


def _enospc(pod: Pod, origin: Origin, tmp: Path, mount: Path) -> Run:
    origin.put(MODEL, DATA * 3)
    origin.set_fault(MODEL, Fault(no_content_length=True))  # size unknown: no preflight
    pod.env.update(
        MODEL_SOURCE=origin.url + MODEL, CACHE_DIR=str(mount), MODEL_PATH=str(mount / "m.gguf")
    )
    # Pinned: a body of unknown length is complete only by its digest (#10).
    return pod.run("stage", env={"MODEL_SHA256": hashlib.sha256(DATA * 3).hexdigest()})


def _preflight(pod: Pod, origin: Origin, tmp: Path, mount: Path) -> Run:
    origin.put(MODEL, DATA * 3)
    pod.env.update(
        MODEL_SOURCE=origin.url + MODEL, CACHE_DIR=str(mount), MODEL_PATH=str(mount / "m.gguf")
    )
    return pod.run("stage")


# (id, producer, the reason both the agent and the upstream matcher must give)
HTTP_FAILURES = [
    ("http-401", _status(401), "ModelSourceUnauthorized"),
    ("http-403", _status(403), "ModelSourceUnauthorized"),
    ("http-404", _status(404), "ModelSourceNotFound"),
    ("http-404-multi", _multi_404, "ModelSourceNotFound"),
    ("connection-refused", _refused, "ModelSourceUnreachable"),
    ("dns", _dns, "ModelSourceUnreachable"),
    ("connect-timeout", _connect_timeout, "ModelSourceUnreachable"),
    ("read-timeout-silent-origin", _silent_origin, "ModelSourceUnreachable"),
    ("stall-mid-body", _stall_mid_body, "ModelSourceUnreachable"),
    ("tls-untrusted", _tls, "ModelSourceUntrusted"),
]


def _check(failure: Failure, expected: str) -> None:
    assert failure.reason == expected, str(failure.run)
    for source, message in (
        ("termination message", failure.by_termination()),
        ("log tail", failure.by_log_tail()),
    ):
        hit = match(message)
        assert hit is not None, f"the upstream matcher finds nothing in the {source}:\n{message}"
        assert hit.reason == expected, (source, hit, message)
        # Our own reading (`diagnose`, importable by a controller) of both forms.
        condition = condition_for(message)
        assert condition is not None and condition["reason"] == expected, (source, condition)


@pytest.mark.parametrize(
    ("make", "expected"), [f[1:] for f in HTTP_FAILURES], ids=[f[0] for f in HTTP_FAILURES]
)
def test_upstream_matcher_classifies_the_agents_failure(
    pod: Pod, origin: Origin, tmp_path: Path, make: Callable[..., Run], expected: str
) -> None:
    _check(Failure(make(pod, origin, tmp_path)), expected)


# The S3 adapter puts what S3 said into the error it raises
# (sources/s3/errors.py: Wire(http_status, s3_code)); a HEAD answer has no
# body, so the status is what the matcher reads.
@pytest.mark.parametrize("what", ["key", "bucket"])
def test_upstream_matcher_classifies_a_missing_s3_object(
    pod: Pod, origin: Origin, tmp_path: Path, s3: SeaweedS3, what: str
) -> None:
    _check(Failure(_s3_missing(what)(pod, origin, tmp_path, s3)), "ModelSourceNotFound")


@pytest.mark.parametrize("make", [_enospc, _preflight], ids=["enospc", "preflight"])
def test_upstream_matcher_classifies_out_of_space(
    pod: Pod, origin: Origin, tmp_path: Path, small_tmpfs: Path, make: Callable[..., Run]
) -> None:
    _check(Failure(make(pod, origin, tmp_path, small_tmpfs)), "ModelTransferOutOfSpace")


def test_the_matched_line_is_a_useful_condition(pod: Pod, origin: Origin, tmp_path: Path) -> None:
    """The controller shows the matched line cut at 200 bytes: for a one-line
    JSON termination message that is its first 200 bytes, which must start
    with the reason and the cause, not JSON framing or the remedy."""
    failure = Failure(_status(404)(pod, origin, tmp_path))
    hit = match(failure.by_termination())
    assert hit is not None
    assert hit.line.startswith('{"message":"ERROR: ModelSourceNotFound: '), hit.line
    assert "returned HTTP 404" in hit.line, hit.line
    assert len(hit.line.encode()) <= MAX_LINE_BYTES + 3


def test_log_tail_alone_is_classified_in_json_logs_too(
    pod: Pod, origin: Origin, tmp_path: Path
) -> None:
    origin.put(MODEL, DATA)
    origin.set_fault(MODEL, Fault(status=404))
    pod.single(origin.url + MODEL)
    run = pod.run("stage", env={"LLMKUBE_LOG_FORMAT": "json"})
    for line in run.stderr.splitlines():
        json.loads(line)
    hit = match(log_tail(run.stderr))
    assert hit is not None and hit.reason == "ModelSourceNotFound", run.stderr
    condition = condition_for(log_tail(run.stderr))
    assert condition is not None and condition["reason"] == "ModelSourceNotFound", condition


# -- #14 item 2: a 200-byte cut of the raw file is a useful condition ----------


def _hold_lock(pod: Pod, origin: Origin, tmp: Path) -> Run:
    import fcntl

    origin.put(MODEL, DATA)
    dest = pod.single(origin.url + MODEL)
    dest.parent.mkdir(parents=True)
    with open(dest.parent / ".llmkube.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        return pod.run("stage", env={"LLMKUBE_LOCK_TIMEOUT": "0.3"})


def _sigterm(pod: Pod, origin: Origin, tmp: Path) -> Run:
    import signal

    origin.put(MODEL, DATA * 4)
    origin.set_fault(MODEL, Fault(rate_bytes_per_s=256 * 1024, methods=("GET",)))
    dest = pod.single(origin.url + MODEL)
    proc = pod.popen("stage")
    wait_for(lambda: bool(partials_of(dest)), 20, "a partial", proc)
    proc.send_signal(signal.SIGTERM)
    return pod.finish(proc)


def _truncated(pod: Pod, origin: Origin, tmp: Path) -> Run:
    cache = pod.multi(closed_port_url() + "/r/", ["a.bin"])
    cache.mkdir(parents=True)
    (cache / "a.bin").write_bytes(b"short")
    (cache / "a.bin.llmkube-size").write_text("1000")
    return pod.run("stage")


def _pin(pod: Pod, origin: Origin, tmp: Path) -> Run:
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    return pod.run("stage", env={"MODEL_SHA256": "0" * 64})


def _verify(present: list[str]) -> Callable[[Pod, Origin, Path], Run]:
    def make(pod: Pod, origin: Origin, tmp: Path) -> Run:
        cache = pod.multi(origin.url + "/r/", ["a.bin", "b.bin"])
        cache.mkdir(parents=True)
        for rel in present:
            (cache / rel).write_bytes(b"x")
        (cache / ".llmkube.lock").write_text("")
        return pod.run("verify")

    return make


def _env(**env: str) -> Callable[[Pod, Origin, Path], Run]:
    def make(pod: Pod, origin: Origin, tmp: Path) -> Run:
        pod.single(origin.url + MODEL)
        return pod.run("stage", env=env)

    return make


def _not_allowed(pod: Pod, origin: Origin, tmp: Path) -> Run:
    source = tmp / "host" / "model.gguf"
    source.parent.mkdir()
    source.write_bytes(DATA)
    pod.single(str(source))
    return pod.run("stage", env={"LLMKUBE_ALLOWED_HOST_ROOTS": "/srv/models"})


def _read_only(pod: Pod, origin: Origin, tmp: Path) -> Run:
    with tmpfs(tmp / "ro", "ro,size=1m") as mount:
        origin.put(MODEL, DATA)
        pod.env.update(
            MODEL_SOURCE=origin.url + MODEL,
            CACHE_DIR=str(mount / "k"),
            MODEL_PATH=str(mount / "k" / "model.gguf"),
        )
        return pod.run("stage")


def _out_of_space(pod: Pod, origin: Origin, tmp: Path) -> Run:
    with tmpfs(tmp / "small") as mount:
        return _preflight(pod, origin, tmp, mount)


def _fault(status: int, **extra: str) -> Callable[[Pod, Origin, Path], Run]:
    def make(pod: Pod, origin: Origin, tmp: Path) -> Run:
        origin.put(MODEL, DATA)
        origin.set_fault(MODEL, Fault(status=status, retry_after="0"))
        pod.single(origin.url + MODEL)
        return pod.run("stage", env={"LLMKUBE_RETRIES": "0", **extra})

    return make


def _unsigned(pod: Pod, origin: Origin, tmp: Path) -> Run:
    """#34: a trust anchor set and no model.sig beside the model."""
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    return pod.run("stage", env=Signer(tmp / "publisher").anchor_env)


# (reason, producer, words of the cause that the 200-byte cut must show)
EVERY_REASON = [
    ("ModelSourceUnreachable", _refused, "connection refused"),
    ("ModelSourceUnavailable", _fault(503), "returned HTTP 503"),
    ("ModelSourceUnauthorized", _fault(401), "returned HTTP 401"),
    ("ModelSourceNotFound", _fault(404), "returned HTTP 404"),
    ("ModelSourceRejected", _fault(400), "returned HTTP 400"),
    ("ModelSourceUntrusted", _tls, "TLS certificate verify failed"),
    ("ModelSourceRateLimited", _fault(429), "returned HTTP 429"),
    ("ModelSourceChanged", _fault(412), "returned HTTP 412"),
    ("ModelTransferOutOfSpace", _out_of_space, "no space left on device"),
    ("ModelTransferChecksumMismatch", _pin, "spec.sha256 mismatch"),
    ("ModelSignatureInvalid", _unsigned, "no signature bundle at"),
    ("ModelCacheTruncated", _truncated, "a.bin"),
    ("ModelCacheLockTimeout", _hold_lock, "another writer held"),
    ("ModelCacheUnwritable", _read_only, "mounted read-only"),
    ("ModelCacheEmpty", _verify([]), "is missing or empty"),
    ("ModelCacheIncomplete", _verify(["a.bin"]), "missing: b.bin"),
    ("InvalidFileSet", _env(MODEL_PATH="", MODEL_FILES="a/../b"), "MODEL_FILES entry"),
    ("SourceNotAllowed", _not_allowed, "is not within the allowed host path roots"),
    ("InvalidConfiguration", _env(LLMKUBE_CONNECT_TIMEOUT="abc"), "LLMKUBE_CONNECT_TIMEOUT"),
    ("ModelTransferCancelled", _sigterm, "SIGTERM"),
]
# Not produced here for real, see tests/unit/test_termination.py (built directly):
# ModelCacheLockUnsupported (a FUSE mount: tests/fuse), ModelTransferSizeMismatch
# (an origin whose body outgrows what it announced between HEAD and GET),
# ModelStagerInternalError (a bug); ModelCacheFailing and ModelCacheDisconnected
# need a loop device or a FUSE mount (tests/storage/test_storage_faults.py).
NOT_PRODUCED_HERE = {
    "ModelCacheFailing",
    "ModelCacheDisconnected",
    "ModelCacheLockUnsupported",
    "ModelTransferSizeMismatch",
    "ModelStagerInternalError",
    "ModelTransferSucceeded",  # below: the success message is first too
}


def test_every_reason_is_either_produced_here_or_built_in_the_unit_test() -> None:
    from llmkube_stager.errors import Reason

    covered = {row[0] for row in EVERY_REASON} | NOT_PRODUCED_HERE
    assert covered == {r.value for r in Reason}


@pytest.mark.parametrize(
    ("reason", "make", "cause"), EVERY_REASON, ids=[row[0] for row in EVERY_REASON]
)
def test_the_first_200_bytes_show_the_reason_and_cause(
    pod: Pod, origin: Origin, tmp_path: Path, reason: str, make: Callable[..., Run], cause: str
) -> None:
    run = make(pod, origin, tmp_path)
    assert run.term_raw is not None, str(run)
    assert len(run.term_raw) <= 4096
    doc = json.loads(run.term_raw)
    assert doc["reason"] == reason, str(run)
    assert next(iter(doc)) == "message"
    cut = run.term_raw[:MAX_LINE_BYTES].decode(errors="ignore")
    assert cut.startswith(f'{{"message":"ERROR: {reason}: '), cut
    assert cause in cut, (cause, cut)


def test_the_success_message_is_first_too(pod: Pod, origin: Origin) -> None:
    origin.put(MODEL, DATA)
    pod.single(origin.url + MODEL)
    run = pod.run("stage")
    assert run.returncode == 0, str(run)
    assert (run.term_raw or b"").startswith(b'{"message":"Model staged: 1 files (1 fetched'), run
