"""The Hugging Face error table of docs/sources.md is what the code does: every row is
replayed against the fake hub through the real huggingface_hub client and
the real stage pipeline, and must end in the row's reason and retryable.
A row this file cannot replay fails the test (add its replay here)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.canary import HF_TOKEN
from tests.harness.hub import INVALID_CREDENTIALS, FakeHub, HubFault
from tests.harness.origin import Fault, Origin, closed_port_url
from tests.harness.pod import SOURCE_BUDGET, Pod
from tests.harness.sample import payload

pytestmark = pytest.mark.floors

DOC = Path(__file__).resolve().parents[2] / "docs" / "sources.md"
HEADER = "| step | hub answer | HF_TOKEN | reason | retryable |"
REPO = "org/repo"
FILE = "model.safetensors"
FALLBACK = "mirror fallback"


@dataclass(frozen=True)
class Row:
    step: str
    answer: str
    token: bool
    reason: str
    retryable: str

    @property
    def key(self) -> tuple[str, str]:
        return self.step, self.answer


def doc_rows() -> list[Row]:
    lines = DOC.read_text().splitlines()
    start = lines.index(HEADER) + 2  # skip the |---| line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        step, answer, token, reason, retryable = (c.strip() for c in line.strip("|").split("|"))
        rows.append(Row(step, answer, token == "yes", reason, retryable))
    return rows


Setup = Callable[[FakeHub, Origin], dict[str, str]]


def api(fault: HubFault) -> Setup:
    def setup(hub: FakeHub, cdn: Origin) -> dict[str, str]:
        hub.set_fault("api", fault)
        return {}

    return setup


def resolve(fault: HubFault) -> Setup:
    def setup(hub: FakeHub, cdn: Origin) -> dict[str, str]:
        hub.set_fault("resolve", fault)
        return {}

    return setup


def _private(hub: FakeHub, cdn: Origin) -> dict[str, str]:
    hub.add_repo("org/private", {FILE: b"p" * 4096}, private=True)
    return {"MODEL_SOURCE": f"hf://org/private@main/{FILE}"}


def _gated(hub: FakeHub, cdn: Origin) -> dict[str, str]:
    hub.add_repo("org/gated", {FILE: b"g" * 4096}, gated=True)
    return {"MODEL_SOURCE": f"hf://org/gated@main/{FILE}"}


def _missing_file(hub: FakeHub, cdn: Origin) -> dict[str, str]:
    return {"MODEL_SOURCE": f"hf://{REPO}@main/not-there.bin"}


def _refused(hub: FakeHub, cdn: Origin) -> dict[str, str]:
    return {"HF_ENDPOINT": closed_port_url()}


def _cdn_encodes(hub: FakeHub, cdn: Origin) -> dict[str, str]:
    cdn.set_fault(hub.cdn_path_of(REPO, FILE), Fault(content_encoding="gzip"))
    return {}


def _corrupt(hub: FakeHub, cdn: Origin) -> dict[str, str]:
    hub.corrupt(REPO, FILE)
    return {}


REPLAYS: dict[tuple[str, str], Setup] = {
    ("API", "401 RepoNotFound"): _private,
    ("API", "401 Invalid credentials"): api(HubFault(401, error_message=INVALID_CREDENTIALS)),
    ("API", "403 GatedRepo"): api(HubFault(403, error_code="GatedRepo")),
    ("API", "404 RepoNotFound"): api(HubFault(404, error_code="RepoNotFound")),
    ("API", "404 RevisionNotFound"): api(HubFault(404, error_code="RevisionNotFound")),
    ("API", "400"): api(HubFault(400)),
    ("API", "429"): api(HubFault(429, retry_after="1")),
    ("API", "500"): api(HubFault(500)),
    ("API", "503"): api(HubFault(503)),
    ("API", "200 not JSON"): api(HubFault(200, body=b"<html>mirror index</html>")),
    ("API", "404 without X-Error-Code, on a mirror"): api(HubFault(404)),
    # #29 item 10.
    ("API", "redirect loop"): api(
        HubFault(302, headers=(("Location", f"/api/models/{REPO}/revision/main"),))
    ),
    ("API", "redirect to ftp://"): api(HubFault(302, headers=(("Location", "ftp://127.0.0.1/m"),))),
    ("listing", "file not in the commit"): _missing_file,
    ("resolve", "401 GatedRepo"): _gated,
    ("resolve", "403 GatedRepo"): _gated,
    ("resolve", "404 EntryNotFound"): resolve(HubFault(404, error_code="EntryNotFound")),
    ("resolve", "429"): resolve(HubFault(429, retry_after="1")),
    ("resolve", "503"): resolve(HubFault(503)),
    ("connect", "connection refused"): _refused,
    ("bytes", "LFS sha256 mismatch, no pin"): _corrupt,
    # #22 items 1 and 5.
    ("API", "429 RateLimit r=0 t=55"): api(
        HubFault(429, headers=(("RateLimit", '"api";r=0;t=55'),))
    ),
    ("resolve", "429 RateLimit r=0 t=55"): resolve(
        HubFault(429, headers=(("RateLimit", '"resolvers";r=0;t=55'),))
    ),
    ("bytes", "CDN answers Content-Encoding gzip"): _cdn_encodes,
}


def test_the_table_is_there_and_every_row_has_a_replay() -> None:
    rows = doc_rows()
    assert len(rows) >= 15
    assert [r.key for r in rows if r.key not in REPLAYS] == []


@pytest.mark.parametrize("row", doc_rows(), ids=lambda r: f"{r.step}: {r.answer}")
def test_each_row_is_what_the_code_does(tmp_path: Path, row: Row) -> None:
    pod = Pod(tmp_path, budget=SOURCE_BUDGET)
    with Origin() as cdn, FakeHub(cdn, tokens={HF_TOKEN}) as hub:
        hub.add_repo(REPO, {FILE: payload(64 * 1024)})
        env = pod.single_env(
            f"hf://{REPO}@main/{FILE}",
            name=FILE,
            HF_ENDPOINT=hub.url,
            HF_TOKEN=HF_TOKEN if row.token else "",
        )
        env.update(REPLAYS[row.key](hub, cdn))
        run = pod.stage(env)

    if row.reason == FALLBACK:
        assert run.error is None, f"{run.reason}: {run.detail}"
        assert run.has_line("commit pinning and LFS sha256 checks are not available")
        return
    assert run.reason == row.reason, f"{run.reason}: {run.detail}\n{run.stderr}"
    assert run.error is not None
    assert run.error.retryable is (row.retryable == "yes"), run.detail
