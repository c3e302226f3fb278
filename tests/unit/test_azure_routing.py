"""#33 item 2: Azure Blob is an https URL, routed by its host; every other
https URL (the hub's included) is routed as before. Pure: no request."""

from __future__ import annotations

import base64
from urllib.parse import unquote

import pytest

from llmkube_stager.config import Config
from llmkube_stager.errors import ConfigError
from llmkube_stager.schemes import of_source
from llmkube_stager.sources import open_source
from llmkube_stager.sources.azure.ref import parse_azure_ref, parse_connection_string
from llmkube_stager.sources.azure.sas import container_sas


def _config(source: str, **extra: object) -> Config:
    return Config(
        source=source, cache_dir="/models/k", model_path="/models/k/m", model_files=(), **extra
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "url",
    [
        "https://acct.blob.core.windows.net/c/models/m.gguf",
        "https://ACCT.Blob.Core.Windows.Net/c/m",
        "https://acct.z20.blob.storage.azure.net/c/m",
        "https://acct.blob.core.windows.net:443/c/m?sv=2021&sig=x",
    ],
)
def test_azure_hosts_are_azure(url: str) -> None:
    row = of_source(url)
    assert row is not None and row.kind == "azure"
    assert type(open_source(_config(url))).__name__ == "AzureSource"


@pytest.mark.parametrize(
    ("url", "kind", "source"),
    [
        ("https://models.example.com/m.gguf", "http", "HttpSource"),
        ("http://acct.blob.core.windows.net/c/m", "http", "HttpSource"),  # KServe's forms are https
        ("https://acct.blob.core.windows.net.evil.example/c/m", "http", "HttpSource"),
        ("https://acct-x.blob.core.windows.net/c/m", "http", "HttpSource"),
        ("https://acct.file.core.windows.net/s/m", "http", "HttpSource"),
        ("https://evil.example/acct.blob.core.windows.net/c/m", "http", "HttpSource"),
        ("https://huggingface.co/org/repo/resolve/main/m.gguf", "http", "HfSource"),
    ],
)
def test_other_https_urls_are_unchanged(url: str, kind: str, source: str) -> None:
    row = of_source(url)
    assert row is not None and row.kind == kind
    assert type(open_source(_config(url))).__name__ == source


def test_the_connection_string_moves_the_endpoint_of_the_same_account_only() -> None:
    conn = parse_connection_string(
        "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=a2V5;"
        "BlobEndpoint=http://127.0.0.1:10000/acct;"
    )
    ref = parse_azure_ref("https://acct.blob.core.windows.net/c/dir/m%20x.gguf", conn)
    assert (ref.account, ref.container, ref.path) == ("acct", "c", "dir/m x.gguf")
    assert ref.blob_url(ref.path) == "http://127.0.0.1:10000/acct/c/dir/m%20x.gguf"
    with pytest.raises(ConfigError, match="account 'acct'"):
        parse_azure_ref("https://other.blob.core.windows.net/c/m", conn)
    with pytest.raises(ConfigError, match="AZURE_STORAGE_CONNECTION_STRING") as err:
        parse_connection_string("AccountKey")
    assert "AccountKey" not in str(err.value).split(" is ")[1]


def test_the_sas_is_signed_as_azure_storage_blob_signs_it() -> None:
    """The string-to-sign of API_VERSION, byte for byte the SDK's
    (BlobSharedAccessSignature.generate_container), so the service's check
    is the SDK's."""
    from azure.storage.blob._shared_access_signature import BlobSharedAccessSignature

    key = base64.b64encode(b"k" * 64).decode()
    ours = dict(
        p.split("=", 1) for p in container_sas("acct", base64.b64decode(key), "c", 1.7e9).split("&")
    )
    sdk = BlobSharedAccessSignature("acct", key)
    sdk.x_ms_version = unquote(ours["sv"])  # the version the signature is of
    theirs = dict(
        p.split("=", 1)
        for p in sdk.generate_container(
            "c",
            permission="rl",
            expiry=unquote(ours["se"]),
            start=unquote(ours["st"]),
            protocol="https,http",
        ).split("&")
    )
    assert unquote(theirs["sv"]) == unquote(ours["sv"])
    assert unquote(ours["sig"]) == unquote(theirs["sig"])
