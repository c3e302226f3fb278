"""#29 item 9: requests the agent cannot encode.

A MODEL_SOURCE whose path is not ASCII (curl downloads it), a redirect
whose `Location` holds raw UTF-8, an internationalized host name through a
forward proxy, an HF_TOKEN with a line break: each ended in exit 3
(http.client encodes the request line in ASCII and header values in
latin-1, and raises ValueError with the header value in its words).

What must hold: what can be encoded is encoded as curl and browsers do it
(the path's and query's UTF-8 bytes and spaces percent-encoded, the host
name in IDNA A-labels, the raw bytes of a Location percent-encoded as
curl does on a redirect); an ASCII URL goes out byte for byte as before;
what cannot be sent (a host IDNA cannot encode, a token with a line break)
is InvalidConfiguration naming the variable, never its value; a Location
that cannot be sent is a bad answer.

Origins: the loopback origin (it looks files up by the percent-decoded
path, as most servers do), the raw-socket origin for a Location of raw
bytes, the suite's forward proxy (it takes any `*.localhost` name for
loopback) and a private CA for https through it.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from tests.harness.canary import canary, leaks
from tests.harness.hub import FakeHub
from tests.harness.origin import Origin
from tests.harness.pod import Pod
from tests.harness.proxy import ForwardProxy
from tests.harness.rawhttp import RawOrigin, Reply, Request, serve
from tests.harness.sample import payload
from tests.harness.tlsca import make_ca

KIB = 1024
IDN = "bücher.localhost"
IDN_ACE = "xn--bcher-kva.localhost"

PATHS = {
    "latin": "/modèle/model.gguf",
    "cyrillic": "/модели/файл.gguf",
    "cjk": "/模型/模型.gguf",
    "space": "/my models/model v2.gguf",
}


@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
def test_a_source_path_beyond_ascii_is_sent_percent_encoded(
    origin: Origin, pod: Pod, path: str
) -> None:
    """Before: exit 3 (UnicodeEncodeError in http.client's request line);
    a space: InvalidURL, retried as unreachable."""
    data = payload(64 * KIB, 41)
    origin.put(path, data)

    pod.stage(pod.single_env(origin.url + path)).ok()

    assert pod.dest().read_bytes() == data
    sent = {r.path for r in origin.requests()}
    assert sent == {quote(path)}, sent  # the UTF-8 bytes, percent-encoded


def test_a_query_beyond_ascii_is_sent_percent_encoded(origin: Origin, pod: Pod) -> None:
    data = payload(64 * KIB, 42)
    origin.put("/files/model.gguf", data)

    pod.stage(pod.single_env(origin.url + "/files/model.gguf?rev=版本")).ok()

    assert {r.path for r in origin.requests()} == {"/files/model.gguf?rev=%E7%89%88%E6%9C%AC"}


def test_a_base_beyond_ascii_with_files_beyond_ascii(origin: Origin, pod: Pod) -> None:
    """MODEL_FILES under a base URL whose own path is not ASCII."""
    files = {"tokenizer ü.json": b'{"a": 1}', "モデル.gguf": payload(32 * KIB, 43)}
    for rel, data in files.items():
        origin.put(f"/répertoire/{rel}", data)

    pod.stage(pod.multi_env(origin.url + "/répertoire/", list(files))).ok()

    assert {rel: pod.dest(rel).read_bytes() for rel in files} == files


def test_an_ascii_url_goes_out_byte_for_byte(origin: Origin, pod: Pod) -> None:
    """Percent-escapes, reserved characters and case stay as the user wrote
    them (a signed URL's query is part of its signature)."""
    data = payload(16 * KIB, 44)
    origin.put("/a/b/Model.gguf", data)  # the origin looks up the decoded path
    raw = "/a%2Fb/Model.gguf?X-Sig=AbC%2B%2f&x=1;y=(2)"

    pod.stage(pod.single_env(origin.url + raw)).ok()

    assert {r.path for r in origin.requests()} == {raw}


# -- a redirect's Location ---------------------------------------------------------------


def _redirecting(data: bytes, location: str):
    """/start redirects to `location`, written on the wire as its UTF-8 bytes
    (the raw origin writes header text as latin-1)."""
    wire_location = location.encode().decode("latin-1")

    def script(request: Request) -> Reply:
        if request.path == "/start":
            return Reply(302, [("Location", wire_location)])
        return serve(request, data, '"v1"')

    return script


@pytest.mark.parametrize(
    "location", ["/modèle/файл.gguf", "/a b/模型.gguf"], ids=["utf-8", "space-and-cjk"]
)
def test_a_location_of_raw_utf8_is_followed_percent_encoded(pod: Pod, location: str) -> None:
    """curl percent-encodes a Location's bytes above 0x7f and its spaces.
    Before: exit 3."""
    data = payload(64 * KIB, 45)
    with RawOrigin(_redirecting(data, location)) as origin:
        pod.stage(pod.single_env(origin.url + "/start")).ok()
        followed = {s.request.path for s in origin.requests()} - {"/start"}
    assert followed == {quote(location)}
    assert pod.dest().read_bytes() == data


def test_a_location_with_a_control_character_is_a_bad_answer(pod: Pod) -> None:
    """Nothing can carry it: refused, nothing fetched from it. Before: an
    InvalidURL taken for an unreachable origin, retried."""
    with RawOrigin(_redirecting(b"x", "/a\x01b.gguf")) as origin:
        run = pod.stage(pod.single_env(origin.url + "/start")).failed(
            "ModelSourceRejected", retryable=False
        )
        assert {s.request.path for s in origin.requests()} == {"/start"}
    assert "Location" in run.term["message"] and run.sleeps == []


# -- an internationalized host ------------------------------------------------------------


def test_an_idn_host_through_an_http_proxy_goes_as_its_a_labels(origin: Origin, pod: Pod) -> None:
    """Before: exit 3 (the absolute-form request line is not ASCII)."""
    data = payload(64 * KIB, 46)
    origin.put("/model.gguf", data)
    with ForwardProxy() as proxy:
        env = pod.single_env(f"http://{IDN}:{origin.port}/model.gguf", HTTP_PROXY=proxy.url)
        pod.stage(env).ok()
        targets = {r.target for r in proxy.requests()}
    assert targets == {f"http://{IDN_ACE}:{origin.port}/model.gguf"}, targets
    assert {r.headers["host"] for r in origin.requests()} == {f"{IDN_ACE}:{origin.port}"}
    assert pod.dest().read_bytes() == data


def test_an_idn_host_through_an_https_proxy_tunnel(pod: Pod, tmp_path: Path) -> None:
    """CONNECT and TLS (SNI, the certificate's name) with the A-labels.
    Before: the CONNECT line carried the host's latin-1 bytes."""
    ca = make_ca(tmp_path / "pki", hosts=("127.0.0.1", IDN_ACE))
    data = payload(64 * KIB, 47)
    with Origin(tls=ca.server_context()) as origin, ForwardProxy() as proxy:
        origin.put("/model.gguf", data)
        env = pod.single_env(
            f"https://{IDN}:{origin.port}/model.gguf",
            HTTPS_PROXY=proxy.url,
            LLMKUBE_CA_DIR=str(ca.ca_dir),
        )
        pod.stage(env).ok()
        targets = {r.target for r in proxy.requests()}
    assert targets == {f"{IDN_ACE}:{origin.port}"}, targets
    assert pod.dest().read_bytes() == data


def test_a_host_idna_cannot_encode_is_invalid_configuration(pod: Pod) -> None:
    """U+2603 is no IDNA 2008 code point (curl with libidn2 refuses it)."""
    run = pod.stage(pod.single_env("http://\u2603.localhost:9/model.gguf")).failed(
        "InvalidConfiguration"
    )
    assert run.returncode == 2
    assert "MODEL_SOURCE" in run.term["message"]


# -- a token no header can carry ----------------------------------------------------------


@pytest.mark.parametrize("breaker", ["\n", "\r\n", "\r", "\x00"], ids=["lf", "crlf", "cr", "nul"])
def test_an_hf_token_with_a_line_break_is_invalid_configuration_never_shown(
    origin: Origin, pod: Pod, breaker: str
) -> None:
    """The HF_ENDPOINT origin gets the token as a header on the data path.
    Before: exit 3, the token in the ValueError's words (its repr: a
    redactor looking for the value never saw it)."""
    first, second = canary("tokA"), canary("tokB")
    origin.put("/files/model.gguf", payload(16 * KIB, 48))
    env = pod.single_env(
        origin.url + "/files/model.gguf",
        HF_ENDPOINT=origin.url,
        HF_TOKEN=first + breaker + second,
    )

    run = pod.stage(env).failed("InvalidConfiguration")

    assert run.returncode == 2
    assert "HF_TOKEN" in run.term["message"]
    assert leaks(first, run.outputs) == [] and leaks(second, run.outputs) == []
    assert origin.requests() == []  # found before any request


def test_an_hf_token_with_a_line_break_on_an_hf_source(pod: Pod, hub: FakeHub) -> None:
    first, second = canary("tokC"), canary("tokD")
    hub.add_repo("org/repo", {"model.gguf": payload(16 * KIB, 49)})
    env = pod.single_env(
        "hf://org/repo/model.gguf", HF_ENDPOINT=hub.url, HF_TOKEN=f"{first}\n{second}"
    )

    run = pod.stage(env).failed("InvalidConfiguration")

    assert "HF_TOKEN" in run.term["message"]
    assert leaks(first, run.outputs) == [] and leaks(second, run.outputs) == []
    assert hub.requests() == []


def test_a_location_to_an_idn_host_through_a_proxy(pod: Pod) -> None:
    """The redirect's target host is written in Unicode (raw UTF-8 on the
    wire): followed through the proxy by its A-labels. Before: exit 3."""
    data = payload(64 * KIB, 50)
    with RawOrigin(_redirecting(data, "/")) as origin, ForwardProxy() as proxy:
        port = origin.url.rsplit(":", 1)[1]  # the Location names the origin's own port
        origin.script = _redirecting(data, f"http://{IDN}:{port}/final.gguf")
        env = pod.single_env(origin.url + "/start", HTTP_PROXY=proxy.url)
        pod.stage(env).ok()
        targets = [r.target for r in proxy.requests()]
    assert f"http://{IDN_ACE}:{port}/final.gguf" in targets, targets
    assert pod.dest().read_bytes() == data
