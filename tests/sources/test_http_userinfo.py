"""#11 item 13 Credentials in the source URL (`https://user:pass@host/...`).

The probe (httpx) sent them and the GET data path (http.client) did not, so
an origin that checks them answered the HEAD and refused the bytes. Now
AuthPolicy carries them as one Basic header on every request to the source
URL's origin (probe, GET, a redirect hop that stays there), never to another
host, and they are never printed.
"""

from __future__ import annotations

import base64
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

from tests.harness.canary import canary, leaks
from tests.harness.disk import tree
from tests.harness.origin import Fault, Origin
from tests.harness.sample import payload

USER = "llmkube"
PASSWORD = canary("pw@:/") + "%é"  # characters a URL must percent-encode
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def with_userinfo(url: str, user: str = USER, password: str = PASSWORD) -> str:
    parts = urlsplit(url)
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{parts.netloc}"
    return urlunsplit(parts._replace(netloc=netloc))


@pytest.fixture
def other():
    with Origin() as server:
        yield server


def test_every_request_to_the_origin_carries_the_credentials(pod, origin) -> None:
    data = payload(300 * 1024)
    origin.put("/models/model.gguf", data)

    run = pod.stage(pod.single_env(with_userinfo(f"{origin.url}/models/model.gguf"))).ok()

    assert pod.dest().read_bytes() == data
    seen = [(r.method, r.headers.get("authorization")) for r in origin.requests()]
    assert {m for m, _ in seen} == {"HEAD", "GET"}
    assert all(auth == BASIC for _, auth in seen), seen  # the GETs had none before
    assert leaks(PASSWORD, run.stderr) == []


def test_multi_file_gets_carry_the_credentials(pod, origin) -> None:
    files = {"a.bin": payload(4096, 1), "sub/b.bin": payload(8192, 2)}
    for rel, data in files.items():
        origin.put(f"/m/{rel}", data)

    pod.stage(pod.multi_env(with_userinfo(f"{origin.url}/m/"), list(files))).ok()

    assert {rel: pod.dest(rel).read_bytes() for rel in files} == files
    gets = [r for r in origin.requests() if r.method == "GET"]
    assert len(gets) == len(files)
    assert all(r.headers.get("authorization") == BASIC for r in gets)


def test_a_get_without_a_probe_carries_the_credentials(pod, origin) -> None:
    """HEAD refused (405): the GET goes to the source URL itself."""
    data = payload(4096)
    origin.put("/model.gguf", data)
    origin.set_fault("/model.gguf", Fault(status=405, methods=("HEAD",)))

    pod.stage(pod.single_env(with_userinfo(f"{origin.url}/model.gguf"))).ok()

    assert pod.dest().read_bytes() == data
    (get,) = [r for r in origin.requests() if r.method == "GET"]
    assert get.headers.get("authorization") == BASIC


@pytest.mark.parametrize("location_userinfo", [False, True], ids=["plain", "with-userinfo"])
def test_never_across_a_redirect_to_another_host(pod, origin, other, location_userinfo) -> None:
    data = payload(64 * 1024)
    other.put("/blob", data)
    target = f"{other.url}/blob"
    if location_userinfo:
        # The origin's own redirect may not smuggle credentials in either.
        target = with_userinfo(target, "x", "smuggled")
    origin.set_fault("/model.gguf", Fault(redirect_to=target))

    pod.stage(pod.single_env(with_userinfo(f"{origin.url}/model.gguf"))).ok()

    assert pod.dest().read_bytes() == data
    assert origin.requests() and all(
        r.headers.get("authorization") == BASIC for r in origin.requests()
    )
    assert other.requests()
    assert all("authorization" not in r.headers for r in other.requests()), other.requests()


def test_the_password_is_never_printed(pod, origin, other) -> None:
    """Canary through the CLI: stage (success and failure) and plan."""
    data = payload(4096)
    origin.put("/model.gguf", data)
    good = pod.single_env(with_userinfo(f"{origin.url}/model.gguf"))
    bad = pod.single_env(with_userinfo(f"{other.url}/missing.gguf"), name="missing.gguf")

    runs = [pod.run(env=good), pod.run("plan", "--probe", env=good), pod.run(env=bad)]

    runs[0].ok(files=1, fetched=1)
    assert runs[2].returncode != 0 and runs[2].term["reason"] == "ModelSourceNotFound"
    written = [v.decode("latin-1") for v in tree(pod.tmp).values()]
    encoded = quote(PASSWORD, safe="")
    for run in runs:
        assert leaks(PASSWORD, run.outputs, *written) == [], str(run)
        assert leaks(encoded, run.outputs) == [], str(run)
        assert BASIC.split()[1][:16] not in run.outputs
