"""#11 item 11 / #11 item 12: Hugging Face sources are parsed as what they are.

`hf://` is a path (HfFileSystem's reading): `#`, `?` and `%` belong to the
file name. An https URL is a URL: percent-decoded, a fragment or a query the
agent would drop is refused. A malformed HF_ENDPOINT is a configuration
error, found before any I/O. Pure tests first, then the CLI: the right bytes
published, or exit 2 with nothing on disk.
"""

from __future__ import annotations

import pytest

from llmkube_stager.errors import ConfigError
from llmkube_stager.sources.hf.ref import HfRef, is_hf_url, parse_hf_source
from tests.harness.canary import HF_TOKEN
from tests.harness.sample import payload

pytestmark = pytest.mark.floors

HUB = "https://huggingface.co"
MIRROR = "https://hf-mirror.example:8443/api/huggingfaceml/hf"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("hf://org/t/a#b.gguf", HfRef(HUB, "org/t", "main", "a#b.gguf")),
        ("hf://org/t/a?b.gguf", HfRef(HUB, "org/t", "main", "a?b.gguf")),
        ("hf://org/t/a%23b.gguf", HfRef(HUB, "org/t", "main", "a%23b.gguf")),
        ("hf://org/t@v1.0/dir/x#1.bin", HfRef(HUB, "org/t", "v1.0", "dir/x#1.bin")),
        ("HF://Org/Repo@main", HfRef(HUB, "Org/Repo", "main", "")),
        # The revision is percent-decoded (a PR ref holds slashes).
        ("hf://org/t@refs%2Fpr%2F1/m.gguf", HfRef(HUB, "org/t", "refs/pr/1", "m.gguf")),
        # The first '@' starts the revision (spec §3.2).
        ("hf://org/t@a@b/m.gguf", HfRef(HUB, "org/t", "a@b", "m.gguf")),
    ],
)
def test_hf_scheme_is_a_path(source: str, expected: HfRef) -> None:
    assert parse_hf_source(source, "") == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (f"{HUB}/org/t/resolve/main/a%23b.gguf", HfRef(HUB, "org/t", "main", "a#b.gguf")),
        (f"{HUB}/org/t/resolve/main/m.gguf?download=true", HfRef(HUB, "org/t", "main", "m.gguf")),
        (f"{HUB}/org/t/blob/refs%2Fpr%2F2/m.gguf", HfRef(HUB, "org/t", "refs/pr/2", "m.gguf")),
        (f"{HUB}/org/t/tree/dev", HfRef(HUB, "org/t", "dev", "")),
        ("https://WWW.HuggingFace.co/Org/T", HfRef(HUB, "Org/T", "main", "")),
        (f"{MIRROR}/org/t/resolve/main/a%3Fb", HfRef(MIRROR, "org/t", "main", "a?b")),
    ],
)
def test_url_forms_are_urls(source: str, expected: HfRef) -> None:
    assert parse_hf_source(source, MIRROR) == expected


@pytest.mark.parametrize(
    "source",
    [
        f"{HUB}/org/t/resolve/main/a#b.gguf",  # was: the repo file `a`
        f"{HUB}/org/t/resolve/main/a.gguf#",
        f"{HUB}/org/t/resolve/main/a?b.gguf",  # was: the repo file `a`
        f"{HUB}/org/t/resolve/main/a.gguf?revision=dev",
        f"{HUB}/org/t/resolve/main/a%2Fb.gguf",
        f"{MIRROR}/org/t/resolve/main/x#y",
        "hf://org/t/../u/x.gguf",
        "hf://org/t/./x.gguf",
        "hf://org/t@/x.gguf",
        "hf://org/t/a\x00b",
        "hf://org#x/t/a.gguf",
        "hf://org/t?x/a.gguf",
        "hf://o rg/t/a.gguf",
        "hf://org/..",
        "hf://org",
    ],
)
def test_what_could_mean_two_things_is_refused(source: str) -> None:
    with pytest.raises(ConfigError):
        parse_hf_source(source, MIRROR)


@pytest.mark.parametrize(
    "endpoint",
    [
        "hf-mirror.example",  # no scheme (#11 item 12)
        "hf-mirror.example:8080",
        "ftp://hf-mirror.example",
        "https://",
        "https://hf-mirror.example:99999",
        "https://hf-mirror.example/?x=1",
        "https://hf-mirror.example/#x",
        "https://[::1",
    ],
)
def test_a_malformed_hf_endpoint_is_refused_for_hf_sources(endpoint: str) -> None:
    with pytest.raises(ConfigError, match="HF_ENDPOINT"):
        parse_hf_source("hf://org/t@main/m.gguf", endpoint)


@pytest.mark.parametrize("endpoint", ["hf-mirror.example", "https://h:99999", "https://[::1"])
def test_a_malformed_hf_endpoint_matches_no_plain_url(endpoint: str) -> None:
    """A plain URL source only asks whether it is on the mirror: no."""
    assert not is_hf_url("https://files.example/org/t/resolve/main/m.gguf", endpoint)


# -- through the CLI ---------------------------------------------------------------------


def test_a_hash_in_an_hf_file_name_fetches_that_file_cli(pod, hub, cdn) -> None:
    """`hf://org/t/a#b.gguf` used to publish the repo file `a` with exit 0."""
    files = {"a": payload(4096, 1), "a#b.gguf": payload(6144, 2)}
    hub.add_repo("org/t", files)
    env = pod.single_env(
        "hf://org/t/a#b.gguf", name="model.gguf", HF_ENDPOINT=hub.url, HF_TOKEN=HF_TOKEN
    )

    run = pod.run(env=env)

    run.ok(files=1, fetched=1)
    assert pod.dest("model.gguf").read_bytes() == files["a#b.gguf"]
    commit = hub.commit_of("org/t")
    assert [r.path for r in hub.requests("resolve")] == [f"/org/t/resolve/{commit}/a%23b.gguf"]


@pytest.mark.parametrize(
    ("source", "endpoint"),
    [
        ("{hub}/org/t/resolve/main/a#b.gguf", "{hub}"),
        ("hf://org/t/x.gguf", "hf-mirror.example"),
        ("hf://org/t/x.gguf", "{hub}:99999"),
        ("hf://org/t/../x.gguf", "{hub}"),
    ],
)
def test_refused_sources_exit_2_with_nothing_on_disk(pod, hub, source, endpoint) -> None:
    env = pod.single_env(
        source.format(hub=hub.url),
        name="x.gguf",
        HF_ENDPOINT=endpoint.format(hub=hub.url),
        HF_TOKEN=HF_TOKEN,
    )

    run = pod.run(env=env)

    assert run.returncode == 2, str(run)
    assert run.term["reason"] == "InvalidConfiguration" and run.term["retryable"] is False
    assert not pod.cache_dir.exists()
    assert hub.requests() == []
    assert "Traceback" not in run.stderr
